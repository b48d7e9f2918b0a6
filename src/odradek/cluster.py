"""`odradek up/down`: a whole cluster (private ZooKeeper + N brokers) as background processes.

Every process is started in its own session with its pid in a file under the data dir, so a
later `odradek up` or `odradek down` from another shell (or a test) can find, restart or stop
it without a supervisor process.
"""
from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from kazoo.client import KazooClient

from odradek.netutil import port_free
from odradek.process import process_alive
from odradek.zk import paths

if TYPE_CHECKING:
    from odradek.zk.server import ZooKeeperServer

STATE_FILE = "cluster.json"
_POLL_S = 0.2


class ClusterError(RuntimeError):
    """A cluster could not be started or found; the message is meant for the operator."""


def connect_zk(hosts: str, timeout: float = 10.0) -> KazooClient:
    """A started kazoo client whose connection-retry chatter does not reach the terminal."""
    log = logging.getLogger("odradek.kazoo")
    if not log.handlers:
        log.addHandler(logging.NullHandler())
        log.propagate = False
    client = KazooClient(hosts=hosts, logger=log)
    try:
        client.start(timeout=timeout)
    except Exception as exc:  # kazoo raises its own timeout type, or socket errors for bad hosts
        client.close()
        raise ClusterError(f"cannot reach ZooKeeper at {hosts} within {timeout:g} s ({exc})") from None
    return client


def tail(path: Path, lines: int = 20) -> str:
    """The last lines of a log, for error messages that must explain why a process died."""
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return f"(no log at {path})"


def pid_alive(pid: int | None) -> bool:
    """True if `pid` runs an odradek process; reaps our own zombies and ignores recycled pids."""
    if not pid or not process_alive(pid):
        return False
    proc = Path(f"/proc/{pid}")
    if not proc.exists():
        return True
    try:
        state = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]
        return state != "Z" and b"odradek" in (proc / "cmdline").read_bytes()
    except (OSError, IndexError):
        return False


