"""The `odradek` console script: run brokers and local clusters, and operate on them.

Client commands (topics, produce, consume, bench) speak only the Kafka protocol, so they work
against Apache Kafka as well. Every user error is one `odradek: error: ...` line on stderr and
exit status 1 (2 for bad arguments), never a traceback.

Client commands find the cluster from --bootstrap-server, else --data-dir (every broker of a
cluster `odradek up` started), else $ODRADEK_BOOTSTRAP_SERVERS, else 127.0.0.1:9092.

The commands live in one module per family (cluster_commands, topics, records, groups,
configs, log_dirs, reassign, transactions, bench); parser.py assembles the tree and main.py
runs it. output.py, how the command line talks to a terminal, sits in a lower layer than the
rest of the package: admin/, cluster/ and bench/ print through it too (docs/architecture.md,
"Layers").
"""
