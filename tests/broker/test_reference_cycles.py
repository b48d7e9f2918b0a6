"""The broker's hot structures are freed by reference counting alone: the broker freezes what it
holds and never collects frozen objects again (common/gc_policy.py), so a dropped partition,
log or connection that sits in a reference cycle would stay in memory for good. Each test runs
with the collector off and checks that the dropped object is gone."""
from __future__ import annotations

import asyncio
import weakref
from pathlib import Path
from typing import Any

from odradek.broker.connection import KafkaConnection
from odradek.broker.kafka_client import KafkaClientConnection
from odradek.broker.partition import Partition
from odradek.common.metadata import PartitionState, TopicPartition
from odradek.log.log import Log, LogConfig
from odradek.protocol.records import build_batch

TP = TopicPartition("t", 0)


def test_a_deleted_partition_and_its_log_are_freed_without_a_collection(tmp_path: Path, collector_off: None) -> None:
    log = Log.open(tmp_path / "t-0", LogConfig())
    partition = Partition(TP, log, broker_id=1)
    partition.apply_state(PartitionState(TP, 1, 1, 1, (1, 2), 0, (1, 2)))
    partition.append_as_leader(build_batch([(None, b"v")] * 3, timestamp_ms=1000))
    assert log.end_offset_for(1) == (1, 3)  # the leader epoch cache, which once held a closure over its Log
    refs = [weakref.ref(o) for o in (partition, log, log.leader_epoch_cache, partition.producers)]
    partition.close()
    log.delete()
    del partition, log
    assert [r() for r in refs] == [None] * len(refs)


def test_closed_connections_free_their_transports_without_a_collection(collector_off: None) -> None:
    """CPython 3.11's selector transports keep a bound method of themselves; both ends of a
    broker's connections drop it when they close (gc_policy.drop_transport_cycle)."""
    transports: list[weakref.ref[Any]] = []

    class Watched(KafkaConnection):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            transports.append(weakref.ref(transport))
            super().connection_made(transport)

    async def scenario() -> None:
        server = await asyncio.get_running_loop().create_server(
            lambda: Watched(lambda frame, conn: None, 1 << 20), "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        for closing_side in ("client", "server"):
            client = KafkaClientConnection("127.0.0.1", port, "cycles")
            await client.connect()
            assert client._writer is not None
            transports.append(weakref.ref(client._writer.transport))
            await asyncio.sleep(0.05)  # the server side accepted
            if closing_side == "client":
                client.close()
            else:
                server_side = transports[-2]()
                assert server_side is not None
                server_side.close()
                del server_side
                await asyncio.sleep(0.05)
                client.close()
            await asyncio.sleep(0.05)  # connection_lost on both ends
        server.close()
        await server.wait_closed()

    asyncio.run(scenario())
    assert len(transports) == 4
    assert [r() for r in transports] == [None] * 4
