"""How a transaction coordinator's markers reach the partitions' leaders: Kafka's
TransactionMarkerChannelManager, the network half (the coordinator keeps the retries and the
Complete record: coordinator/transaction/transaction_coordinator.py).

One WriteTxnMarkers request per leader broker per round (inter_broker_client.py), this
broker included: a marker written locally takes the same path as a remote one, so there is one
code path to trust. A partition
whose leader is unknown, or whose leader does not answer, is answered NOT_LEADER_OR_FOLLOWER:
the coordinator tries it again after a backoff, with the leader the metadata then names.
"""
from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from odradek.broker import api_keys
from odradek.broker.inter_broker_client import BrokerUnreachable, InterBrokerClient
from odradek.broker.metadata_cache import MetadataCache
from odradek.common.metadata import TopicPartition
from odradek.protocol.errors import ErrorCode
from odradek.security.client_security import PLAINTEXT, ClientSecurity

log = logging.getLogger("odradek.broker.txn_marker_channel")

WRITE_TXN_MARKERS_VERSION = 1
#: a leader waits for its ISR before answering (acks=all), so this is a replication timeout
REQUEST_TIMEOUT_S = 35.0  # past the leader's own 30 s wait for its ISR (txn_marker_apis.py)


def missing_in_zookeeper(zk: Any, partitions: Iterable[TopicPartition]) -> set[TopicPartition]:
    """The partitions ZooKeeper has no assignment for, in one batched read of their topics
    (blocking: ``zk`` is KafkaZkClient)."""
    partitions = set(partitions)
    assignments = zk.get_topic_assignments({tp.topic for tp in partitions})
    return {tp for tp in partitions
            if tp.topic not in assignments or tp.partition not in assignments[tp.topic].partitions}


class TxnMarkerChannel:
    """The broker's TxnMarkerWriter (coordinator/transaction/transaction_coordinator.py)."""

    def __init__(self, broker_id: int, metadata: MetadataCache, zk: Any, security: ClientSecurity = PLAINTEXT) -> None:
        """``zk``: KafkaZkClient (blocking; called through asyncio.to_thread); ``security``: the
        inter-broker listener's."""
        self._metadata = metadata
        self._zk = zk
        self._client = InterBrokerClient(f"broker-{broker_id}-txn-marker-sender", metadata, security)

    async def partitions_deleted(self, partitions: set[TopicPartition]) -> set[TopicPartition]:
        """Those ZooKeeper no longer has: their topic deleted, or the partition removed
        (KIP-253). This broker's metadata cache cannot tell: just started, it may not know a
        topic yet (Kafka skips a marker whose partition has no known leader; taken for deleted
        at a restarted coordinator, a commit was completed without its markers, and a later
        abort marker took its records)."""
        return await asyncio.to_thread(missing_in_zookeeper, self._zk, partitions)

    async def write_markers(self, producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int,
                            partitions: set[TopicPartition]) -> dict[TopicPartition, ErrorCode]:
        """One round: each partition's answer from its leader (NOT_LEADER_OR_FOLLOWER where no
        leader is known or it did not answer; UNKNOWN_TOPIC_OR_PARTITION where the metadata
        has no such partition)."""
        answers: dict[TopicPartition, ErrorCode] = {}
        by_leader: dict[int, list[TopicPartition]] = defaultdict(list)
        for tp in partitions:
            state = self._metadata.partition(tp)
            if state is None:
                answers[tp] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            elif self._metadata.broker(state.leader) is None:
                answers[tp] = ErrorCode.NOT_LEADER_OR_FOLLOWER
            else:
                by_leader[state.leader].append(tp)
        rounds = [self._send(leader, tps, producer_id, producer_epoch, commit, coordinator_epoch)
                  for leader, tps in by_leader.items()]
        for answered in await asyncio.gather(*rounds):
            answers.update(answered)
        return answers

    async def _send(self, leader: int, partitions: list[TopicPartition], producer_id: int, producer_epoch: int,
                    commit: bool, coordinator_epoch: int) -> dict[TopicPartition, ErrorCode]:
        by_topic: dict[str, list[int]] = defaultdict(list)
        for tp in partitions:
            by_topic[tp.topic].append(tp.partition)
        body = {"markers": [{"producer_id": producer_id, "producer_epoch": producer_epoch,
                             "transaction_result": commit, "coordinator_epoch": coordinator_epoch,
                             "topics": [{"name": t, "partition_indexes": ps} for t, ps in by_topic.items()]}]}
        try:
            response = await self._client.request(leader, api_keys.WRITE_TXN_MARKERS, WRITE_TXN_MARKERS_VERSION,
                                                  body, REQUEST_TIMEOUT_S)
        except BrokerUnreachable as exc:
            log.info("WriteTxnMarkers for producer %d: %s; tried again", producer_id, exc)
            return dict.fromkeys(partitions, ErrorCode.NOT_LEADER_OR_FOLLOWER)
        answers = {TopicPartition(t.name, p.partition_index): ErrorCode(p.error_code)
                   for m in response.markers for t in m.topics for p in t.partitions}
        for tp in partitions:  # a partition the answer left out is asked again
            answers.setdefault(tp, ErrorCode.NOT_LEADER_OR_FOLLOWER)
        return answers

    def close(self) -> None:
        self._client.close()
