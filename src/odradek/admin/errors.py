"""The two errors an operator's command reports as one line (odradek.cli.main prints them)."""
from __future__ import annotations


class AdminError(RuntimeError):
    """A request failed in a way the operator should read as one line."""


class ClusterError(RuntimeError):
    """A cluster could not be started or found; the message is meant for the operator."""
