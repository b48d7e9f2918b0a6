"""Probing background processes by pid (ZooKeeper and brokers run detached, found by pid file)."""
from __future__ import annotations

import os


def process_alive(pid: int) -> bool:
    """Whether `pid` is a live process; reaps it first if it is our exited child."""
    try:
        if os.waitpid(pid, os.WNOHANG)[0] == pid:
            return False
    except ChildProcessError:  # not our child (started by another process): just probe it
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
