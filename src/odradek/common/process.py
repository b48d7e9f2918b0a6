"""Probing background processes by pid (ZooKeeper and brokers run detached, found by pid file)."""
from __future__ import annotations

import os


def process_alive(pid: int) -> bool:
    """Whether `pid` is a live process (not a zombie); reaps it first if it is our exited child."""
    if _reaped(pid):
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    if _zombie(pid):
        _reaped(pid)  # it may have exited since the first look
        return False
    return True


def _reaped(pid: int) -> bool:
    """Whether ``pid`` was our exited child, reaped now (another's child is just probed)."""
    try:
        return os.waitpid(pid, os.WNOHANG)[0] == pid
    except ChildProcessError:
        return False


def _zombie(pid: int) -> bool:
    """An exited process nobody reaped yet. A server started by an `odradek up` that has exited
    since is reparented to PID 1, which may take its time to reap it (or never does, in a
    container whose init does not): waiting for such a pid to vanish would never end."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] == b"Z"
    except (OSError, IndexError):
        return False
