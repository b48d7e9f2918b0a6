"""Telling a refused record that is in the log after all from one that is not
(client/producer_writes.py), on a real cluster: librdkafka's epoch bump sends a record whose
write was in doubt again as new, the fence refuses it, and OrderedProducer must not send it a
second time."""
from __future__ import annotations

from typing import Any

import pytest
from clients import create_topic, ordered_counts
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewPartitions
from polling import wait_until

from odradek.client.ordered_metadata import parse_bootstrap
from odradek.client.ordered_producer import OrderedProducer, _Record
from odradek.client.producer_writes import content_of, producer_id_at, written_by
from odradek.cluster.local_cluster import LocalCluster
from odradek.common.linear_hashing import partition_for_key
from odradek.common.metadata import TopicPartition

pytestmark = pytest.mark.integration


def _produce(producer: Producer, topic: str, values: list[bytes], partition: int) -> list[Any]:
    delivered: list[Any] = []
    for v in values:
        producer.produce(topic, v, key=b"k", partition=partition,
                         on_delivery=lambda err, msg: delivered.append(msg if err is None else err))
    assert producer.flush(30) == 0
    assert all(not isinstance(m, Exception) and m.error() is None for m in delivered), delivered
    return delivered


def test_written_by_finds_one_producers_records_and_no_one_elses(cluster: LocalCluster) -> None:
    bootstrap = cluster.bootstrap_servers
    create_topic(bootstrap, "writes", 1, 3)
    servers = parse_bootstrap(bootstrap)
    tp = TopicPartition("writes", 0)
    ours = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all"})
    theirs = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all"})
    first = _produce(ours, "writes", [b"a", b"b"], 0)
    _produce(theirs, "writes", [b"c", b"a"], 0)  # another producer's copy of an identical value
    later = _produce(ours, "writes", [b"d", b"e", b"e"], 0)

    producer_id = producer_id_at(servers, "test", tp, first[0].offset())
    assert producer_id is not None and producer_id >= 0
    assert producer_id != producer_id_at(servers, "test", tp, first[1].offset() + 1)  # the other's batch

    found = written_by(servers, "test", tp, producer_id, first[1].offset(), 0, 10)
    assert found is not None
    expected = [first[1], *later]
    assert sum(map(len, found.values())) == len(expected)
    for m in expected:
        assert m.offset() in found[content_of(m.key(), m.value(), m.headers())]
    assert found[content_of(b"k", b"e", None)] == [later[1].offset(), later[2].offset()]  # both, in order
    assert content_of(b"k", b"a", None) not in found  # the other producer's copy is not ours

    # from a timestamp instead of an offset: everything of ours stamped at or after it
    since = written_by(servers, "test", tp, producer_id, None, later[0].timestamp()[1], 10)
    assert since is not None and sum(map(len, since.values())) >= len(later)


def test_a_refused_record_found_in_the_log_is_reported_and_not_sent_again(cluster: LocalCluster) -> None:
    """The recovery's check, fed a refusal by hand: a record of the producer's that is in the
    log (written after its last acknowledged one) is reported delivered, not re-sent; one
    that is not in the log is sent again."""
    bootstrap = cluster.bootstrap_servers
    create_topic(bootstrap, "writes-ordered", 4, 3, {"enable.ordered.delivery": "true"})
    key = b"key-1"
    partition = partition_for_key(key, 4, 4)
    reports: list[tuple[Any, Any]] = []
    producer = OrderedProducer({"bootstrap.servers": bootstrap, "acks": "all"})
    for value in (b"v1", b"v2", b"v3"):
        producer.produce("writes-ordered", value, key=key, on_delivery=lambda e, m: reports.append((e, m)))
    assert producer.flush(30) == 0
    assert [e for e, _ in reports] == [None, None, None]
    ordered = producer._topics["writes-ordered"]
    assert ordered is not None
    # as if v2 and v3 had been written but not acknowledged, and refused after an epoch bump
    ordered._acked[partition] = reports[0][1]

    class Sent:
        def __init__(self, msg: Any, value: bytes | None = None) -> None:
            self._msg, self._value = msg, value

        def partition(self) -> int:
            return int(self._msg.partition())

        def timestamp(self) -> tuple[int, int]:
            return self._msg.timestamp()  # type: ignore[no-any-return]

        def key(self) -> bytes:
            return self._msg.key()  # type: ignore[no-any-return]

        def value(self) -> bytes:
            return self._value if self._value is not None else self._msg.value()  # type: ignore[no-any-return]

        def headers(self) -> Any:
            return self._msg.headers()

    again: list[tuple[Any, Any]] = []
    written = ordered._written([
        _Record(b"v2", key, 0, None, lambda e, m: again.append((e, m)), Sent(reports[1][1])),
        _Record(b"v3", key, 0, None, lambda e, m: again.append((e, m)), Sent(reports[2][1])),
        _Record(b"v4", key, 0, None, lambda e, m: again.append((e, m)), Sent(reports[2][1], b"v4")),
        # the same key and value as v1, acknowledged before: a new record, not in the log
        _Record(b"v1", key, 0, None, lambda e, m: again.append((e, m)), Sent(reports[2][1], b"v1")),
    ])
    assert len(written) == 2
    assert [e for e, _ in again] == [None, None]  # v2 and v3 reported delivered; v4 and v1 are to be sent
    assert [m.offset() for _, m in again] == [reports[1][1].offset(), reports[2][1].offset()]
    assert [m.value() for _, m in again] == [b"v2", b"v3"] and again[0][1].error() is None
    producer.close()


