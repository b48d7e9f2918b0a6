"""`odradek up/down`: a whole cluster (private ZooKeeper + N brokers) as background processes.

The private ZooKeeper is one standalone server, or with `zookeeper_nodes` an ensemble
(ZooKeeperEnsemble) whose quorum and election ports are picked free once and kept in
cluster.json, so a later `up` restarts a dead server with the same identity.

Every process is started in its own session with its pid in a file under the data dir, so a
later `odradek up` or `odradek down` from another shell (or a test) can find, restart or stop
it without a supervisor process.

cluster.json is the truth about a data dir's cluster: a later `up` reuses its ports, broker
count and ZooKeeper, refuses flags that contradict them (LocalCluster.for_up) and grows the
cluster only when asked (`--add-broker`). Otherwise a re-run with other flags would start a
second set of processes on other ports and forget the first set, which `down` then misses.
"""
from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from kazoo.client import KazooClient

from odradek.netutil import port_free
from odradek.process import process_alive
from odradek.zk import paths

if TYPE_CHECKING:
    from odradek.zk.server import QuorumPeer, ZooKeeperEnsemble, ZooKeeperServer

STATE_FILE = "cluster.json"
_POLL_S = 0.2

#: how long `up` waits for a taken port to come free before refusing (the sockets of a process
#: killed a moment ago close a little after it exits)
PORT_SETTLE_S = 3.0

#: the `odradek up` flag behind each recorded setting (LocalCluster.settings), for errors
#: that tell the operator which flag contradicts cluster.json
UP_FLAGS = {"brokers": "--brokers", "base_port": "--base-port", "zk_port": "--zk-port",
            "zookeeper": "--zookeeper", "host": "--host", "zookeeper_nodes": "--zookeeper-nodes",
            "metrics_base_port": "--metrics-base-port"}


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


