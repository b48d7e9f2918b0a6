"""Which partition states an event may take from the controller's cache, and which it must read.

Leaders change ISRs in ZooKeeper on their own (Kafka's ReplicaManager.maybeShrinkIsr and
maybeExpandIsr, under the replication design's ISR rules), so the cached state of a partition can
be behind. Re-reading every state before every decision costs a ZooKeeper round of thousands of
znodes per failover, and most of it is wasted: every controller write is conditional on the
cached znode version, so a write decided on a stale state fails its check and is re-read and
retried (the state machines' retry rounds). What the version check cannot catch is a decision
*not* to write on a stale state (e.g. "the dead replica is not in the ISR", "no live ISR member
to elect"). So: trust the cache where the decision it leads to is a write, or where the
entry was read or written during the current event anyway, and read the rest in one batch.
"""
from __future__ import annotations

from typing import Callable, Iterable

from odradek.common.metadata import LeaderAndIsr, TopicPartition
from odradek.controller.controller_context import ControllerContext
from odradek.controller.seams import ControllerZk


def states_for_writes(
    ctx: ControllerContext,
    zk: ControllerZk,
    tps: Iterable[TopicPartition],
    leads_to_write: Callable[[TopicPartition, LeaderAndIsr], bool],
) -> dict[TopicPartition, LeaderAndIsr]:
    """The state each of ``tps`` should be decided on: the cached one when it is fresh or
    ``leads_to_write(tp, cached)``, else the stored one (absent if its znode is missing)."""
    states: dict[TopicPartition, LeaderAndIsr] = {}
    to_read: list[TopicPartition] = []
    for tp in tps:
        cached = ctx.partition_leadership(tp)
        if cached is not None and (ctx.is_fresh(tp) or leads_to_write(tp, cached)):
            states[tp] = cached
        else:
            to_read.append(tp)
    if to_read:
        states.update(zk.get_partition_states(to_read))
    return states
