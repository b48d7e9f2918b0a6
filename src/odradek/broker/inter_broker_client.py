"""Requests one broker sends another outside replication: a transaction coordinator's
WriteTxnMarkers to partition leaders, and a leader's KIP-890 check (AddPartitionsToTxn with
verify_only) to a transaction coordinator (Kafka's NodeToNodeChannelManager has this role).

One connection per destination broker, one request at a time on it (KafkaClientConnection
matches a single outstanding correlation id), re-made when the broker's address changes or a
request fails. Any failure is raised as BrokerUnreachable, for the caller to answer with the
retriable error its protocol has.

Fail fast: after a request to a broker fails, every request to it fails at once for
FAILED_BACKOFF_S, those already queued behind the failed one included. Without it, requests
queue on the one connection to a broker that accepts connections but never answers (a
SIGSTOPped process: its kernel still completes the handshake), each waiting out its own
timeout: in a fault run the KIP-890 checks of many produce requests queued so, and a
TxnOffsetCommit behind them went unanswered for minutes.
"""
from __future__ import annotations

import asyncio
import time
from typing import Any

from odradek.broker.kafka_client import KafkaClientConnection
from odradek.broker.metadata_cache import MetadataCache
from odradek.security.client_security import PLAINTEXT, ClientSecurity


class BrokerUnreachable(Exception):
    """The broker is not alive in the metadata, or did not answer in time."""


#: how long a broker whose request just failed is taken for unreachable
FAILED_BACKOFF_S = 1.0


class InterBrokerClient:
    def __init__(self, client_id: str, metadata: MetadataCache, security: ClientSecurity = PLAINTEXT) -> None:
        self._client_id = client_id
        self._security = security
        self._metadata = metadata
        self._connections: dict[int, tuple[KafkaClientConnection, asyncio.Lock]] = {}
        self._failed_until: dict[int, float] = {}  # broker id -> monotonic time its failures end

    async def request(self, broker_id: int, api_key: int, version: int, body: dict[str, Any],
                      timeout_s: float) -> Any:
        """The decoded response of ``broker_id`` to one request."""
        self._check_backoff(broker_id)
        conn, lock = self._connection(broker_id)
        try:
            async with lock:
                self._check_backoff(broker_id)  # the request before this one failed meanwhile
                return await conn.request(api_key, version, body, timeout_s)
        except (OSError, EOFError, asyncio.TimeoutError, ConnectionError, ValueError) as exc:
            # EOFError: asyncio.IncompleteReadError, the broker closed the connection (killed)
            self._failed_until[broker_id] = time.monotonic() + FAILED_BACKOFF_S
            self._drop(broker_id, conn)
            raise BrokerUnreachable(f"broker {broker_id}: {exc!r}") from None

    def _check_backoff(self, broker_id: int) -> None:
        if time.monotonic() < self._failed_until.get(broker_id, 0.0):
            raise BrokerUnreachable(f"broker {broker_id}: a request to it failed less than {FAILED_BACKOFF_S:g} s ago")

    def _connection(self, broker_id: int) -> tuple[KafkaClientConnection, asyncio.Lock]:
        broker = self._metadata.broker(broker_id)
        if broker is None:
            raise BrokerUnreachable(f"broker {broker_id} is not alive")
        held = self._connections.get(broker_id)
        if held is None or (held[0].host, held[0].port) != (broker.host, broker.port):
            if held is not None:
                held[0].close()
            held = (KafkaClientConnection(broker.host, broker.port, self._client_id, security=self._security),
                    asyncio.Lock())
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
