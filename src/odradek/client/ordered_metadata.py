"""What odradek's ordered-delivery clients ask a broker beside the Kafka protocol: an ordered
topic's partition counts and KIP-253's leader epoch maps (PartitionLeaderEpochsForPartitions,
docs/protocol.md), and for operators' tools the groups' blocks (DescribeOrderedGroups, asked of
each group's coordinator).

The clients send their records and fetches through librdkafka, which cannot carry or read
fields it does not know, so this one small blocking connection carries KIP-253's own request.
It speaks ApiVersions v0 first: a broker that does not advertise the request (a stock Kafka
broker) has no ordered delivery, and every topic is plain there. The socket work is
client/broker_connection.py's, shared with the group member.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Iterable, Iterator, Sequence

from odradek.client.broker_connection import BrokerConnection, metadata_response
from odradek.common.metadata import TopicPartition
from odradek.protocol import ordered_delivery_api as api
from odradek.protocol.errors import ErrorCode
from odradek.protocol.schema import SchemaError

log = logging.getLogger(__name__)

_API_VERSIONS = 18
_METADATA, _LIST_OFFSETS, _OFFSET_FOR_LEADER_EPOCH, _DESCRIBE_CONFIGS = 3, 2, 23, 32
_FIND_COORDINATOR, _FIND_COORDINATOR_VERSION = 10, 3
#: a coordinator that moved, is loading the group or is not there yet: find it and ask again
_COORDINATOR_RETRIABLE = frozenset({ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE,
                                    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS})
_RETRY_BACKOFF_S = 0.2


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

    def compacted(self, topics: Iterable[str]) -> dict[str, bool]:
        """Whether each topic's cleanup.policy includes compact (DescribeConfigs); a topic the
        broker does not know is taken as not compacted."""
        names = list(dict.fromkeys(topics))
        last: Exception | None = None
        for _ in range(len(self._addresses)):
            try:
                response = self._connected().request(_DESCRIBE_CONFIGS, 1, {
                    "resources": [{"resource_type": 2, "resource_name": t, "configuration_keys": ["cleanup.policy"]}
                                  for t in names], "include_synonyms": False})
                break
            except OSError as exc:
                last = exc
                self.close()
        else:
            raise OrderedMetadataError(f"no broker answered ({last})")
        out = dict.fromkeys(names, False)
        for result in response.results:
            if result.error_code == ErrorCode.NONE:
                out[str(result.resource_name)] = any(c.name == "cleanup.policy" and "compact" in (c.value or "")
                                                     for c in result.configs)
        return out

    def leader_epochs(self, partitions: Iterable[TopicPartition]
                      ) -> api.PartitionLeaderEpochsForPartitionsResponse | None:
        """KIP-253's maps of each partition (and its topic's counts); None against a broker
        without KIP-253."""
        return self._ask(api.PartitionLeaderEpochsForPartitionsRequest(tuple(partitions)))

    def describe_groups(self, group_ids: Iterable[str]) -> dict[str, api.OrderedGroupDescription] | None:
        """DescribeOrderedGroups of each group at its coordinator (FindCoordinator first), asked
        again while the coordinator moves or loads the group, until this client's timeout (then
        the group's answer carries the last error code: COORDINATOR_NOT_AVAILABLE when no broker
        answered at all). None when a coordinator does not advertise the API (a stock Kafka
        broker, or an odradek broker from before it): that cluster has no blocks to show."""
        wanted = list(dict.fromkeys(group_ids))
        deadline = time.monotonic() + self._timeout_s
        out: dict[str, api.OrderedGroupDescription] = {}
        while True:
            for group_id in [g for g in wanted if g not in out or out[g].error_code in _COORDINATOR_RETRIABLE]:
                described = self._describe_at_coordinator(group_id)
                if described is None:
                    return None
                out[group_id] = described
            if all(d.error_code not in _COORDINATOR_RETRIABLE for d in out.values()) \
                    or time.monotonic() + _RETRY_BACKOFF_S > deadline:
                return {g: out[g] for g in wanted}
            time.sleep(_RETRY_BACKOFF_S)

    def _describe_at_coordinator(self, group_id: str) -> api.OrderedGroupDescription | None:
        """One try: FindCoordinator through the bootstrap connection, then DescribeOrderedGroups
        on a connection of its own to the coordinator (closed after)."""
        try:
            found = self._connected().request(_FIND_COORDINATOR, _FIND_COORDINATOR_VERSION,
                                              {"key": group_id, "key_type": 0})
        except OSError as exc:
            log.debug("FindCoordinator for %s failed: %s", group_id, exc)
            self.close()
            return api.OrderedGroupDescription(ErrorCode.COORDINATOR_NOT_AVAILABLE)
        if found.error_code != 0:
            return api.OrderedGroupDescription(int(found.error_code))
        request = api.DescribeOrderedGroupsRequest((group_id,))
        try:
            conn = BrokerConnection(str(found.host), int(found.port), self._client_id, self._timeout_s)
        except OSError as exc:
            log.debug("coordinator %s:%s of %s unreachable: %s", found.host, found.port, group_id, exc)
            return api.OrderedGroupDescription(ErrorCode.COORDINATOR_NOT_AVAILABLE)
        try:
            versions = self._advertised(conn).get(api.API_DESCRIBE_ORDERED_GROUPS)
            if versions is None or not versions[0] <= 0 <= versions[1]:
                return None
            frame = conn.request_frame(lambda correlation: api.encode_request(request, correlation, self._client_id))
            _, body = api.parse_response_header(frame)
            response = api.decode_response(api.API_DESCRIBE_ORDERED_GROUPS, 0, body)
        except (OSError, SchemaError) as exc:
            log.debug("DescribeOrderedGroups of %s failed: %s", group_id, exc)
            return api.OrderedGroupDescription(ErrorCode.COORDINATOR_NOT_AVAILABLE)
        finally:
            conn.close()
        assert isinstance(response, api.DescribeOrderedGroupsResponse)
        return response.groups.get(group_id, api.OrderedGroupDescription(ErrorCode.UNKNOWN_SERVER_ERROR))

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
        versions = OrderedMetadataClient._advertised(conn).get(api.API_PARTITION_LEADER_EPOCHS_FOR_PARTITIONS)
        return versions is not None and versions[0] <= 0 <= versions[1]

    @staticmethod
    def _advertised(conn: BrokerConnection) -> dict[int, tuple[int, int]]:
        """ApiVersions v0: every API key the broker advertises, with its (min, max) version."""
        response = conn.request(_API_VERSIONS, 0, {})
        if response.error_code != 0:
            raise OSError(f"ApiVersions answered error code {int(response.error_code)}")
        return {int(k.api_key): (int(k.min_version), int(k.max_version)) for k in response.api_keys}


def _leaders(conn: BrokerConnection, topics: list[str]) -> tuple[dict[int, tuple[str, int]], dict[TopicPartition, int]]:
    response = conn.request(_METADATA, 1, {"topics": [{"name": t} for t in topics]})
    brokers = {b.node_id: (b.host, b.port) for b in response.brokers}
    leaders = {TopicPartition(t.name, p.partition_index): p.leader_id for t in response.topics for p in t.partitions}
    return brokers, leaders


def end_offsets_for_epochs(bootstrap: list[tuple[str, int]], client_id: str,
                           epochs: dict[TopicPartition, int]) -> dict[TopicPartition, int]:
    """OffsetsForLeaderEpoch of each partition's epoch, asked of its leader: the first offset
    after the epoch (step 4.3's lowerOffsetThreshold, 5.2's upperOffsetThreshold)."""
    out: dict[TopicPartition, int] = {}
    if not epochs:
        return out
    deadline = time.monotonic() + 30
    while True:
        try:
            out.update(_ask_leaders(bootstrap, client_id, {tp: e for tp, e in epochs.items() if tp not in out}))
        except OSError as exc:
            log.info("OffsetsForLeaderEpoch: %s; retrying", exc)
        if len(out) == len(epochs):
            return out
        if time.monotonic() > deadline:
            raise OrderedMetadataError(f"no leader answered OffsetsForLeaderEpoch for {sorted(set(epochs) - set(out))}")
        time.sleep(0.2)


def _ask_leaders(bootstrap: list[tuple[str, int]], client_id: str,
                 epochs: dict[TopicPartition, int]) -> dict[TopicPartition, int]:
    out = {}
    for conn, asked in _each_leader(bootstrap, client_id, epochs):
        topics: dict[str, list[dict[str, int]]] = {}
        for tp, epoch in asked.items():
            topics.setdefault(tp.topic, []).append(
                {"partition": tp.partition, "current_leader_epoch": -1, "leader_epoch": epoch})
        response = conn.request(_OFFSET_FOR_LEADER_EPOCH, 3, {
            "replica_id": -1, "topics": [{"topic": t, "partitions": ps} for t, ps in topics.items()]})
        for t in response.topics:
            for p in t.partitions:
                if p.error_code == ErrorCode.NONE and p.end_offset >= 0:
                    out[TopicPartition(t.topic, p.partition)] = p.end_offset
    return out


def log_start_offsets(bootstrap: list[tuple[str, int]], client_id: str,
                      partitions: list[TopicPartition]) -> dict[TopicPartition, int]:
    """ListOffsets EARLIEST of each partition, asked of its leader (partitions whose leader did
    not answer are left out)."""
    return _list_offsets(bootstrap, client_id, partitions, -2)


def watermarks(bootstrap: list[tuple[str, int]], client_id: str,
               partitions: list[TopicPartition]) -> dict[TopicPartition, tuple[int, int]]:
    """(log start, high watermark) of each partition, from its leader, found through a
    broker's metadata (librdkafka's own lookup waits for librdkafka's metadata, which can lag a
    partition an expansion just created); partitions whose leader did not answer are left out."""
    lows = _list_offsets(bootstrap, client_id, partitions, -2)
    highs = _list_offsets(bootstrap, client_id, list(lows), -1)
    return {tp: (lows[tp], highs[tp]) for tp in lows if tp in highs}


def _list_offsets(bootstrap: list[tuple[str, int]], client_id: str, partitions: list[TopicPartition],
                  timestamp: int) -> dict[TopicPartition, int]:
    out = {}
    for conn, asked in _each_leader(bootstrap, client_id, dict.fromkeys(partitions, 0)):
        topics: dict[str, list[dict[str, int]]] = {}
        for tp in asked:
            topics.setdefault(tp.topic, []).append({"partition_index": tp.partition, "timestamp": timestamp})
        response = conn.request(_LIST_OFFSETS, 1, {
            "replica_id": -1, "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]})
        for t in response.topics:
            for p in t.partitions:
                if p.error_code == ErrorCode.NONE and p.offset >= 0:
                    out[TopicPartition(t.name, p.partition_index)] = p.offset
    return out


@dataclass(frozen=True)
class CountsAsOf:
    """A topic's counts and the leader epoch of each of its partitions in the metadata of the
    broker that answered them (read first): the counts hold for a record of partition p at
    any epoch up to ``epochs[p]``."""
    counts: api.TopicPartitionCounts | None
    epochs: dict[int, int]


def counts_as_of_epoch(bootstrap: list[tuple[str, int]], client_id: str, tp: TopicPartition,
                       epoch: int) -> CountsAsOf | None:
    """The topic's counts from a broker whose metadata has ``tp`` at ``epoch`` or later; None
    if the broker asked is behind. A broker records a count in the same step as the partition
    states of the UpdateMetadata that brings it, so when Metadata (read first) shows the epoch,
    the counts read next are the ones that came with it or later. Any broker will do, unlike
    asking "the leader" found through someone's metadata, which may be a former leader."""
    host, port = bootstrap[int(time.monotonic() * 10) % len(bootstrap)]
    conn = BrokerConnection(host, port, client_id)
    try:
        response = metadata_response(conn, [tp.topic])
        epochs = {int(p.partition_index): int(p.leader_epoch) for t in response.topics if t.name == tp.topic
                  for p in t.partitions}
        if epochs.get(tp.partition, -1) < epoch:
            return None
        request = api.PartitionLeaderEpochsForPartitionsRequest((), (tp.topic,))
        frame = conn.request_frame(lambda correlation: api.encode_request(request, correlation, client_id))
        _, body = api.parse_response_header(frame)
        answer = api.decode_response(api.API_PARTITION_LEADER_EPOCHS_FOR_PARTITIONS, 0, body)
        assert isinstance(answer, api.PartitionLeaderEpochsForPartitionsResponse)
        return CountsAsOf(answer.counts.get(tp.topic), epochs)
    finally:
        conn.close()


def _each_leader(bootstrap: list[tuple[str, int]], client_id: str, asked: dict[TopicPartition, int]
                 ) -> Iterator[tuple[BrokerConnection, dict[TopicPartition, int]]]:
    """A connection to each leader of the asked partitions in turn, with the ones it leads;
    each closed once the caller moves on (or stops)."""
    host, port = bootstrap[int(time.monotonic()) % len(bootstrap)]
    conn = BrokerConnection(host, port, client_id)
    try:
        brokers, leaders = _leaders(conn, sorted({tp.topic for tp in asked}))
    finally:
        conn.close()
    grouped: dict[int, dict[TopicPartition, int]] = {}
    for tp, value in asked.items():
        leader = leaders.get(tp, -1)
        if leader in brokers:
            grouped.setdefault(leader, {})[tp] = value
    for leader, part in grouped.items():
        conn = BrokerConnection(*brokers[leader], client_id)
        try:
            yield conn, part
        finally:
            conn.close()
