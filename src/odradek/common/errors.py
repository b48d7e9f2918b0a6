"""Errors that more than one layer raises or catches (Kafka's org.apache.kafka.common.errors).

NotLeaderError is raised by the broker's Partition and caught by the coordinators below the
broker, which wait on a partition of their internal topic through the seam of
odradek.coordinator.seams: defined here, neither has to import the other.
"""
from __future__ import annotations


class NotLeaderError(Exception):
    """The partition's leadership moved while a request was waiting on it (Kafka's
    NotLeaderOrFollowerException)."""


class StartupRefusedError(Exception):
    """A broker refuses to start because of how it was started, not because of a bug: its data
    dir is held by another process or belongs to another broker or cluster, or its broker.id is
    registered by a live broker. Raised before the broker changes anything; the `odradek broker`
    command prints the message as one line (an operator's mistake, never an internal error)."""