def _read_pid(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def _stop_pids(pids: list[int], timeout: float) -> None:
    """SIGTERM each process group, then SIGKILL whatever is still alive at the deadline."""
    for pid in pids:
        _signal_group(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while any(pid_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    for pid in pids:
        if pid_alive(pid):
            _signal_group(pid, signal.SIGKILL)
    while any(pid_alive(p) for p in pids) and time.monotonic() < deadline + 5:
        time.sleep(0.05)


def _signal_group(pid: int, sig: int) -> None:
    # start_new_session made each broker a group leader: the group holds anything it spawned.
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


class LocalCluster:
    """ZooKeeper plus brokers 1..N on one host, all state under `data_dir`.

    Broker i listens on base_port + i - 1. With `zookeeper` given (e.g. a shared test server
    with a chroot) no private ZooKeeper is started; otherwise one runs on zk_port.
    `broker_args` are BrokerConfig field overrides (e.g. {"min_insync_replicas": 2}); they are
    written to each broker's server.properties under Kafka's dotted names.
    """

    def __init__(
        self,
        data_dir: Path,
        brokers: int,
        base_port: int = 9092,
        zk_port: int = 2181,
        zookeeper: str | None = None,
        host: str = "127.0.0.1",
        broker_args: dict | None = None,
    ) -> None:
        if brokers < 1:
            raise ClusterError("a cluster needs at least one broker")
        self.data_dir = Path(data_dir).resolve()
        self.brokers = brokers
        self.base_port = base_port
        self.zk_port = zk_port
        self.host = host
        self.private_zookeeper = zookeeper is None
        self._zookeeper = zookeeper or f"{host}:{zk_port}"
        self.broker_args = dict(broker_args or {})
        self._procs: dict[int, subprocess.Popen] = {}

    @classmethod
    def load(cls, data_dir: Path) -> "LocalCluster":
        """The cluster `odradek up` left in `data_dir`, as recorded in its cluster.json."""
        path = Path(data_dir) / STATE_FILE
        try:
            state = json.loads(path.read_text())
        except FileNotFoundError:
            raise ClusterError(f"no cluster in {data_dir} (missing {STATE_FILE}; run `odradek up`)") from None
        except (OSError, ValueError) as exc:
            raise ClusterError(f"cannot read {path}: {exc}") from None
        return cls(
            Path(data_dir),
            len(state["brokers"]),
            base_port=state["base_port"],
            zk_port=state["zk_port"],
            zookeeper=None if state["private_zookeeper"] else state["zookeeper"],
            host=state["host"],
            broker_args=state.get("broker_args"),
        )

    @property
    def broker_ids(self) -> list[int]:
        return list(range(1, self.brokers + 1))

    @property
    def zookeeper_connect(self) -> str:
        return self._zookeeper

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(f"{self.host}:{self.broker_port(b)}" for b in self.broker_ids)

    def broker_port(self, broker_id: int) -> int:
        return self.base_port + broker_id - 1

    def broker_dir(self, broker_id: int) -> Path:
        return self.data_dir / f"broker-{broker_id}"

    def broker_pid(self, broker_id: int) -> int | None:
        """The pid of the running broker, or None if it is not running."""
        pid = _read_pid(self.broker_dir(broker_id) / "broker.pid")
        return pid if pid_alive(pid) else None

    def up(self, timeout: float = 60.0) -> str:
        """Start whatever is not running, wait until all brokers are registered and a
        controller is elected, and return the bootstrap servers."""
        deadline = time.monotonic() + timeout
        self.data_dir.mkdir(parents=True, exist_ok=True)
        if self.private_zookeeper and not self._zookeeper_server().is_running():
            self._start_zookeeper(deadline)
        zk = connect_zk(self._zookeeper.partition("/")[0], max(1.0, deadline - time.monotonic()))
        try:
            chroot = self._zookeeper.partition("/")[2]
            if chroot:
                zk.ensure_path("/" + chroot)  # Kafka expects the chroot to exist
        finally:
            zk.stop()
            zk.close()
        for broker_id in self.broker_ids:
            if self.broker_pid(broker_id) is None:
                self.start_broker(broker_id)
        self._write_state()
        self.wait_ready(self.broker_ids, max(1.0, deadline - time.monotonic()))
        return self.bootstrap_servers

    def wait_ready(self, broker_ids: list[int], timeout: float) -> None:
        """Block until `broker_ids` are all in /brokers/ids, /controller exists, and each of
        them answers Metadata with a controller and every one of them (the controller's first
        UpdateMetadata reached it): before that, clients find no controller to create topics
        with, and librdkafka's admin client waits a long time before asking again.

        Fails fast, with the log tail, when a broker process dies while we wait."""
        deadline = time.monotonic() + timeout
        zk = connect_zk(self._zookeeper, timeout)
        try:
            while True:
                for broker_id in broker_ids:
                    if self.broker_pid(broker_id) is None:
                        log = self.broker_dir(broker_id) / "broker.log"
                        raise ClusterError(f"broker {broker_id} exited; tail of {log}:\n{tail(log)}")
                registered = {int(c) for c in (zk.exists("/brokers/ids") and zk.get_children("/brokers/ids")) or []}
                missing = [b for b in broker_ids if b not in registered]
                if not missing and zk.exists("/controller") and self._brokers_know_cluster(broker_ids):
                    return
                if time.monotonic() > deadline:
                    culprit = missing[0] if missing else broker_ids[0]
                    log = self.broker_dir(culprit) / "broker.log"
                    what = f"brokers {missing} not registered" if missing else "no controller elected"
                    raise ClusterError(
                        f"cluster not ready after {timeout:g} s: {what} in ZooKeeper {self._zookeeper}; "
                        f"tail of {log}:\n{tail(log)}"
                    )
                time.sleep(_POLL_S)
        finally:
            zk.stop()
            zk.close()

    def _brokers_know_cluster(self, broker_ids: list[int]) -> bool:
        from odradek.admin import AdminError, metadata_request

        for broker_id in broker_ids:
            try:
                md = metadata_request(f"{self.host}:{self.broker_port(broker_id)}", [], 2.0)
            except AdminError:
                return False
            if md.controller_id < 0 or not set(broker_ids) <= {b.node_id for b in md.brokers}:
                return False
        return True

    def start_broker(self, broker_id: int) -> int:
        """Launch broker `broker_id` in the background (no waiting) and return its pid."""
        bdir = self.broker_dir(broker_id)
        bdir.mkdir(parents=True, exist_ok=True)
        cmd = [
            sys.executable, "-m", "odradek", "broker",
            "--id", str(broker_id),
            "--listen", f"{self.host}:{self.broker_port(broker_id)}",
            "--zookeeper", self._zookeeper,
            "--data-dir", str(bdir / "data"),
        ]
        if self.broker_args:
            props = bdir / "server.properties"
            props.write_text("".join(f"{k.replace('_', '.')}={_prop(v)}\n" for k, v in self.broker_args.items()))
            cmd += ["--config", str(props)]
        pid = self._spawn(cmd, bdir / "broker.log", bdir / "broker.pid")
        self._write_state()
        return pid

    def kill_broker(self, broker_id: int, sig: int = signal.SIGKILL) -> None:
        """Signal a broker (SIGKILL by default: a crash, not a clean shutdown) and wait for it."""
        pid = self.broker_pid(broker_id)
        if pid is None:
            raise ClusterError(f"broker {broker_id} is not running")
        _signal_group(pid, sig)
        if sig in (signal.SIGKILL, signal.SIGTERM):
            deadline = time.monotonic() + 30
            while pid_alive(pid) and time.monotonic() < deadline:
                time.sleep(0.05)

    def down(self, timeout: float = 30.0) -> None:
        """Stop brokers first (so they can deregister cleanly), then the private ZooKeeper.

        One broker at a time, the controller last: each one's controlled shutdown then moves
        its leadership to brokers still running. Stopped all at once, the last to ask would
        find every other broker shutting down and wait out its retries. ``timeout`` is per
        broker (SIGKILL after it): room for a controlled shutdown's retries when the controller
        is slow to answer."""
        controller = self._controller_id()
        running = sorted(((b == controller, p) for b in self.broker_ids if (p := self.broker_pid(b))))
        for _, pid in running:
            _stop_pids([pid], timeout)
        for broker_id in self.broker_ids:
            (self.broker_dir(broker_id) / "broker.pid").unlink(missing_ok=True)
        if self.private_zookeeper:
            self._zookeeper_server().stop(timeout)
        self._procs.clear()

    def _controller_id(self) -> int | None:
        """The controller's broker id, or None when ZooKeeper does not say (or is down)."""
        try:
            zk = connect_zk(self.zookeeper_connect, timeout=2.0)
        except ClusterError:
            return None
        try:
            return paths.decode_controller_id(zk.get(paths.CONTROLLER)[0])
        except Exception:  # noqa: BLE001 - no controller (or a garbled znode): any order will do
            return None
        finally:
            zk.stop()
            zk.close()

    def _zookeeper_server(self) -> "ZooKeeperServer":
        from odradek.zk.server import ZooKeeperServer

        return ZooKeeperServer(self.data_dir / "zookeeper", self.zk_port, host=self.host)

    def _start_zookeeper(self, deadline: float) -> None:
        if not port_free(self.host, self.zk_port):
            raise ClusterError(f"ZooKeeper port {self.host}:{self.zk_port} is in use (pick another with --zk-port)")
        server = self._zookeeper_server()
        try:
            server.start(timeout=max(5.0, deadline - time.monotonic()))
        except RuntimeError as exc:
            raise ClusterError(f"{exc}; tail of {server.log_file}:\n{tail(server.log_file)}") from None

    def _spawn(self, cmd: list[str], log: Path, pid_file: Path) -> int:
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        with open(log, "ab") as out:
            proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                    start_new_session=True, env=env, cwd=self.data_dir)
        self._procs[proc.pid] = proc
        pid_file.write_text(f"{proc.pid}\n")
        return proc.pid

    def _write_state(self) -> None:
        state = {
            "zookeeper": self._zookeeper,
            "private_zookeeper": self.private_zookeeper,
            "zk_port": self.zk_port,
            "zookeeper_pid": _read_pid(self._zookeeper_server().pid_file) if self.private_zookeeper else None,
            "host": self.host,
            "base_port": self.base_port,
            "bootstrap_servers": self.bootstrap_servers,
            "broker_args": self.broker_args,
            "brokers": [
                {"id": b, "port": self.broker_port(b), "pid": _read_pid(self.broker_dir(b) / "broker.pid")}
                for b in self.broker_ids
            ],
        }
        tmp = self.data_dir / (STATE_FILE + ".tmp")
        tmp.write_text(json.dumps(state, indent=2) + "\n")
        tmp.replace(self.data_dir / STATE_FILE)


def _prop(value: object) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)
