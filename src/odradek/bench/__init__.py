"""The benchmarks behind `odradek bench`: one module per command (produce, failover,
shutdown, reassign, groups, spark_read), group_members.py for the groups benchmark's member
processes, and common.py for what they share (private clusters, the controller's timing
log, the machine description). docs/benchmarks.md records their figures.
"""
