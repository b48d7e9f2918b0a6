"""What odradek's ordered-delivery clients ask a broker beside the Kafka protocol: an ordered
topic's partition counts and KIP-253's leader epoch maps (PartitionLeaderEpochsForPartitions,
docs/protocol.md).

The clients send their records and fetches through librdkafka, which cannot carry or read
fields it does not know, so this one small blocking connection carries KIP-253's own request.
It speaks ApiVersions v0 first: a broker that does not advertise the request (a stock Kafka
broker) has no ordered delivery, and every topic is plain there. The socket work is
client/broker_connection.py's, shared with the group member.
"""
from __future__ import annotations

import logging
from typing import Iterable, Sequence

from odradek.client.broker_connection import BrokerConnection
from odradek.common.metadata import TopicPartition
from odradek.protocol import ordered_delivery_api as api
from odradek.protocol.schema import SchemaError

log = logging.getLogger(__name__)

_API_VERSIONS = 18


class OrderedMetadataError(Exception):
    """No broker of the bootstrap list answered (a retriable condition for the caller)."""


def parse_bootstrap(servers: str) -> list[tuple[str, int]]:
    """``host:port,host:port`` as librdkafka's bootstrap.servers takes it (an optional
    ``PLAINTEXT://`` prefix, IPv6 in brackets)."""
    out = []
    for item in servers.split(","):
        item = item.strip().split("://", 1)[-1]
        if not item:
            continue
        host, _, port = item.rpartition(":")
        out.append((host.strip("[]") or "localhost", int(port)))
    if not out:
        raise ValueError(f"no broker in bootstrap.servers {servers!r}")
    return out


class OrderedMetadataClient:
    """A connection to one broker at a time, re-made to the next address on any failure."""

    def __init__(self, bootstrap: Sequence[tuple[str, int]], client_id: str, timeout_s: float = 10.0) -> None:
        self._addresses = list(bootstrap)
        self._client_id = client_id
        self._timeout_s = timeout_s
        self._conn: BrokerConnection | None = None
        self._supported: bool | None = None
        self._next_address = 0

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def add_brokers(self, addresses: Iterable[tuple[str, int]]) -> None:
        """Brokers learned from metadata, tried after the bootstrap list."""
        for address in addresses:
            if address not in self._addresses:
                self._addresses.append(address)

    def counts(self, topics: Iterable[str]) -> dict[str, api.TopicPartitionCounts]:
        """Each topic's counts; a topic without ordered delivery (or any topic, against a broker
        without KIP-253) has ``ordered`` False."""
        names = tuple(dict.fromkeys(topics))
        response = self._ask(api.PartitionLeaderEpochsForPartitionsRequest((), names))
        if response is None:
            return {t: api.TopicPartitionCounts() for t in names}
        return {t: response.counts.get(t, api.TopicPartitionCounts()) for t in names}

    def leader_epochs(self, partitions: Iterable[TopicPartition]
                      ) -> api.PartitionLeaderEpochsForPartitionsResponse | None:
        """KIP-253's maps of each partition (and its topic's counts); None against a broker
        without KIP-253."""
        return self._ask(api.PartitionLeaderEpochsForPartitionsRequest(tuple(partitions)))

    def _ask(self, request: api.PartitionLeaderEpochsForPartitionsRequest
             ) -> api.PartitionLeaderEpochsForPartitionsResponse | None:
        last: Exception | None = None
        for _ in range(len(self._addresses)):
            try:
                conn = self._connected()
                if not self._supported:
                    return None
                frame = conn.request_frame(lambda correlation: api.encode_request(request, correlation,
                                                                                  self._client_id))
                _, body = api.parse_response_header(frame)
                response = api.decode_response(api.API_PARTITION_LEADER_EPOCHS_FOR_PARTITIONS, 0, body)
                assert isinstance(response, api.PartitionLeaderEpochsForPartitionsResponse)
                return response
            except (OSError, SchemaError) as exc:
                last = exc
                self.close()
        raise OrderedMetadataError(f"no broker answered ({last})")

    def _connected(self) -> BrokerConnection:
        if self._conn is not None and not self._conn.closed:
            return self._conn
        host, port = self._addresses[self._next_address % len(self._addresses)]
        self._next_address += 1
        conn = BrokerConnection(host, port, self._client_id, self._timeout_s)
        try:
            self._supported = self._speaks_kip_253(conn)
        except BaseException:
            conn.close()
            raise
        self._conn = conn
        return conn

    @staticmethod
    def _speaks_kip_253(conn: BrokerConnection) -> bool:
        """ApiVersions v0: whether the broker advertises PartitionLeaderEpochsForPartitions v0."""
        response = conn.request(_API_VERSIONS, 0, {})
        if response.error_code != 0:
            raise OSError(f"ApiVersions answered error code {int(response.error_code)}")
        for key in response.api_keys:
            if key.api_key == api.API_PARTITION_LEADER_EPOCHS_FOR_PARTITIONS:
                return bool(key.min_version <= 0 <= key.max_version)
        return False
