"""The hand-written hot-path encoders must produce exactly what kio decodes, for every version."""
from __future__ import annotations

import pytest

from odradek.protocol import fast_paths, kio_util


def _join(parts: list[bytes | memoryview]) -> bytes:
    return b"".join(bytes(p) for p in parts)


@pytest.mark.parametrize("version", range(3, 10))
def test_produce_response_matches_kio(version: int) -> None:
    topics = [("alpha", [(0, 0, 42, 7), (3, 6, -1, -1)]), ("b" * 40, [(1, 0, 2**40, 0)])]
    frame = fast_paths.produce_response(version, 99, topics)
    assert int.from_bytes(frame[:4], "big") == len(frame) - 4
    corr, resp = kio_util.decode_response(0, version, frame[4:])
    assert corr == 99
    got = [(t.name, [(p.index, int(p.error_code), p.base_offset, p.log_start_offset if version >= 5 else None)
                     for p in t.partition_responses]) for t in resp.responses]
    assert got == [(n, [(i, e, b, ls if version >= 5 else None) for i, e, b, ls in ps]) for n, ps in topics]
    # and byte-for-byte what kio itself writes
    body = {"throttle_time": 0, "responses": [
        {"name": n, "partition_responses": [{"index": i, "error_code": e, "base_offset": b, "log_start_offset": ls,
                                             "record_errors": []} for i, e, b, ls in ps]} for n, ps in topics]}
    assert frame == kio_util.encode_response(0, version, 99, body)


@pytest.mark.parametrize("version", range(8, 10))
def test_produce_response_error_message_matches_kio(version: int) -> None:
    """KIP-467's ErrorMessage: what librdkafka shows in the delivery report of a refused batch."""
    topics = [("t", [(0, 87, -1, -1), (1, 0, 5, 0)])]
    frame = fast_paths.produce_response(version, 3, topics, {("t", 0): "key k belongs to partition 1"})
    body = {"throttle_time": 0, "responses": [{"name": "t", "partition_responses": [
        {"index": 0, "error_code": 87, "base_offset": -1, "log_start_offset": -1, "record_errors": [],
         "error_message": "key k belongs to partition 1"},
        {"index": 1, "error_code": 0, "base_offset": 5, "log_start_offset": 0, "record_errors": []}]}]}
    assert frame == kio_util.encode_response(0, version, 3, body)
    _, resp = kio_util.decode_response(0, version, frame[4:])
    assert [p.error_message for p in resp.responses[0].partition_responses] == ["key k belongs to partition 1", None]


@pytest.mark.parametrize("version", range(4, 13))
def test_fetch_response_matches_kio(version: int) -> None:
    records = b"\x01" * 300
    topics = [("t", [(0, 0, 10, 0, memoryview(records), 8, [(7, 2), (9, 4)]), (1, 6, -1, -1, b"", -1, None),
                     (2, 0, 5, 5, b"", 5, [])]),
              ("u", [(9, 1, 3, 1, b"xyz", 3, None)])]
    parts = fast_paths.fetch_response(version, 5, topics)
    frame = _join(parts)
    assert int.from_bytes(frame[:4], "big") == len(frame) - 4
    assert any(p is not None and isinstance(p, memoryview) for p in parts)  # records are not copied
    corr, resp = kio_util.decode_response(1, version, frame[4:])
    assert corr == 5
    got = [(t.topic, [(p.partition_index, int(p.error_code), p.high_watermark, p.records) for p in t.partitions])
           for t in resp.responses]
    want = [(n, [(i, e, hw, bytes(r)) for i, e, hw, _ls, r, _lso, _a in ps]) for n, ps in topics]
    assert got == want  # an error partition carries empty records, never null (librdkafka drops null)
    if version >= 4:
        assert [p.last_stable_offset for t in resp.responses for p in t.partitions] == [8, -1, 5, 3]
        assert [None if p.aborted_transactions is None else [(a.producer_id, a.first_offset)
                                                              for a in p.aborted_transactions]
                for t in resp.responses for p in t.partitions] == [[(7, 2), (9, 4)], None, [], None]
    if version >= 5:
        assert [p.log_start_offset for t in resp.responses for p in t.partitions] == [0, -1, 5, 1]


def test_follower_fetch_request_matches_kio() -> None:
    topics = [("topic-a", [(0, 3, 100, 0, 1 << 20), (4, 3, 7, 2, 4096)]), ("b", [(1, 0, 0, 0, 1)])]
    frame = fast_paths.follower_fetch_request(17, "replica-fetcher-2", 2, 500, 8 << 20, topics)
    assert int.from_bytes(frame[:4], "big") == len(frame) - 4
    header, req = kio_util.decode_request(memoryview(frame)[4:])
    assert (header.request_api_key, header.request_api_version, header.correlation_id) == (1, 12, 17)
    assert header.client_id == "replica-fetcher-2"
    assert (req.replica_id, req.max_wait.total_seconds(), req.min_bytes, req.max_bytes) == (2, 0.5, 1, 8 << 20)
    got = [(t.topic, [(p.partition, p.current_leader_epoch, p.fetch_offset, p.log_start_offset, p.partition_max_bytes)
                      for p in t.partitions]) for t in req.topics]
    assert got == topics
    assert req.forgotten_topics_data == () and req.rack_id == ""
