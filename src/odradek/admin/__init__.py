"""Kafka's operator tools and the queries behind them (Kafka's kafka.admin package):
TopicCommand, ConfigCommand, ConsumerGroupCommand, ReassignPartitionsCommand and
DeleteRecordsCommand, each in a module of that name, over admin_client.py's queries.

They speak the Kafka protocol (confluent-kafka's AdminClient, and a raw request where it
has no call), so they work against Apache Kafka as well; only `odradek status` and the
progress of long operations read ZooKeeper (zookeeper.py). errors.py holds the two errors
the command line reports as one line. The `odradek` command-line parsing is odradek.cli's.
"""
