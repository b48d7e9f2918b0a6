"""`odradek consume --group G -f` commits what it printed on its timer also while idle: a
member that printed a burst of records and then saw no more must not leave them uncommitted,
or the group's lag counts records printed long ago. The real command runs as a subprocess
and is stopped by pid; the committed offsets are read with confluent-kafka's AdminClient."""
from __future__ import annotations

import pytest
from clients import create_topic, produce_acks_all
from cluster_state import full_isr
from confluent_kafka import ConsumerGroupTopicPartitions
from confluent_kafka.admin import AdminClient
from polling import wait_until

from cli_helpers import Running
from odradek.cli.records import COMMIT_INTERVAL_S
from odradek.cluster.local_cluster import LocalCluster

pytestmark = pytest.mark.integration
#: `cluster` is the shared one (conftest.py): this module's topics, groups and transactional
#: ids are its own, and it neither kills nor reconfigures that cluster's brokers
SHARE_CLUSTER = True


def committed(bootstrap: str, group: str) -> int:
    """The sum of the group's committed offsets (0 where it has none)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    result = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group].result(timeout=10)
    return sum(max(tp.offset, 0) for tp in result.topic_partitions)


def test_an_idle_group_member_commits_what_it_printed(cluster: LocalCluster) -> None:
    bs, topic, group = cluster.bootstrap_servers, "idle-commit", "idle-printer"
    create_topic(bs, topic, 2, 3)
    wait_until(lambda: full_isr(cluster, topic, 3), 30, "full ISRs")
    produce_acks_all(bs, topic, 20, "a")
    consumer = Running("consume", topic, "--group", group, "--from-beginning", "-f", "--bootstrap-server", bs)
    err = ""
    try:
        wait_until(lambda: len(consumer.lines) == 20, 60, "the 20 records printed")
        # no record arrives any more: the timer alone commits them
        wait_until(lambda: committed(bs, group) == 20, COMMIT_INTERVAL_S + 20, "the idle member's commit")
        assert consumer.proc.poll() is None  # still following: not the commit at exit

        produce_acks_all(bs, topic, 5, "b")
        wait_until(lambda: len(consumer.lines) == 25, 30, "the 5 new records printed")
    finally:
        err = consumer.interrupt(60)
    assert "Traceback" not in err and "error" not in err, err
    assert consumer.proc.returncode == 130
    assert committed(bs, group) == 25  # ^C commits what was printed before it leaves the group