def test_a_refused_record_is_sent_again_with_the_timestamp_the_application_gave(cluster: LocalCluster) -> None:
    """A failed delivery report carries no timestamp; the application's must survive the
    re-send after a refusal (event time is the application's, not the re-send's)."""
    bootstrap = cluster.bootstrap_servers
    create_topic(bootstrap, "writes-stamped", 2, 3, {"enable.ordered.delivery": "true"})
    producer = OrderedProducer({"bootstrap.servers": bootstrap, "acks": "all"})
    reports: list[tuple[Any, Any]] = []
    producer.produce("writes-stamped", b"first", key=b"k", on_delivery=lambda e, m: reports.append((e, m)))
    assert producer.flush(30) == 0  # the producer now routes with 2 partitions
    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept alive until the result is in
    admin.create_partitions([NewPartitions("writes-stamped", 3)])["writes-stamped"].result(30)
    wait_until(lambda: ordered_counts(bootstrap, "writes-stamped")[:2] == (2, 3), 30, "the count 3")
    stamp = 1_700_000_000_123
    producer.produce("writes-stamped", b"stamped", key=b"k", timestamp=stamp,
                     on_delivery=lambda e, m: reports.append((e, m)))
    assert producer.flush(30) == 0
    ordered = producer._topics["writes-stamped"]
    assert ordered is not None and ordered.undeleted == 3  # it was refused, and learnt the count
    err, msg = reports[-1]
    assert err is None and msg.timestamp()[1] == stamp
    producer.close()


def test_after_a_count_change_the_check_reads_the_new_producers_id(cluster: LocalCluster) -> None:
    """A count change makes a new inner producer, with a producer id of its own; the check must
    look for that id, not the previous producer's (whose acknowledged offsets stay as the
    partitions' window starts): with the old id it would find nothing and send again."""
    bootstrap = cluster.bootstrap_servers
    create_topic(bootstrap, "writes-pid", 2, 3, {"enable.ordered.delivery": "true"})
    servers = parse_bootstrap(bootstrap)
    before = next(k for k in (b"k%d" % i for i in range(100)) if partition_for_key(k, 2, 2) == 0)
    after = next(k for k in (b"k%d" % i for i in range(100)) if partition_for_key(k, 2, 3) == 1)
    producer = OrderedProducer({"bootstrap.servers": bootstrap, "acks": "all"})
    reports: list[tuple[Any, Any]] = []
    producer.produce("writes-pid", b"a", key=before, on_delivery=lambda e, m: reports.append((e, m)))
    assert producer.flush(30) == 0
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_partitions([NewPartitions("writes-pid", 3)])["writes-pid"].result(30)
    wait_until(lambda: ordered_counts(bootstrap, "writes-pid")[:2] == (2, 3), 30, "the count 3")
    producer.produce("writes-pid", b"b", key=after, on_delivery=lambda e, m: reports.append((e, m)))
    assert producer.flush(30) == 0  # refused under 2, sent again by a new inner producer
    ordered = producer._topics["writes-pid"]
    assert ordered is not None and ordered.undeleted == 3
    (err_a, first), (err_b, second) = reports
    assert err_a is None and err_b is None and (first.partition(), second.partition()) == (0, 1)
    old = producer_id_at(servers, "test", TopicPartition("writes-pid", 0), first.offset())
    new = producer_id_at(servers, "test", TopicPartition("writes-pid", 1), second.offset())
    assert old is not None and new is not None and old != new
    assert ordered._inner_producer_id() == new
    producer.close()


def test_records_deleted_before_the_check_are_named_in_a_warning(cluster: LocalCluster, caplog: Any) -> None:
    """The check's known limit: records deleted (DeleteRecords) before it reads them cannot be
    matched, so a refused record written among them would be sent again; the check says so,
    with the offsets, instead of passing over them in silence."""
    from confluent_kafka import TopicPartition as KafkaTopicPartition

    bootstrap = cluster.bootstrap_servers
    create_topic(bootstrap, "writes-deleted", 1, 3)
    servers = parse_bootstrap(bootstrap)
    tp = TopicPartition("writes-deleted", 0)
    ours = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all"})
    sent = [m for v in (b"a", b"b", b"c", b"d") for m in _produce(ours, "writes-deleted", [v], 0)]  # a batch each
    producer_id = producer_id_at(servers, "test", tp, sent[0].offset())
    assert producer_id is not None
    admin = AdminClient({"bootstrap.servers": bootstrap})
    deleted = admin.delete_records([KafkaTopicPartition("writes-deleted", 0, sent[2].offset())])
    for future in deleted.values():
        future.result(30)
    with caplog.at_level("WARNING", logger="odradek.client.producer_writes"):
        found = written_by(servers, "test", tp, producer_id, sent[1].offset(), 0, 10)
    assert found is not None
    assert sorted(o for offsets in found.values() for o in offsets) == [sent[2].offset(), sent[3].offset()]
    assert any(f"offsets {sent[1].offset()} to {sent[2].offset()} were deleted" in r.getMessage()
               for r in caplog.records), [r.getMessage() for r in caplog.records]
