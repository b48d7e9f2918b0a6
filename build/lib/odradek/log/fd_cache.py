"""An LRU of open file descriptors, so thousands of logs can share a bounded fd budget."""
from __future__ import annotations

import os
import threading
from collections import OrderedDict
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator


class FdCache:
    """Opens files on demand and closes the least recently used idle ones beyond max_open.

    A descriptor is pinned while a `use()` block runs, so eviction from another thread never
    closes it mid-read; the cap may then be exceeded briefly.
    """

    def __init__(self, max_open: int) -> None:
        if max_open < 1:
            raise ValueError("max_open must be >= 1")
        self.max_open = max_open
        self._fds: OrderedDict[Path, int] = OrderedDict()
        self._pins: dict[Path, int] = {}
        self._lock = threading.Lock()

    @contextmanager
    def use(self, path: Path) -> Iterator[int]:
        """Yield a read-write descriptor for path (created if missing), pinned for the block."""
        with self._lock:
            fd = self._fds.get(path)
            if fd is None:
                fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
                self._fds[path] = fd
            else:
                self._fds.move_to_end(path)
            self._pins[path] = self._pins.get(path, 0) + 1
            self._evict()
        try:
            yield fd
        finally:
            with self._lock:
                left = self._pins[path] - 1
                if left:
                    self._pins[path] = left
                else:
                    del self._pins[path]
                self._evict()

    def _evict(self) -> None:
        while len(self._fds) > self.max_open:
            victim = next((p for p in self._fds if p not in self._pins), None)  # oldest first
            if victim is None:
                return
            os.close(self._fds.pop(victim))

    def close(self, path: Path) -> None:
        """Close path's descriptor now (before deleting or renaming the file)."""
        with self._lock:
            fd = self._fds.pop(path, None)
            if fd is not None:
                os.close(fd)

    def close_all(self) -> None:
        with self._lock:
            for fd in self._fds.values():
                os.close(fd)
            self._fds.clear()

    def __len__(self) -> int:
        return len(self._fds)
