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


def os_error_text(exc: OSError) -> str:
    """An OSError in words a person reads: "Permission denied: /var/lib/x", never Python's
    "[Errno 13] Permission denied: '/var/lib/x'" or a bare class name."""
    text = exc.strerror or str(exc) or type(exc).__name__
    where = exc.filename if exc.filename is not None else None
    return f"{text}: {where}" if where else text
