"""KIP-890 part 1 at a partition leader: before the first transactional batch of a
transaction is appended to a partition, the leader asks the producer's transaction coordinator
whether that transaction is open and names the partition (AddPartitionsToTxn v4 with
verify_only, or the local coordinator directly). Without it a batch arriving after its
transaction ended (a retry delayed in the network, KAFKA-17754's late message) would open a
transaction that no marker ever ends, and every read_committed consumer of the partition
would stop at it for good (a hanging transaction).

A batch of a transaction already open in the partition needs no check: the leader's producer
state knows it. A marker arriving while a check is under way voids it (Partition's
verification guard), so the check's answer can never let a batch in after its transaction's
marker.

Coordinator errors a producer does not expect from Produce are answered as Kafka's
AddPartitionsToTxnManager answers them: NOT_ENOUGH_REPLICAS (retriable) while the coordinator
moves or loads, INVALID_PRODUCER_EPOCH for a fenced producer.
"""
from __future__ import annotations

import logging

from odradek.broker import api_keys
from odradek.broker.inter_broker_client import BrokerUnreachable, InterBrokerClient
from odradek.broker.metadata_cache import MetadataCache
from odradek.common.metadata import TopicPartition
from odradek.coordinator.partitioning import partition_for
from odradek.coordinator.transaction.transaction_coordinator import TransactionCoordinator
from odradek.coordinator.transaction.transaction_state_manager import TRANSACTION_STATE_TOPIC
from odradek.protocol.errors import ErrorCode
from odradek.security.client_security import PLAINTEXT, ClientSecurity

log = logging.getLogger("odradek.broker.txn_verification")

VERIFY_VERSION = 4  # AddPartitionsToTxn v4: batched, with verify_only
REQUEST_TIMEOUT_S = 10.0

#: coordinator answers a producer cannot take from Produce, as Kafka maps them
_PRODUCE_ERRORS = {
    ErrorCode.NOT_COORDINATOR: ErrorCode.NOT_ENOUGH_REPLICAS,
    ErrorCode.COORDINATOR_NOT_AVAILABLE: ErrorCode.NOT_ENOUGH_REPLICAS,
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS: ErrorCode.NOT_ENOUGH_REPLICAS,
    ErrorCode.REQUEST_TIMED_OUT: ErrorCode.NOT_ENOUGH_REPLICAS,
    ErrorCode.PRODUCER_FENCED: ErrorCode.INVALID_PRODUCER_EPOCH,
}


class TransactionVerifier:
    def __init__(self, broker_id: int, metadata: MetadataCache, coordinator: TransactionCoordinator,
                 partition_count: int, security: ClientSecurity = PLAINTEXT) -> None:
        """``partition_count``: transaction.state.log.num.partitions, until the topic exists;
        ``security``: the inter-broker listener's."""
        self._broker_id = broker_id
        self._metadata = metadata
        self._coordinator = coordinator
        self._default_count = partition_count
        self._client = InterBrokerClient(f"broker-{broker_id}-txn-verifier", metadata, security)

    async def verify(self, transactional_id: str, producer_id: int, producer_epoch: int,
                     partitions: list[TopicPartition]) -> dict[TopicPartition, ErrorCode]:
        """Each partition's answer, as Produce answers it (NONE: append)."""
        state_partitions = self._metadata.partitions(TRANSACTION_STATE_TOPIC) or {}
        index = partition_for(transactional_id, len(state_partitions) or self._default_count)
        state = state_partitions.get(index)
        if state is None or self._metadata.broker(state.leader) is None:
            return dict.fromkeys(partitions, ErrorCode.NOT_ENOUGH_REPLICAS)
        if state.leader == self._broker_id:
            answers = {tp: self._coordinator.verify_partition(transactional_id, producer_id, producer_epoch, tp)
                       for tp in partitions}
        else:
            answers = await self._ask(state.leader, transactional_id, producer_id, producer_epoch, partitions)
        return {tp: _PRODUCE_ERRORS.get(error, error) for tp, error in answers.items()}

    async def _ask(self, coordinator: int, transactional_id: str, producer_id: int, producer_epoch: int,
                   partitions: list[TopicPartition]) -> dict[TopicPartition, ErrorCode]:
        by_topic: dict[str, list[int]] = {}
        for tp in partitions:
            by_topic.setdefault(tp.topic, []).append(tp.partition)
        body = {"transactions": [{"transactional_id": transactional_id, "producer_id": producer_id,
                                  "producer_epoch": producer_epoch, "verify_only": True,
                                  "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()]}]}
        try:
            response = await self._client.request(coordinator, api_keys.ADD_PARTITIONS_TO_TXN, VERIFY_VERSION, body,
                                                  REQUEST_TIMEOUT_S)
        except BrokerUnreachable as exc:
            log.info("verifying %s's transaction: %s", transactional_id, exc)
            return dict.fromkeys(partitions, ErrorCode.NOT_ENOUGH_REPLICAS)
        if response.error_code:
            return dict.fromkeys(partitions, ErrorCode(response.error_code))
        answers = {TopicPartition(t.name, p.partition_index): ErrorCode(p.partition_error_code)
                   for r in response.results_by_transaction for t in r.topic_results for p in t.results_by_partition}
        return {tp: answers.get(tp, ErrorCode.NOT_ENOUGH_REPLICAS) for tp in partitions}

    def close(self) -> None:
        self._client.close()
