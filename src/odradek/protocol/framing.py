"""Kafka's length-prefixed framing and the request header, without any I/O.

Kept sans-I/O so the asyncio broker, the blocking controller channel and the tests share one
implementation: they feed whatever bytes the socket produced and get whole frames back.
"""
from __future__ import annotations

import struct

from odradek.protocol.schema import SchemaError, TaggedFields

_SIZE = struct.Struct(">i")
_HEADER_FIXED = struct.Struct(">hhih")  # api_key, api_version, correlation_id, client_id length

DEFAULT_MAX_FRAME_BYTES = 100 * 1024 * 1024  # Kafka's socket.request.max.bytes default


class FramingError(Exception):
    """The peer sent a size prefix or header no well-behaved Kafka peer sends; close the socket."""


class FrameBuffer:
    """Accumulates socket reads and cuts them into frames (payloads without the size prefix).

    Returned memoryviews stay valid after later feeds: each call copies the complete frames out of
    the internal buffer at most once (zero copies when a read holds only whole frames), so callers
    can keep a frame while reading the next one.
    """

    def __init__(self, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> None:
        self.max_frame_bytes = max_frame_bytes
        self._buf = bytearray()

    @property
    def buffered(self) -> int:
        """Bytes of an incomplete frame held back for the next feed."""
        return len(self._buf)

    def feed(self, data: bytes) -> list[memoryview]:
        """Add `data` and return every frame it completes, in order.

        Raises FramingError as soon as a size prefix is negative or above max_frame_bytes, before
        its payload arrives, so a bogus length cannot make us buffer gigabytes.
        """
        if self._buf:
            self._buf += data
            src: bytes | bytearray = self._buf
        else:
            src = bytes(data)
        spans = []
        pos, avail = 0, len(src)
        while avail - pos >= 4:
            (size,) = _SIZE.unpack_from(src, pos)
            if size < 0 or size > self.max_frame_bytes:
                raise FramingError(f"frame size {size} outside [0, {self.max_frame_bytes}]")
            if avail - pos - 4 < size:
                break
            spans.append((pos + 4, pos + 4 + size))
            pos += 4 + size
        if src is self._buf:
            complete: bytes | bytearray = bytes(self._buf[:pos]) if pos else b""
            del self._buf[:pos]
        else:
            complete = src
            self._buf += memoryview(src)[pos:]
        view = memoryview(complete)
        return [view[start:end] for start, end in spans]


def parse_request_header(
    frame: bytes | memoryview, flexible: bool = False
) -> tuple[int, int, int, str | None, int]:
    """Read a request header: (api_key, api_version, correlation_id, client_id, header_end_offset).

    Header v1 is int16 key, int16 version, int32 correlation id, nullable int16-length client id.
    Header v2 (flexible API versions) keeps that client id encoding and appends a tagged-field
    section, skipped when `flexible`. Flexibility depends on key and version, so a caller that does
    not know them yet parses with flexible=False and then skips the tags itself with
    `schema.TaggedFields.decode(frame, header_end_offset)`.
    """
    try:
        api_key, api_version, correlation_id, n = _HEADER_FIXED.unpack_from(frame, 0)
    except struct.error as exc:
        raise FramingError(f"request header truncated: {exc}") from exc
    pos = _HEADER_FIXED.size
    client_id = None
    if n >= 0:
        if pos + n > len(frame):
            raise FramingError("request header truncated in client_id")
        try:
            client_id = str(frame[pos:pos + n], "utf-8")
        except UnicodeDecodeError as exc:
            raise FramingError(f"client_id is not UTF-8: {exc}") from exc
        pos += n
    if flexible:
        view = frame if isinstance(frame, memoryview) else memoryview(frame)
        try:
            _, pos = TaggedFields.decode(view, pos)
        except SchemaError as exc:
            raise FramingError(f"request header tagged fields: {exc}") from exc
    return api_key, api_version, correlation_id, client_id, pos