def _stop_pids(pids: list[int], timeout: float) -> list[int]:
    """SIGTERM each process group, then SIGKILL whatever is still alive at the deadline;
    returns the pids that had to be killed."""
    for pid in pids:
        _signal_group(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while any(pid_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    killed = [pid for pid in pids if pid_alive(pid)]
    for pid in killed:
        _signal_group(pid, signal.SIGKILL)
    while any(pid_alive(p) for p in killed) and time.monotonic() < deadline + 5:
        time.sleep(0.05)
    return killed


def _signal_group(pid: int, sig: int) -> None:
    # start_new_session made each broker a group leader: the group holds anything it spawned.
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


@dataclass(frozen=True)
class Started:
    """One process of the cluster after `up`: what it is, where, and what `up` did about it
    ("started" for the first time, "restarted" after it had died, or "already running")."""

    name: str
    address: str
    pid: int | None
    action: str
    log: Path
    metrics_url: str | None = None


class LocalCluster:
    """ZooKeeper plus brokers 1..N on one host, all state under `data_dir`.

    Broker i listens on base_port + i - 1. With `zookeeper` given (e.g. a shared test server
    with a chroot) no private ZooKeeper is started; otherwise one runs on zk_port, or with
    `zookeeper_nodes` > 1 an ensemble whose server i serves clients on zk_port + i - 1.
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
        zookeeper_nodes: int = 1,
        quorum_peers: "list[QuorumPeer] | None" = None,
        metrics_base_port: int | None = None,
    ) -> None:
        """``quorum_peers``: the ensemble's recorded addresses (LocalCluster.load); without
        them a new ensemble gets free quorum and election ports. With ``metrics_base_port``
        broker i serves Prometheus metrics on metrics_base_port + i - 1."""
        if brokers < 1:
            raise ClusterError("a cluster needs at least one broker")
        if zookeeper_nodes < 1:
            raise ClusterError("a cluster needs at least one ZooKeeper server")
        if zookeeper is not None and zookeeper_nodes > 1:
            raise ClusterError("--zookeeper-nodes starts a private ensemble; it cannot go with --zookeeper")
        _check_port_range("--base-port", base_port, brokers, "brokers")
        if metrics_base_port is not None:
            _check_port_range("--metrics-base-port", metrics_base_port, brokers, "brokers")
        if zookeeper is None:
            _check_port_range("--zk-port", zk_port, zookeeper_nodes, "ZooKeeper servers")
        self.data_dir = Path(data_dir).resolve()
        self.brokers = brokers
        self.base_port = base_port
        self.zk_port = zk_port
        self.host = host
        self.private_zookeeper = zookeeper is None
        self.zookeeper_nodes = zookeeper_nodes
        self._quorum_peers = quorum_peers
        self.broker_args = dict(broker_args or {})
        self.metrics_base_port = metrics_base_port
        self._procs: dict[int, subprocess.Popen] = {}
        if zookeeper_nodes > 1 and quorum_peers is None:
            self._quorum_peers = self._recorded_quorum_peers()
        self._zookeeper = zookeeper or ",".join(s.connect_string for s in self.zookeeper_servers())

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
            zookeeper_nodes=state.get("zookeeper_nodes", 1),
            metrics_base_port=state.get("metrics_base_port"),
        )

    @classmethod
    def for_up(cls, data_dir: Path, add_broker: bool = False, **given: object) -> "LocalCluster":
        """The cluster `odradek up` is to start in `data_dir`, from the flags the operator gave
        (`given`: LocalCluster.settings keys; None means not given).

        With a cluster.json there, it is the truth: its settings are reused, and a given flag
        that contradicts one is refused (naming the flag, the recorded value and what to do)
        before anything starts. Growing is explicit, one broker per `--add-broker`, with the
        next id and port; shrinking is not offered, as the removed brokers' replicas would be
        left without a broker. Without a cluster.json the flags (or their defaults) make a
        new cluster."""
        flags = {k: v for k, v in given.items() if v is not None}
        unknown = set(flags) - set(UP_FLAGS)
        if unknown:
            raise TypeError(f"unknown settings {sorted(unknown)}")
        if not (Path(data_dir) / STATE_FILE).exists():
            if add_broker:
                raise ClusterError(f"--add-broker: there is no cluster in {data_dir} to add a broker to "
                                   f"(no {STATE_FILE}); start one with `odradek up --brokers N`")
            if "brokers" not in flags:
                raise ClusterError(f"--brokers is required to start a new cluster in {data_dir} "
                                   f"(it has no {STATE_FILE} yet)")
            brokers, base_port = int(flags["brokers"]), int(flags.get("base_port", 9092))
            metrics = flags.get("metrics_base_port")
            if metrics is None:  # the default, where it fits below 65536
                metrics = base_port + 1000 if base_port + 1000 + brokers <= 65536 else 0
            return cls(Path(data_dir), brokers, base_port=base_port, zk_port=int(flags.get("zk_port", 2181)),
                       zookeeper=flags.get("zookeeper"), host=str(flags.get("host", "127.0.0.1")),
                       zookeeper_nodes=int(flags.get("zookeeper_nodes", 1)), metrics_base_port=int(metrics) or None)
        cluster = cls.load(data_dir)
        recorded = cluster.settings()
        for key, value in flags.items():
            if value != recorded[key]:
                raise ClusterError(_contradiction(Path(data_dir), key, value, recorded[key]))
        if add_broker:
            # validated like a new cluster's ports: the next broker must fit below 65536 too
            cluster = cls(cluster.data_dir, cluster.brokers + 1, base_port=cluster.base_port,
                          zk_port=cluster.zk_port, zookeeper=None if cluster.private_zookeeper else cluster._zookeeper,
                          host=cluster.host, broker_args=cluster.broker_args,
                          zookeeper_nodes=cluster.zookeeper_nodes, metrics_base_port=cluster.metrics_base_port)
        return cluster

    def settings(self) -> dict[str, object]:
        """This cluster's settings as `odradek up` flags give them (keys of UP_FLAGS; no
        metrics is 0, a private ZooKeeper is zookeeper None)."""
        return {"brokers": self.brokers, "base_port": self.base_port, "zk_port": self.zk_port,
                "zookeeper": None if self.private_zookeeper else self._zookeeper, "host": self.host,
                "zookeeper_nodes": self.zookeeper_nodes, "metrics_base_port": self.metrics_base_port or 0}

    def _recorded_quorum_peers(self) -> "list[QuorumPeer]":
        """The ensemble's addresses from cluster.json when an earlier `up` made one here (a
        restarted server must keep its id and ports), else new free quorum and election ports."""
        from odradek.zk.server import QuorumPeer, ZooKeeperEnsemble

        try:
            recorded = json.loads((self.data_dir / STATE_FILE).read_text()).get("zookeeper_servers") or []
        except FileNotFoundError:
            recorded = []
        except (OSError, ValueError) as exc:
            raise ClusterError(f"cannot read {self.data_dir / STATE_FILE}: {exc}") from None
        if recorded and "quorum_port" in recorded[0]:
            if len(recorded) != self.zookeeper_nodes:
                raise ClusterError(f"the cluster in {self.data_dir} has {len(recorded)} ZooKeeper servers, "
                                   f"not {self.zookeeper_nodes}")
            return [QuorumPeer(r["id"], self.host, r["client_port"], r["quorum_port"], r["election_port"])
                    for r in recorded]
        client_ports = [self.zk_port + i for i in range(self.zookeeper_nodes)]
        return list(ZooKeeperEnsemble.on_free_ports(self.data_dir / "zookeeper", self.zookeeper_nodes,
                                                    self.host, client_ports).peers)

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

    def metrics_url(self, broker_id: int) -> str | None:
        """Where broker `broker_id` serves Prometheus metrics, if it does."""
        if self.metrics_base_port is None:
            return None
        return f"http://{self.host}:{self.metrics_base_port + broker_id - 1}/metrics"

    def broker_dir(self, broker_id: int) -> Path:
        return self.data_dir / f"broker-{broker_id}"

    def broker_pid(self, broker_id: int) -> int | None:
        """The pid of the running broker, or None if it is not running."""
        pid = _read_pid(self.broker_dir(broker_id) / "broker.pid")
        return pid if pid_alive(pid) else None

    def up(self, timeout: float = 60.0) -> str:
        """Start whatever is not running, wait until all brokers are registered and a
        controller is elected, and return the bootstrap servers (see start)."""
        self.start(timeout)
        return self.bootstrap_servers

    def start(self, timeout: float = 60.0) -> list[Started]:
        """`odradek up`: start what is not running and wait until the cluster is ready; return
        every process with what was done about it.

        Before starting anything, each port a process to be started will bind (broker,
        metrics, ZooKeeper client, quorum and election ports) must be free: the ports of
        processes still running are theirs. A failure after that stops, by pid, what this
        call started (never what was already running), puts cluster.json back as it was, and
        says so in the ClusterError."""
        deadline = time.monotonic() + timeout
        state_file = self.data_dir / STATE_FILE
        previous = state_file.read_text() if state_file.exists() else None
        recorded = self._check_record(previous)
        servers = [s for s in self.zookeeper_servers() if not s.is_running()]
        brokers = [b for b in self.broker_ids if self.broker_pid(b) is None]
        self._check_ports(servers, brokers, recorded is not None)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        already = self.running()
        launched: list[tuple[str, int, "ZooKeeperServer | None"]] = []
        try:
            for server in servers:
                launched.append((f"ZooKeeper {server.connect_string}", server.launch(), server))
            for server in servers:
                server.wait_serving(timeout=max(5.0, deadline - time.monotonic()))
            self._ensure_chroot(deadline)
            for broker_id in brokers:
                launched.append((f"broker {broker_id}", self.start_broker(broker_id), None))
            self._write_state()
            self.wait_ready(self.broker_ids, max(1.0, deadline - time.monotonic()))
        except BaseException as exc:
            undone = self._roll_back(launched, previous)
            if not isinstance(exc, (ClusterError, RuntimeError, OSError)):
                raise  # KeyboardInterrupt and bugs: rolled back all the same
            first, _, rest = str(exc).partition("\n")
            what = [f"stopped what it had started ({undone})" if undone else "had started nothing"]
            if already:
                what.append(f"left running what already ran ({', '.join(f'{n} pid {p}' for n, p in already)})")
            raise ClusterError(f"`up` failed; it {' and '.join(what)}: {first}" + (f"\n{rest}" if rest else "")) from None
        known = {b["id"] for b in recorded["brokers"]} if recorded else set()
        result = []
        started_zk = {s.port for s in servers}
        for server in self.zookeeper_servers():
            action = "already running" if server.port not in started_zk else "restarted" if recorded else "started"
            result.append(Started(f"zookeeper server {server.server_id or 1}", server.connect_string,
                                  server.pid, action, server.log_file))
        for broker_id in self.broker_ids:
            action = ("already running" if broker_id not in brokers
                      else "restarted" if broker_id in known else "started")
            result.append(Started(f"broker {broker_id}", f"{self.host}:{self.broker_port(broker_id)}",
                                  self.broker_pid(broker_id), action, self.broker_dir(broker_id) / "broker.log",
                                  self.metrics_url(broker_id)))
        return result

    def _check_record(self, text: str | None) -> dict | None:
        """cluster.json's contents, refusing to start a cluster it contradicts: other ports,
        another ZooKeeper, or fewer brokers (those left out would keep running unrecorded, and
        `down` would miss them)."""
        if text is None:
            return None
        try:
            recorded = json.loads(text)
            settings = LocalCluster.load(self.data_dir).settings()
        except (ValueError, KeyError, TypeError) as exc:
            raise ClusterError(f"cannot read {self.data_dir / STATE_FILE}: {exc!r}") from None
        for key, value in self.settings().items():
            grown = key == "brokers" and self.brokers > len(recorded["brokers"])
            if value != settings[key] and not grown:
                raise ClusterError(_contradiction(self.data_dir, key, value, settings[key]))
        return recorded

    def _check_ports(self, servers: "list[ZooKeeperServer]", brokers: list[int], recorded: bool) -> None:
        """Refuse to start anything unless every port a process to be started binds is free,
        and no port is claimed twice by this cluster's own processes."""
        claims: list[tuple[int, str, str, str]] = []  # port, process, what the port is for, flag that chose it
        for server in self.zookeeper_servers():
            zk = f"ZooKeeper server {server.server_id or 1}"
            claims.append((server.port, zk, zk, "--zk-port"))
            if (peer := _peer_of(server)) is not None:
                claims += [(peer.quorum_port, zk, f"{zk} quorum", ""), (peer.election_port, zk, f"{zk} election", "")]
        for broker_id in self.broker_ids:
            broker = f"broker {broker_id}"
            claims.append((self.broker_port(broker_id), broker, broker, "--base-port"))
            if self.metrics_base_port is not None:
                claims.append((self.metrics_base_port + broker_id - 1, broker, f"{broker} metrics",
                               "--metrics-base-port"))
        owners: dict[int, str] = {}
        for port, _, whose, _ in claims:
            if port in owners:
                raise ClusterError(f"port {port} would serve both {owners[port]} and {whose}; "
                                   f"pick ports that do not overlap")
            owners[port] = whose
        starting = {f"ZooKeeper server {s.server_id or 1}" for s in servers} | {f"broker {b}" for b in brokers}
        wanted = [(port, whose, flag) for port, process, whose, flag in claims if process in starting]
        taken = [claim for claim in wanted if not port_free(self.host, claim[0])]
        deadline = time.monotonic() + PORT_SETTLE_S
        while taken and time.monotonic() < deadline:
            # a process killed a moment ago may hold its ports for a little while as its
            # sockets close: seen as a restarted broker's port still taken
            time.sleep(0.1)
            taken = [claim for claim in taken if not port_free(self.host, claim[0])]
        if taken:
            ports = ", ".join(f"{self.host}:{port} ({whose})" for port, whose, _ in taken)
            if recorded:
                advice = (f"stop whatever holds it (the port is recorded in {self.data_dir / STATE_FILE}), "
                          f"or run `odradek down` and use another --data-dir")
            else:
                flags = sorted({flag for _, _, flag in taken if flag})
                advice = f"pick another {' / '.join(flags)}" if flags else "try again"
            raise ClusterError(f"port in use by another process, so nothing was started: {ports}; {advice}")

    def _ensure_chroot(self, deadline: float) -> None:
        """Kafka expects the chroot of its zookeeper.connect to exist."""
        zk = connect_zk(self._zookeeper.partition("/")[0], max(1.0, deadline - time.monotonic()))
        try:
            chroot = self._zookeeper.partition("/")[2]
            if chroot:
                zk.ensure_path("/" + chroot)
        finally:
            zk.stop()
            zk.close()

    def _roll_back(self, launched: "list[tuple[str, int, ZooKeeperServer | None]]", previous: str | None) -> str:
        """Stop, by pid, what a failed `up` launched (brokers first, as `down` does) and put
        cluster.json back as it was (none for a first `up`: a later one may pick other flags).
        Returns what was stopped, for the error."""
        brokers = [(what, pid) for what, pid, server in launched if server is None]
        _stop_pids([pid for _, pid in brokers], 10.0)
        for what, _ in brokers:
            (self.broker_dir(int(what.split()[-1])) / "broker.pid").unlink(missing_ok=True)
        for _, pid, server in launched:
            if server is not None and server.pid == pid:
                server.stop(timeout=10.0)
        state_file = self.data_dir / STATE_FILE
        if previous is None:
            state_file.unlink(missing_ok=True)
        else:
            state_file.write_text(previous)
        self._procs.clear()
        return ", ".join(f"{what} pid {pid}" for what, pid, _ in launched)

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
        settings = dict(self.broker_args)
        if self.metrics_base_port is not None:
            settings["metrics_port"] = self.metrics_base_port + broker_id - 1
        if settings:
            props = bdir / "server.properties"
            props.write_text("".join(f"{k.replace('_', '.')}={_prop(v)}\n" for k, v in settings.items()))
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

    def down(self, timeout: float = 30.0) -> list[str]:
        """Stop brokers first (so they can deregister cleanly), then the private ZooKeeper.

        One broker at a time, the controller last: each one's controlled shutdown then moves
        its leadership to brokers still running. Stopped all at once, the last to ask would
        find every other broker shutting down and wait out its retries. With no controller to
        be found (ZooKeeper unreachable) no controlled shutdown can succeed, so they are all
        stopped at once and each gives up after its bounded retries. ``timeout`` is per broker
        (SIGKILL after it): room for a controlled shutdown's retries (3 x 5 s by default) when
        the controller is slow to answer. Returns one line per process that had to be killed."""
        controller = self._controller_id()
        running = sorted(((b == controller, b, p) for b in self._broker_ids_on_disk() if (p := self.broker_pid(b))))
        groups = [running] if controller is None else [[r] for r in running]
        killed = []
        for group in groups:
            for pid in _stop_pids([pid for _, _, pid in group], timeout):
                broker_id = next(b for _, b, p in group if p == pid)
                killed.append(f"broker {broker_id} (pid {pid}) did not stop within {timeout:g} s after "
                              f"SIGTERM; killed it with SIGKILL")
        for broker_id in self._broker_ids_on_disk():
            (self.broker_dir(broker_id) / "broker.pid").unlink(missing_ok=True)
        if self.private_zookeeper:
            for server in self.zookeeper_servers():
                pid = server.pid
                if server.stop(timeout):
                    killed.append(f"ZooKeeper {server.connect_string} (pid {pid}) did not stop within "
                                  f"{timeout:g} s after SIGTERM; killed it with SIGKILL")
        self._procs.clear()
        return killed

    def running(self) -> list[tuple[str, int]]:
        """(name, pid) of each process of this cluster that runs: what `down` would stop."""
        brokers = [(f"broker {b}", pid) for b in self._broker_ids_on_disk() if (pid := self.broker_pid(b))]
        servers = [(f"ZooKeeper {s.connect_string}", s.pid) for s in self.zookeeper_servers() if s.is_running()]
        return brokers + [(name, pid) for name, pid in servers if pid is not None]

    def _broker_ids_on_disk(self) -> list[int]:
        """The recorded brokers, and any other broker-N under the data dir with a pid file: one
        an older `up` started and then left out of cluster.json still belongs to this data dir."""
        extra = {int(d.name.partition("-")[2]) for d in self.data_dir.glob("broker-*/")
                 if d.name.partition("-")[2].isdigit() and (d / "broker.pid").exists()}
        return sorted(set(self.broker_ids) | extra)

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

    def zookeeper_servers(self) -> "list[ZooKeeperServer]":
        """The private ZooKeeper's servers: one standalone, or the ensemble's members (empty
        for a cluster on a ZooKeeper of its own)."""
        from odradek.zk.server import ZooKeeperServer

        if not self.private_zookeeper:
            return []
        if self._quorum_peers:
            return list(self.zookeeper_ensemble().servers.values())
        return [ZooKeeperServer(self.data_dir / "zookeeper", self.zk_port, host=self.host)]

    def zookeeper_ensemble(self) -> "ZooKeeperEnsemble":
        """The private ensemble (with --zookeeper-nodes > 1), to kill and restart servers by id."""
        from odradek.zk.server import ZooKeeperEnsemble

        if not (self.private_zookeeper and self._quorum_peers):
            raise ClusterError(f"the cluster in {self.data_dir} runs no private ZooKeeper ensemble")
        return ZooKeeperEnsemble(self.data_dir / "zookeeper", self._quorum_peers)

    def _spawn(self, cmd: list[str], log: Path, pid_file: Path) -> int:
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        with open(log, "ab") as out:
            proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                    start_new_session=True, env=env, cwd=self.data_dir)
        self._procs[proc.pid] = proc
        pid_file.write_text(f"{proc.pid}\n")
        return proc.pid

    def _write_state(self) -> None:
        servers = self.zookeeper_servers()
        state = {
            "zookeeper": self._zookeeper,
            "private_zookeeper": self.private_zookeeper,
            "zk_port": self.zk_port,
            "zookeeper_pid": servers[0].pid if len(servers) == 1 else None,
            "zookeeper_nodes": self.zookeeper_nodes,
            "zookeeper_servers": [
                {"id": s.server_id or 1, "client_port": s.port, "pid": s.pid,
                 **({"quorum_port": p.quorum_port, "election_port": p.election_port}
                    if (p := _peer_of(s)) else {})}
                for s in servers
            ],
            "host": self.host,
            "base_port": self.base_port,
            "bootstrap_servers": self.bootstrap_servers,
            "broker_args": self.broker_args,
            "metrics_base_port": self.metrics_base_port,
            "brokers": [
                {"id": b, "port": self.broker_port(b), "pid": _read_pid(self.broker_dir(b) / "broker.pid"),
                 "metrics_url": self.metrics_url(b)}
                for b in self.broker_ids
            ],
        }
        tmp = self.data_dir / (STATE_FILE + ".tmp")
        tmp.write_text(json.dumps(state, indent=2) + "\n")
        tmp.replace(self.data_dir / STATE_FILE)


