"""Durable segmented partition logs (no networking, no asyncio)."""
from odradek.log.errors import CorruptRecordError, OffsetOutOfRangeError, UnexpectedAppendOffsetError
from odradek.log.leader_epoch import LeaderEpochCache
from odradek.log.log import Log, LogConfig
from odradek.log.log_manager import LogManager

__all__ = ["CorruptRecordError", "Log", "LogConfig", "LogManager", "LeaderEpochCache",
           "OffsetOutOfRangeError", "UnexpectedAppendOffsetError"]
