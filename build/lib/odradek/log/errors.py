"""Storage errors. CorruptRecordError lives with the batch format and is re-exported here."""
from __future__ import annotations

from odradek.protocol.records import CorruptRecordError

__all__ = ["CorruptRecordError", "OffsetOutOfRangeError", "UnexpectedAppendOffsetError"]


class OffsetOutOfRangeError(Exception):
    """A read asked for an offset outside [log_start_offset, log_end_offset]."""


class UnexpectedAppendOffsetError(Exception):
    """A follower append did not start at the log end offset or its offsets went backwards."""
