"""The exclusive lock a broker holds on its data directory for its whole life (Kafka's
LogManager.lockLogDirs, a FileLock on `<log.dir>/.lock`).

Without it a second broker started by mistake on a running broker's data directory (another
broker.id, another port) opens the same logs, and its startup deletes every log not assigned to
its own id as a stray one: acknowledged records of the first broker are gone. With it the second
process refuses to start before it reads or changes anything there.

The lock is flock(2) on `.lock`: the kernel drops it when the holder exits, also on kill -9, so
a crashed broker never leaves a stale lock behind. The holder writes its pid into the file so
that the refused process can name it; the pid is only a hint for the operator, never trusted.
"""
from __future__ import annotations

import fcntl
import os
from pathlib import Path

from odradek.common.errors import StartupRefusedError

LOCK_FILE = ".lock"


class LogDirInUseError(StartupRefusedError):
    """Another live process holds the data directory's lock."""

    def __init__(self, data_dir: Path, holder_pid: int | None) -> None:
        holder = f"process {holder_pid}" if holder_pid else "another process"
        super().__init__(f"data dir {data_dir} is in use by {holder} (its {LOCK_FILE} is locked); "
                         f"each broker needs a data dir of its own")
        self.data_dir = data_dir
        self.holder_pid = holder_pid


class LogDirLock:
    """An exclusive, non-blocking lock on ``data_dir/.lock``; ``release`` or process exit frees it."""

    def __init__(self, data_dir: Path) -> None:
        self.path = Path(data_dir) / LOCK_FILE
        self._fd: int | None = None

    def acquire(self) -> None:
        """Take the lock or raise LogDirInUseError at once (never waits: a second broker must
        fail fast, not start when the first one stops)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read_pid(fd)
            os.close(fd)
            raise LogDirInUseError(self.path.parent, holder) from None
        except BaseException:
            os.close(fd)
            raise
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd

    def release(self) -> None:
        """Free the lock (the file stays, as Kafka's does)."""
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None


def _read_pid(fd: int) -> int | None:
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None
