"""The inter-broker client fails fast: once a request to a broker fails, the requests queued
behind it on the one connection (KIP-890 checks of many produce requests) fail at once instead
of each waiting out its own timeout against a broker that accepts connections and never
answers (a SIGSTOPped one)."""
from __future__ import annotations

import asyncio
import socket
import time

from odradek.broker.inter_broker_client import BrokerUnreachable, InterBrokerClient
from odradek.broker.metadata_cache import MetadataCache
from odradek.common.metadata import BrokerInfo


def test_requests_queued_behind_a_failed_one_fail_at_once() -> None:
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(16)  # completes handshakes, never reads: a stopped broker
    port = silent.getsockname()[1]
    metadata = MetadataCache()
    metadata.update(1, 1, (BrokerInfo(7, "127.0.0.1", port),), [])
    client = InterBrokerClient("test", metadata)

    async def ask() -> float:
        started = time.monotonic()
        try:
            await client.request(7, 18, 0, {}, 0.5)
        except BrokerUnreachable:
            return time.monotonic() - started
        raise AssertionError("a silent broker answered")

    async def main() -> list[float]:
        return list(await asyncio.gather(*(ask() for _ in range(10))))
    try:
        waited = asyncio.run(main())
    finally:
        client.close()
        silent.close()
    assert max(waited) < 1.5, waited  # ten queued requests: one timeout, not ten
