"""Sparse on-disk indexes of a segment: (relative offset -> position) and (timestamp -> offset).

Entries live in memory and are appended to the file on flush. The file only has to be right
up to the recovery point, because recovery rebuilds the index of every segment past it.
"""
from __future__ import annotations

import os
import struct
from bisect import bisect_right
from pathlib import Path


class SparseIndex:
    """Sorted (key, value) pairs with both columns strictly increasing, stored as fixed-size
    big-endian entries (Kafka: .index is int32 relOffset + int32 position, .timeindex is
    int64 timestamp + int32 relOffset)."""

    def __init__(self, path: Path, fmt: str) -> None:
        self.path = path
        self._entry = struct.Struct(fmt)
        self.keys: list[int] = []
        self.values: list[int] = []
        self._persisted = 0  # entries already in the file

    @classmethod
    def load(cls, path: Path, fmt: str, max_value: int) -> "SparseIndex | None":
        """Read path; None when it is not a plausible index (the caller rebuilds). A missing
        file is an empty index: files are only created once they have an entry."""
        index = cls(path, fmt)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return index
        if len(data) % index._entry.size:
            return None
        for key, value in index._entry.iter_unpack(data):
            if index.keys and (key <= index.keys[-1] or value <= index.values[-1]):
                return None
            if value < 0 or value > max_value:
                return None
            index.keys.append(key)
            index.values.append(value)
        index._persisted = len(index.keys)
        return index

    def append(self, key: int, value: int) -> None:
        self.keys.append(key)
        self.values.append(value)

    def floor(self, key: int) -> int:
        """Position in the entry lists of the last entry with entry key <= key, or -1."""
        return bisect_right(self.keys, key) - 1

    def truncate(self, count: int) -> None:
        """Keep the first count entries, in memory and on disk."""
        del self.keys[count:], self.values[count:]
        if self._persisted > count:
            os.truncate(self.path, count * self._entry.size)
            self._persisted = count

    def clear(self) -> None:
        """Drop every entry and empty the file, if there is one (before a rebuild)."""
        self.keys.clear()
        self.values.clear()
        self._persisted = 0
        try:
            os.truncate(self.path, 0)
        except FileNotFoundError:
            pass

    def flush(self, fsync: bool = True) -> None:
        """Append the entries not yet on disk."""
        if self._persisted == len(self.keys):
            return
        pack = self._entry.pack
        data = b"".join(pack(self.keys[i], self.values[i])
                        for i in range(self._persisted, len(self.keys)))
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            os.write(fd, data)
            if fsync:
                os.fsync(fd)
        finally:
            os.close(fd)
        self._persisted = len(self.keys)

    def __len__(self) -> int:
        return len(self.keys)