def _check_port_range(flag: str, first: int, count: int, what: str) -> None:
    """Refuse, before anything starts, ports a server cannot bind (e.g. --base-port 70000)."""
    last = first + count - 1
    if not 1 <= first <= last <= 65535:
        span = f"port {first}" if count == 1 else f"ports {first}..{last}"
        raise ClusterError(f"{flag} {first}: {count} {what} would need {span}, outside 1-65535; "
                           f"pick a {flag} of at most {65536 - count}")


def _contradiction(data_dir: Path, key: str, given: object, recorded: object) -> str:
    """The one-line refusal of a flag that contradicts cluster.json, with what to do instead."""
    flag = UP_FLAGS[key]

    def shown(value: object) -> str:
        if key == "zookeeper" and value is None:
            return "its private ZooKeeper"
        return f"{flag} {value}"

    if key == "brokers" and isinstance(given, int) and isinstance(recorded, int) and given > recorded:
        advice = ("grow it one broker at a time with `odradek up --add-broker`, or leave --brokers out "
                  "to restart it as recorded")
    elif key == "brokers":
        advice = ("brokers cannot be removed (their replicas would be left without a broker): leave "
                  "--brokers out to restart it as recorded")
    else:
        advice = (f"leave {flag} out to reuse the recorded value, or run `odradek down` and use "
                  f"another --data-dir for a new cluster")
    return f"{shown(given)} contradicts the cluster in {data_dir}, recorded in {STATE_FILE} with {shown(recorded)}; {advice}"


def _peer_of(server: "ZooKeeperServer") -> "QuorumPeer | None":
    return next((p for p in server.quorum if p.server_id == server.server_id), None)


def _prop(value: object) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)
