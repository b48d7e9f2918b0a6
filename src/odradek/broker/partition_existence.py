"""Whether the partitions a request names exist, for the APIs that answer
UNKNOWN_TOPIC_OR_PARTITION for those that do not (AddPartitionsToTxn, OffsetCommit,
TxnOffsetCommit), as Kafka's KafkaApis does from its metadata cache.

The metadata cache answers for the partitions it knows; the others are asked of ZooKeeper. A
broker restarted a moment ago has an empty cache until the controller's first UpdateMetadata
(metadata_cache.py), and one that missed an UpdateMetadata lacks a topic just created, yet
UNKNOWN_TOPIC_OR_PARTITION for an existing topic is not retriable in librdkafka's
transactions: fault runs saw producers die of INVALID_TXN_STATE after an AddPartitionsToTxn
so, and a TxnOffsetCommit answered so by a broker restarted 80 ms before failed its
transaction as abortable.
"""
from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable

from odradek.broker.context import BrokerContext
from odradek.broker.txn_marker_channel import missing_in_zookeeper
from odradek.common.metadata import TopicPartition

log = logging.getLogger("odradek.broker.partition_existence")

#: how long the ZooKeeper check may take before the request is answered as retriable
ZK_CHECK_TIMEOUT_S = 5.0


class NotKnownYet(Exception):
    """Whether a partition exists could not be told now (ZooKeeper did not answer)."""


async def unknown_partitions(ctx: BrokerContext, partitions: Iterable[TopicPartition]) -> set[TopicPartition]:
    """The partitions that do not exist; NotKnownYet if ZooKeeper, asked about those the
    cache does not know, did not answer (the caller answers a retriable error)."""
    missing = [tp for tp in partitions if ctx.metadata.partition(tp) is None]
    if not missing:
        return set()
    try:
        return await asyncio.wait_for(asyncio.to_thread(missing_in_zookeeper, ctx.zk, missing), ZK_CHECK_TIMEOUT_S)
    except Exception as exc:  # noqa: BLE001 - ZooKeeper trouble: the client asks again
        log.info("cannot check %s in ZooKeeper: %r", missing, exc)
        raise NotKnownYet from None
