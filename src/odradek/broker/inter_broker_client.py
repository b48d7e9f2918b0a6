"""Requests one broker sends another outside replication: a transaction coordinator's
WriteTxnMarkers to partition leaders, and a leader's KIP-890 check (AddPartitionsToTxn with
verify_only) to a transaction coordinator (Kafka's NodeToNodeChannelManager has this role).

One connection per destination broker, one request at a time on it (KafkaClientConnection
matches a single outstanding correlation id), re-made when the broker's address changes or a
request fails. Any failure is raised as BrokerUnreachable, for the caller to answer with the
retriable error its protocol has.
"""
from __future__ import annotations

import asyncio
from typing import Any

from odradek.broker.kafka_client import KafkaClientConnection
from odradek.broker.metadata_cache import MetadataCache


class BrokerUnreachable(Exception):
    """The broker is not alive in the metadata, or did not answer in time."""


class InterBrokerClient:
    def __init__(self, client_id: str, metadata: MetadataCache) -> None:
        self._client_id = client_id
        self._metadata = metadata
        self._connections: dict[int, tuple[KafkaClientConnection, asyncio.Lock]] = {}

    async def request(self, broker_id: int, api_key: int, version: int, body: dict[str, Any],
                      timeout_s: float) -> Any:
        """The decoded response of ``broker_id`` to one request."""
        conn, lock = self._connection(broker_id)
        try:
            async with lock:
                return await conn.request(api_key, version, body, timeout_s)
        except (OSError, EOFError, asyncio.TimeoutError, ConnectionError, ValueError) as exc:
            # EOFError: asyncio.IncompleteReadError, the broker closed the connection (killed)
            self._drop(broker_id, conn)
            raise BrokerUnreachable(f"broker {broker_id}: {exc!r}") from None

    def _connection(self, broker_id: int) -> tuple[KafkaClientConnection, asyncio.Lock]:
        broker = self._metadata.broker(broker_id)
        if broker is None:
            raise BrokerUnreachable(f"broker {broker_id} is not alive")
        held = self._connections.get(broker_id)
        if held is None or (held[0].host, held[0].port) != (broker.host, broker.port):
            if held is not None:
                held[0].close()
            held = (KafkaClientConnection(broker.host, broker.port, self._client_id), asyncio.Lock())
            self._connections[broker_id] = held
        return held

    def _drop(self, broker_id: int, conn: KafkaClientConnection) -> None:
        held = self._connections.get(broker_id)
        if held is not None and held[0] is conn:
            del self._connections[broker_id]
        conn.close()

    def close(self) -> None:
        for conn, _lock in self._connections.values():
            conn.close()
        self._connections.clear()
