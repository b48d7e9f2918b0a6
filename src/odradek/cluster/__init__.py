"""A local cluster on one machine, as `odradek up` and `odradek down` run it: cluster.json's
record of what the cluster is (cluster_spec.py) and the ZooKeeper and broker processes it
starts, probes by pid and stops (local_cluster.py). Tests and benchmarks start their
clusters through it too.
"""
