"""Leader epoch -> start offset history of one partition (Kafka's LeaderEpochFileCache).

Followers use it through OffsetsForLeaderEpoch to find where their log diverged from the
leader's, so it is checkpointed to disk on every change.
"""
from __future__ import annotations

import threading
from bisect import bisect_right
from pathlib import Path

from odradek.log.checkpoint import write_atomic

CHECKPOINT_NAME = "leader-epoch-checkpoint"
UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1
_VERSION = 0


class LeaderEpochCache:
    """(epoch, start_offset) pairs, both strictly increasing, persisted in Kafka's text format:
    a version line "0", a count line, then one "epoch offset" line per entry."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._epochs: list[int] = []
        self._offsets: list[int] = []
        self._read()

    def _read(self) -> None:
        try:
            lines = self.path.read_text().split("\n")
        except FileNotFoundError:
            return
        if int(lines[0]) != _VERSION:
            raise ValueError(f"{self.path}: unknown checkpoint version {lines[0]}")
        for line in lines[2:2 + int(lines[1])]:
            epoch, offset = line.split()
            self._epochs.append(int(epoch))
            self._offsets.append(int(offset))

    def _write(self) -> None:
        body = "".join(f"{e} {o}\n" for e, o in zip(self._epochs, self._offsets))
        write_atomic(self.path, f"{_VERSION}\n{len(self._epochs)}\n{body}")

    def entries(self) -> list[tuple[int, int]]:
        with self._lock:
            return list(zip(self._epochs, self._offsets))

    def latest_epoch(self) -> int | None:
        with self._lock:
            return self._epochs[-1] if self._epochs else None

    def assign(self, epoch: int, start_offset: int) -> None:
        """Record that epoch starts at start_offset. Entries that would break monotonicity
        (same or later epoch, or same or later offset) are removed first, as in Kafka."""
        if epoch < 0 or start_offset < 0:
            raise ValueError(f"invalid epoch entry ({epoch}, {start_offset})")
        with self._lock:
            if self._epochs and epoch == self._epochs[-1] and start_offset >= self._offsets[-1]:
                return
            while self._epochs and (self._epochs[-1] >= epoch or self._offsets[-1] >= start_offset):
                self._epochs.pop()
                self._offsets.pop()
            self._epochs.append(epoch)
            self._offsets.append(start_offset)
            self._write()

    def end_offset_for(self, epoch: int, log_end_offset: int) -> tuple[int, int]:
        """(largest known epoch <= epoch, end offset of that epoch), per Kafka's endOffsetFor:
        the latest epoch ends at the log end offset; an older one ends where the next higher
        epoch starts; an epoch below all known ones reports itself with the first start offset;
        an undefined or too-new epoch gives (-1, -1). The log end offset comes from the caller
        (Log.end_offset_for) rather than from a callback into the Log: a Log and its cache
        referring to each other would be a reference cycle, which a dropped partition's Log
        must not be (common/gc_policy.py)."""
        with self._lock:
            if epoch == UNDEFINED_EPOCH or not self._epochs:
                return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
            if epoch == self._epochs[-1]:
                return epoch, log_end_offset
            higher = bisect_right(self._epochs, epoch)
            if higher == len(self._epochs):
                return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
            if higher == 0:
                return epoch, self._offsets[0]
            return self._epochs[higher - 1], self._offsets[higher]

    def truncate_from_end(self, end_offset: int) -> None:
        """Forget epochs starting at or after end_offset (the log was truncated there)."""
        with self._lock:
            if not self._offsets or self._offsets[-1] < end_offset:
                return
            keep = bisect_right(self._offsets, end_offset - 1)
            del self._epochs[keep:], self._offsets[keep:]
            self._write()

    def truncate_from_start(self, start_offset: int) -> None:
        """Drop epochs wholly before start_offset (retention moved the log start); the epoch
        containing start_offset is kept and now starts there."""
        with self._lock:
            keep = bisect_right(self._offsets, start_offset) - 1
            if keep < 0 or (keep == 0 and self._offsets[0] == start_offset):
                return
            del self._epochs[:keep], self._offsets[:keep]
            self._offsets[0] = start_offset
            self._write()

    def clear(self) -> None:
        with self._lock:
            if self._epochs:
                self._epochs.clear()
                self._offsets.clear()
                self._write()
