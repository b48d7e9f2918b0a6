"""FrameBuffer and request-header parsing."""
import struct

import pytest

from odradek.protocol.framing import FrameBuffer, FramingError, parse_request_header


def frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def test_whole_frames_in_one_feed():
    fb = FrameBuffer(1024)
    frames = fb.feed(frame(b"abc") + frame(b"") + frame(b"xyz!"))
    assert [bytes(f) for f in frames] == [b"abc", b"", b"xyz!"]
    assert fb.buffered == 0


def test_partial_data_is_kept_across_feeds():
    fb = FrameBuffer(1024)
    data = frame(b"hello") + frame(b"world")
    got = []
    for i in range(len(data)):
        got += fb.feed(data[i:i + 1])
    assert [bytes(f) for f in got] == [b"hello", b"world"]
    assert fb.buffered == 0


def test_split_inside_size_prefix_and_payload():
    fb = FrameBuffer(1024)
    data = frame(b"first") + frame(b"second")
    assert [bytes(f) for f in fb.feed(data[:2])] == []
    assert [bytes(f) for f in fb.feed(data[2:12])] == [b"first"]
    assert fb.buffered == 3
    assert [bytes(f) for f in fb.feed(data[12:])] == [b"second"]


def test_returned_views_survive_later_feeds():
    fb = FrameBuffer(1024)
    two = frame(b"two")
    first = fb.feed(frame(b"one") + two[:-1])
    second = fb.feed(two[-1:] + frame(b"three"))
    fb.feed(frame(b"x" * 100))
    assert [bytes(f) for f in first + second] == [b"one", b"two", b"three"]


def test_negative_size_raises():
    with pytest.raises(FramingError):
        FrameBuffer(1024).feed(struct.pack(">i", -1))


def test_oversized_frame_raises_before_payload_arrives():
    fb = FrameBuffer(10)
    assert [bytes(f) for f in fb.feed(frame(b"x" * 10))] == [b"x" * 10]
    with pytest.raises(FramingError):
        fb.feed(struct.pack(">i", 11))


def test_parse_request_header_v1():
    header = struct.pack(">hhih", 4, 2, 77, 10) + b"controller"
    key, version, corr, client_id, end = parse_request_header(memoryview(header + b"BODY"))
    assert (key, version, corr, client_id, end) == (4, 2, 77, "controller", len(header))


def test_parse_request_header_null_client_id():
    header = struct.pack(">hhih", 6, 5, 1, -1)
    assert parse_request_header(header) == (6, 5, 1, None, 10)


def test_parse_request_header_v2_skips_tagged_fields():
    # header v2: classic nullable client_id, then tags: count=2; tag 0 size 1 "A"; tag 5 size 2
    header = struct.pack(">hhih", 4, 5, 9, 1) + b"c" + bytes([2, 0, 1, 0x41, 5, 2, 0, 0])
    key, version, corr, client_id, end = parse_request_header(header + b"\x99", flexible=True)
    assert (key, version, corr, client_id, end) == (4, 5, 9, "c", len(header))
    # the same bytes read as v1 stop after client_id
    assert parse_request_header(header, flexible=False)[4] == 11


@pytest.mark.parametrize("data", [
    b"\x00\x04\x00",                                           # shorter than the fixed part
    struct.pack(">hhih", 4, 2, 1, 5) + b"ab",                  # client_id cut short
    struct.pack(">hhih", 4, 2, 1, -1) + bytes([1, 0, 5, 1]),   # tagged field cut short
])
def test_truncated_header_raises(data):
    with pytest.raises(FramingError):
        parse_request_header(data, flexible=True)
