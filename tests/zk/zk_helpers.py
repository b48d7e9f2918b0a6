"""Helpers for tests against a real ZooKeeper: crashed processes and expired sessions."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from kazoo.client import KazooClient

from odradek.zk.client import KafkaZkClient

_CRASHING_BROKER = """
import sys, time
from odradek.common.metadata import BrokerInfo
from odradek.zk.client import KafkaZkClient
zk = KafkaZkClient(sys.argv[1], session_timeout_s=2.0)
zk.start()
zk.register_broker(BrokerInfo(int(sys.argv[2]), "127.0.0.1", int(sys.argv[3])))
print(zk.try_become_controller(int(sys.argv[2])), flush=True)
time.sleep(60)
"""


def crashed_broker(connect: str, broker_id: int, port: int) -> tuple[int, int]:
    """Register and elect broker `broker_id` in a child process, then SIGKILL it.

    Its session (2 s) and ephemerals outlive it for a while: the restart-inside-the-session
    case. Returns the (epoch, zk_version) the child won.
    """
    proc = subprocess.Popen(
        [sys.executable, "-c", _CRASHING_BROKER, connect, str(broker_id), str(port)],
        stdout=subprocess.PIPE, text=True,
    )
    try:
        line = proc.stdout.readline() if proc.stdout else ""
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        if proc.stdout:
            proc.stdout.close()
    epoch, version = line.strip("()\n").split(", ")
    return int(epoch), int(version)


def expire_session(zk: KafkaZkClient) -> None:
    """Expire `zk`'s session from outside, as ZooKeeper does after a long partition:
    a second client joins the same session and closes it (kazoo's own test trick)."""
    session_id, password = zk.kazoo.client_id
    hosts = zk.connect.partition("/")[0]
    other = KazooClient(hosts=hosts, client_id=(session_id, password), timeout=zk.session_timeout_s)
    other.start()
    other.stop()
    other.close()


def wait_until(predicate, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        time.sleep(0.05)
