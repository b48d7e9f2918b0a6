"""A minimal asyncio Kafka client connection: one request in flight, used broker-to-broker.

Followers use it to fetch from leaders. It frames requests with kio and matches the single
outstanding correlation id, which is all a fetcher needs (it waits for each fetch anyway).
"""
from __future__ import annotations

import asyncio
import struct
from typing import Any, Callable

from odradek.common.gc_policy import drop_transport_cycle, release_frames
from odradek.common.netutil import outgoing_address
from odradek.protocol import kio_util
from odradek.security.client_security import PLAINTEXT, ClientSecurity, open_connection


class KafkaClientConnection:
    def __init__(self, host: str, port: int, client_id: str, max_frame_bytes: int = 256 * 1024 * 1024,
                 security: ClientSecurity = PLAINTEXT) -> None:
        self.host, self.port, self.client_id = host, port, client_id
        self.security = security  # the inter-broker listener's: TLS and SASL as it asks
        self._max = max_frame_bytes
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._corr = 0

    async def connect(self, timeout: float = 5.0) -> None:
        try:
            self._reader, self._writer = await asyncio.wait_for(
                open_connection(self.host, self.port, self.security, self.client_id, outgoing_address()), timeout)
        except BaseException as exc:
            release_frames(exc)  # a reference cycle otherwise (common/gc_policy.py)
            raise

    @property
    def connected(self) -> bool:
        return self._writer is not None and not self._writer.is_closing()

    async def request(self, api_key: int, version: int, body: dict[str, Any], timeout: float) -> Any:
        """Send one request and return the decoded response entity."""
        return await self.request_encoded(
            api_key, version, lambda corr: kio_util.encode_request(api_key, version, corr, self.client_id, body),
            timeout)

    async def request_encoded(self, api_key: int, version: int, encode: Callable[[int], bytes],
                              timeout: float) -> Any:
        """Like request(), for a caller that encodes the frame itself given the correlation id.
        A failure's traceback is released (gc_policy.release_frames): the leader dying under
        a follower's fetch, which is always in flight, would otherwise leave a reference cycle
        of the fetch's task, its exception and wait_for's frame, partly frozen."""
        try:
            return await self._request_encoded(api_key, version, encode, timeout)
        except BaseException as exc:
            release_frames(exc)
            raise

    async def _request_encoded(self, api_key: int, version: int, encode: Callable[[int], bytes],
                               timeout: float) -> Any:
        if self._reader is None or self._writer is None:
            await self.connect()
        assert self._reader is not None and self._writer is not None
        self._corr = (self._corr + 1) & 0x7FFFFFFF
        self._writer.write(encode(self._corr))
        await self._writer.drain()
        frame = await asyncio.wait_for(self._read_frame(), timeout)
        corr, response = kio_util.decode_response(api_key, version, frame)
        if corr != self._corr:
            self.close()
            raise ConnectionError(f"correlation id {corr} != {self._corr}")
        return response

    async def _read_frame(self) -> bytes:
        assert self._reader is not None
        (size,) = struct.unpack(">i", await self._reader.readexactly(4))
        if not 0 <= size <= self._max:
            raise ConnectionError(f"bad frame size {size}")
        return await self._reader.readexactly(size)

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            drop_transport_cycle(self._writer.transport)
        self._reader = self._writer = None
