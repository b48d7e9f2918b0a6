"""The dashboard's consumer-group reads (ListGroups, DescribeGroups, OffsetFetch, ListOffsets),
made by a child process that keeps one AdminClient per bootstrap list for its whole life.

Why a process: librdkafka can abort the process that holds an AdminClient. While brokers were
killed and restarted the dashboard died with nothing but ``rd_kafka_enq_once_del_source_return:
Assertion 'eonce->refcnt > 0' failed``; librdkafka reaches it when an admin request's own timeout
has already answered its future and the broker request behind it later fails on the broker's
disconnect (DescribeGroups or ListGroups, https://github.com/confluentinc/librdkafka/issues/4605,
still open), and destroying a client with requests outstanding is another way there. Neither is
the dashboard's to fix, so no librdkafka handle lives in the server's process: if the child
dies, the read reports how (the signal and the child's last stderr line, in the page's errors)
and the next read starts a new child, while the server keeps serving.

Why long-lived clients: a client made and dropped each round (as `odradek groups` makes one per
command) is destroyed with whatever its timed-out futures left outstanding (a DescribeGroups
given up on, the ListOffsets after the first failed one). The child never destroys a client: it
leaves with os._exit when the dashboard closes its stdin. Each request carries librdkafka's
request_timeout (GroupAdmin), so it ends on its own; a round that would still run past its
budget stops describing groups, and a child silent past that is killed and replaced.

The protocol is one JSON line each way per round on the child's stdin and stdout; a request
carries the server's client security settings (client_config, over the pipe, never on a command
line), which the child's clients connect with.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from typing import IO, Any

from odradek.admin.errors import AdminError
from odradek.client import client_config

#: consumer groups described per round (each costs a DescribeGroups, OffsetFetch and ListOffsets)
MAX_GROUPS = 50
#: a round may take this many request timeouts before the groups left are skipped
ROUND_TIMEOUTS = 3
#: how long past its round's budget a silent child is given before it is killed
KILL_GRACE_S = 10.0


def read_groups(admin: Any, deadline: float) -> list[dict[str, Any]]:
    """Each consumer group with its members and per-partition lag, as `odradek groups describe`
    computes it (with its "ordered" section, the KIP-253 blocks, for a group reading an ordered
    topic); the groups still left at ``deadline`` (time.monotonic) carry an error instead."""
    out = []
    for group in admin.list_groups()[:MAX_GROUPS]:
        try:
            if time.monotonic() > deadline:
                raise AdminError("not described: this round ran out of time")
            described = admin.describe(group["group"])
        except AdminError as exc:
            out.append({"group": group["group"], "state": group["state"], "members": 0, "lag": None,
                        "offsets": [], "error": str(exc)})
            continue
        lags = [o["lag"] for o in described["offsets"] if o["lag"] is not None]
        out.append({"group": described["group"], "state": described["state"],
                    "members": len(described["members"]), "coordinator": described["coordinator"],
                    "lag": sum(lags) if lags else None, "offsets": described["offsets"],
                    "ordered": described.get("ordered")})
    return out


class GroupReader:
    """The server's end: one child at a time, started at the first read and again after one
    ended. ``read`` blocks (the poller runs it through asyncio.to_thread)."""

    def __init__(self, command: list[str] | None = None, grace_s: float = KILL_GRACE_S) -> None:
        self._command = command or [sys.executable, "-m", "odradek.ui.kafka_reader"]
        self._grace_s = grace_s
        self._proc: subprocess.Popen[bytes] | None = None
        self._stderr: IO[bytes] | None = None
        self._lock = threading.Lock()

    def read(self, bootstrap: str, timeout: float) -> list[dict[str, Any]]:
        """read_groups' rows; AdminError when the cluster could not be read or the child died."""
        with self._lock:
            if self._proc is not None and self._proc.poll() is not None:  # it died between reads
                raise AdminError(self._ended(self._proc, False))
            proc = self._proc or self._start()
            budget = timeout * ROUND_TIMEOUTS
            expired = threading.Event()

            def kill() -> None:
                expired.set()
                proc.kill()

            killer = threading.Timer(budget + self._grace_s, kill)
            killer.start()
            try:
                assert proc.stdin is not None and proc.stdout is not None
                proc.stdin.write(json.dumps({"bootstrap": bootstrap, "timeout": timeout, "budget": budget,
                                             "settings": client_config.settings()}).encode() + b"\n")
                proc.stdin.flush()
                line = proc.stdout.readline()
            except (OSError, ValueError):  # its stdin closed under us: it died, or the server is stopping
                line = b""
            finally:
                killer.cancel()
            if not line:
                raise AdminError(self._ended(proc, expired.is_set()))
        reply = json.loads(line)
        if "error" in reply:
            raise AdminError(reply["error"])
        return reply["groups"]

    def close(self) -> None:
        """Closes the child's stdin (it leaves at once); killed if it has not within 2 s."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        try:
            if proc.stdin is not None:
                proc.stdin.close()
            proc.wait(2)
        except (OSError, ValueError, subprocess.TimeoutExpired):
            proc.kill()
            proc.wait()

    def _start(self) -> subprocess.Popen[bytes]:
        self._stderr = tempfile.TemporaryFile()
        self._proc = subprocess.Popen(self._command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                      stderr=self._stderr)
        return self._proc

    def _ended(self, proc: subprocess.Popen[bytes], killed: bool) -> str:
        """Why the child gave no answer, with the last line it wrote to stderr (librdkafka's
        assertion, or a Python traceback's last line)."""
        try:
            code = proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            code = proc.wait()
        how = "killed: no answer within its round's time" if killed else \
            f"ended by {signal.Signals(-code).name}" if code < 0 else f"ended with exit code {code}"
        last = ""
        if self._stderr is not None:
            self._stderr.seek(0, os.SEEK_END)
            self._stderr.seek(max(0, self._stderr.tell() - 4096))
            lines = [ln.strip() for ln in self._stderr.read().decode(errors="replace").splitlines() if ln.strip()]
            last = f": {lines[-1]}" if lines else ""
            self._stderr.close()
            self._stderr = None
        if self._proc is proc:
            self._proc = None
        return f"the Kafka client process {how}{last} (a new one starts at the next read)"


def main() -> None:
    """The child: one round per line read, until stdin closes."""
    from odradek.admin.admin_client import admin_client
    from odradek.admin.consumer_group_command import GroupAdmin

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's Ctrl-C is the server's to handle
    replies = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # anything else printed goes to stderr, not into the replies
    clients: dict[str, Any] = {}
    retired: list[Any] = []
    for line in sys.stdin.buffer:
        request = json.loads(line)
        bootstrap, timeout = request["bootstrap"], float(request["timeout"])
        try:
            if request.get("settings") and request["settings"] != client_config.settings():
                client_config.use(request["settings"])
                retired.extend(clients.values())  # made with other settings, kept: never destroyed (module doc)
                clients.clear()
            if bootstrap not in clients:
                clients[bootstrap] = admin_client(bootstrap)
            reply: dict[str, Any] = {"groups": read_groups(GroupAdmin(bootstrap, timeout, clients[bootstrap]),
                                                           time.monotonic() + float(request["budget"]))}
        except Exception as exc:  # noqa: BLE001 - every failure is the server's error line
            # the server's page shows it after plain_words.plain, which drops Python's class names
            reply = {"error": str(exc) if isinstance(exc, AdminError) else f"reading the consumer groups failed: {exc}"}
        replies.write(json.dumps(reply, default=str) + "\n")
        replies.flush()
    os._exit(0)  # no client destroyed: their timed-out requests may still be outstanding


if __name__ == "__main__":
    main()
