"""The states of Kafka's two controller state machines, and the replica they are kept for.

A leaf module: the context (controller_context.py), both state machines and the managers
built on them (topic deletion, reassignment) import it, and it imports none of them, so the
context need not reach into the state machines for their enums. The transition tables
(VALID_PREVIOUS) stay with the machines that enforce them.
"""
from __future__ import annotations

import enum
from typing import NamedTuple

from odradek.common.metadata import TopicPartition


class PartitionStatus(enum.Enum):
    """Kafka's partition states (named Status: ``metadata.PartitionState`` is the wire entry)."""

    __hash__ = object.__hash__  # identity, in C (see ReplicaStatus)

    NON_EXISTENT = "NonExistentPartition"
    NEW = "NewPartition"
    ONLINE = "OnlinePartition"
    OFFLINE = "OfflinePartition"


class ReplicaStatus(enum.Enum):
    # Members are singletons compared by identity; Enum's own __hash__ is Python code, and a
    # failover hashes a status for every replica it checks against VALID_PREVIOUS.
    __hash__ = object.__hash__

    NEW = "NewReplica"
    ONLINE = "OnlineReplica"
    OFFLINE = "OfflineReplica"
    DELETION_STARTED = "ReplicaDeletionStarted"
    DELETION_SUCCESSFUL = "ReplicaDeletionSuccessful"
    DELETION_INELIGIBLE = "ReplicaDeletionIneligible"
    NON_EXISTENT = "NonExistentReplica"


class PartitionReplica(NamedTuple):
    """One replica: partition ``tp`` hosted on broker ``replica`` (Kafka's PartitionAndReplica).

    A NamedTuple rather than a frozen dataclass: a failover builds, hashes and sorts tens of
    thousands of them, and tuple construction, hashing and ordering run in C."""

    tp: TopicPartition
    replica: int
