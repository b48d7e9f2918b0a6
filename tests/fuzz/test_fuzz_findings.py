"""What protocol fuzzing found, each as the minimal frame that showed it."""
from __future__ import annotations

import struct
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import crc32c
import pytest

from odradek.common.metadata import PartitionState, TopicPartition
from odradek.fuzz import harness, inprocess, templates
from odradek.fuzz.report import FAILURES
from odradek.protocol import controller_api, kio_util
from odradek.protocol.errors import ErrorCode


@pytest.fixture
def fuzz(tmp_path: Path) -> Iterator[inprocess.InProcessRun]:
    run = inprocess.InProcessRun(tmp_path, 1)
    try:
        with run.clock.installed():
            yield run
    finally:
        run.close()


def framed(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def failures(run: inprocess.InProcessRun) -> list[str]:
    return [f.line() for f in run.report.findings.values() if f.category in FAILURES]


def answer(run: inprocess.InProcessRun, payload: bytes) -> inprocess._Dispatch:
    dispatched = run.run_stream(framed(payload))
    assert not failures(run), "\n".join(failures(run))
    (d,) = dispatched
    assert not failures(run), "\n".join(failures(run))
    return d


# Metadata v3 whose client id length is -2: kio reads it as null and takes the next bytes
# ("fuzz") as the topic count, 1,718,975,098, and asked for 27 GB for it: the process aborted.
HUGE_COUNT = bytes.fromhex("0003000361afa65dfffe66757a7a6572ffffffff")


def test_an_array_count_past_the_frame_is_refused_before_kio_allocates() -> None:
    code = ("import sys; from odradek.protocol import kio_util\n"
            "try:\n    kio_util.decode_request(bytes.fromhex(sys.argv[1]))\n"
            "except ValueError as exc:\n    print('refused:', exc)\n")
    done = subprocess.run([sys.executable, "-c", code, HUGE_COUNT.hex()], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]  # an abort is -6 with a Rust backtrace
    assert done.stdout.startswith("refused: array of 1718975098")


def test_a_huge_count_closes_the_connection(fuzz: inprocess.InProcessRun) -> None:
    assert answer(fuzz, HUGE_COUNT).outcome == "closed"


@pytest.mark.parametrize("payload", [
    struct.pack(">hhihi", 23, 2, 9, 0, -1),                      # OffsetForLeaderEpoch v2, topics null
    struct.pack(">hhihi", 19, 2, 9, 0, -1) + b"\0\0\0\0\0",      # CreateTopics v2, topics null
    struct.pack(">hhihiiiii", 1, 4, 9, 0, -1, 0, 1, 1 << 20, 0)[:-4] + b"\0\xff\xff\xff\xff",  # Fetch v4, topics null
], ids=["offset-for-leader-epoch", "create-topics", "fetch"])
def test_null_where_the_schema_allows_none_closes_the_connection(fuzz: inprocess.InProcessRun,
                                                                 payload: bytes) -> None:
    """kio decoded these as None and the handlers' loops raised TypeError."""
    assert answer(fuzz, payload).outcome == "closed"


def produce(fuzz: inprocess.InProcessRun, records: bytes, topic: str = "sink", partition: int = 0) -> int:
    payload = kio_util.encode_request(0, 9, 5, "t", {"acks": 1, "timeout": 1000, "topic_data": [
        {"name": topic, "partition_data": [{"index": partition, "records": records}]}]})[4:]
    d = answer(fuzz, payload)
    assert d.outcome == "answered"
    return int(fuzz.report.outcomes["answered-with-error"])


def batch_with(field_offset: int, fmt: str, value: int, records: int = 1) -> bytes:
    batch = bytearray(templates.batch(records))
    struct.pack_into(fmt, batch, field_offset, value)
    struct.pack_into(">I", batch, 17, crc32c.crc32c(bytes(batch[21:])))
    return bytes(batch)


@pytest.mark.parametrize("last_offset_delta,records", [(-2, 1), (-(1 << 31), 1), (5, 1), (0, 3)])
def test_a_batch_whose_offsets_do_not_match_its_records_is_corrupt(fuzz: inprocess.InProcessRun,
                                                                  last_offset_delta: int, records: int) -> None:
    """A lastOffsetDelta of -2 took the log end offset back by one, -2^31 made it negative."""
    sink = fuzz.broker.replica_manager.get(TopicPartition("sink", 0))
    before = sink.log.log_end_offset
    errors = produce(fuzz, batch_with(23, ">i", last_offset_delta, records))
    assert errors == 1  # answered CORRUPT_MESSAGE
    assert sink.log.log_end_offset == before


def test_a_follower_fetching_past_the_log_end_is_not_credited(fuzz: inprocess.InProcessRun) -> None:
    """Credited, the follower's bogus position let the high watermark pass records it did not have."""
    tp = TopicPartition(harness.TOPOLOGY.guarded, 1)  # ISR {1, 2}
    partition = fuzz.broker.replica_manager.get(tp)
    leo = partition.log.log_end_offset
    fetch = kio_util.encode_request(1, 12, 6, "t", {"replica_id": 2, "max_wait": 0, "min_bytes": 0, "topics": [
        {"topic": tp.topic, "partitions": [{"partition": 1, "fetch_offset": leo + 1000,
                                            "partition_max_bytes": 1024}]}], "forgotten_topics_data": []})[4:]
    assert answer(fuzz, fetch).outcome == "answered"
    assert fuzz.report.outcomes["answered-with-error"] == 1  # OFFSET_OUT_OF_RANGE
    partition.append_as_leader(templates.batch(2))  # what a producer writes next
    assert partition.high_watermark == leo  # follower 2 has not fetched it


def test_leader_and_isr_naming_an_illegal_topic_creates_no_directory(fuzz: inprocess.InProcessRun,
                                                                    tmp_path: Path) -> None:
    """"nul\\x00" raised ValueError out of the log's open; "../x" made a directory outside."""
    t = harness.TOPOLOGY
    states = tuple(PartitionState(TopicPartition(name, 0), t.controller_epoch, t.broker_id, 9, (t.broker_id,), 0,
                                  (t.broker_id,)) for name in ("../escaped", "nul\x00byte", "a/b"))
    request = controller_api.LeaderAndIsrRequest(2, t.controller_epoch, t.broker_epoch, states, t.live_brokers())
    d = answer(fuzz, controller_api.encode_request(request, 3, "c")[4:])
    assert d.response is not None
    response = controller_api.decode_response(4, 2, controller_api.parse_response_header(4, 2, d.response)[1])
    assert dict(response.partition_errors) == {s.tp: ErrorCode.INVALID_TOPIC_EXCEPTION for s in states}
    assert not list(tmp_path.rglob("escaped*")) and not list(tmp_path.rglob("b-0"))


@pytest.mark.parametrize("version", [10, 11])  # v12+ responses may carry a null name
def test_metadata_naming_a_topic_by_id_without_a_name_is_answered(fuzz: inprocess.InProcessRun,
                                                                  version: int) -> None:
    payload = kio_util.encode_request(3, version, 8, "t", {"topics": [{"topic_id": uuid.UUID(int=1), "name": None}],
                                                      "allow_auto_topic_creation": False,
                                                      "include_cluster_authorized_operations": False,
                                                      "include_topic_authorized_operations": False})[4:]
    assert answer(fuzz, payload).outcome == "answered"


def test_create_topics_with_millions_of_partitions_is_refused_at_once(fuzz: inprocess.InProcessRun) -> None:
    payload = kio_util.encode_request(19, 7, 8, "t", {"topics": [
        {"name": "huge", "num_partitions": 10_000_000, "replication_factor": 1, "assignments": [], "configs": []}],
        "timeout": 1000, "validate_only": True})[4:]
    assert answer(fuzz, payload).outcome == "answered"
