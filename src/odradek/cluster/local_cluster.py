"""`odradek up/down`: a whole cluster (private ZooKeeper + N brokers) as background processes.

The private ZooKeeper is one standalone server, or with `zookeeper_nodes` an ensemble
(ZooKeeperEnsemble) whose quorum and election ports are picked free once and kept in
cluster.json, so a later `up` restarts a dead server with the same identity.

Every process is started in its own session with its pid in a file under the data dir, so a
later `odradek up` or `odradek down` from another shell (or a test) can find, restart or stop
it without a supervisor process.

What a cluster is (its settings and addresses) and cluster.json, which records it and which a
later `up`'s flags are checked against, are cluster_spec.py's (ClusterSpec); LocalCluster
adds the processes: start, stop, roll back a failed start, check ports.
"""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kazoo.client import KazooClient

from odradek.admin.admin_client import metadata_request
from odradek.admin.errors import AdminError, ClusterError
from odradek.admin.zookeeper import collect_data, connect_zk
from odradek.cli.output import duration
from odradek.cluster import secure_setup
from odradek.cluster.cluster_spec import STATE_FILE, ClusterSpec, peer_of, read_pid
from odradek.common.errors import os_error_text
from odradek.common.netutil import port_free
from odradek.common.process import process_alive
from odradek.zk import paths
from odradek.zk.admin_zk_client import USERS
from odradek.zk.client import KafkaZkClient

if TYPE_CHECKING:
    from odradek.zk.server import ZooKeeperServer


_POLL_S = 0.2

#: how long `up` waits for a taken port to come free before refusing (the sockets of a process
#: killed a moment ago close a little after it exits)
PORT_SETTLE_S = 3.0

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


class LocalCluster(ClusterSpec):
    """The processes of a ClusterSpec: ZooKeeper plus brokers 1..N on one host, all state
    under `data_dir`, started and stopped by pid (see ClusterSpec for the settings)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        """ClusterSpec's settings; the Popen objects of what this object launched are kept
        until stopped."""
        super().__init__(*args, **kwargs)
        self._procs: dict[int, subprocess.Popen] = {}

    def broker_pid(self, broker_id: int) -> int | None:
        """The pid of the running broker, or None if it is not running."""
        pid = read_pid(self.broker_dir(broker_id) / "broker.pid")
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
            if self.security is not None and brokers:
                self._ensure_admin_user()
            for broker_id in brokers:
                launched.append((f"broker {broker_id}", self.start_broker(broker_id), None))
            self._write_state()
            self.wait_ready(self.broker_ids, max(1.0, deadline - time.monotonic()), started=brokers)
        except BaseException as exc:
            undone = self._roll_back(launched, previous)
            if not isinstance(exc, (ClusterError, RuntimeError, OSError)):
                raise  # KeyboardInterrupt and bugs: rolled back all the same
            text = os_error_text(exc) if isinstance(exc, OSError) and exc.strerror else str(exc)
            first, _, rest = text.partition("\n")
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


    def _check_ports(self, servers: "list[ZooKeeperServer]", brokers: list[int], recorded: bool) -> None:
        """Refuse to start anything unless every port a process to be started binds is free,
        and no port is claimed twice by this cluster's own processes."""
        claims: list[tuple[int, str, str, str]] = []  # port, process, what the port is for, flag that chose it
        for server in self.zookeeper_servers():
            zk = f"ZooKeeper server {server.server_id or 1}"
            claims.append((server.port, zk, zk, "--zk-port"))
            if (peer := peer_of(server)) is not None:
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

    def _ensure_admin_user(self) -> None:
        """A secured cluster's SCRAM user admin in /config/users before any broker starts (the
        brokers log in to each other as admin), as kafka-configs.sh --zookeeper adds the
        inter-broker user before the first broker starts; kept when it is there."""
        assert self.security is not None
        zk = KafkaZkClient(self._zookeeper, sasl=self.security.zookeeper_credentials(), set_acl=True)
        zk.start()
        try:
            stored = zk.get_entity_configs(USERS, [secure_setup.ADMIN_USER]).get(secure_setup.ADMIN_USER) or {}
            if not stored:
                zk.change_entity_configs({(USERS, secure_setup.ADMIN_USER): self.security.admin_credentials()})
        finally:
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

    def wait_ready(self, broker_ids: list[int], timeout: float, started: list[int] | None = None) -> None:
        """Block until `broker_ids` are all in /brokers/ids, /controller exists, and each of
        them answers Metadata with a controller and every one of them (the controller's first
        UpdateMetadata reached it): before that, clients find no controller to create topics
        with, and librdkafka's admin client waits a long time before asking again.

        Fails fast, with the log tail, when a broker process dies while we wait. At the
        deadline the error says what is still missing (_not_ready) and shows the logs of the
        brokers concerned, else of those just ``started``."""
        deadline = time.monotonic() + timeout
        zk = connect_zk(self._zookeeper, timeout)
        try:
            while True:
                for broker_id in broker_ids:
                    if self.broker_pid(broker_id) is None:
                        log = self.broker_dir(broker_id) / "broker.log"
                        raise ClusterError(f"broker {broker_id} exited; tail of {log}:\n{tail(log)}")
                reasons = self._not_ready(zk, broker_ids)
                if not reasons:
                    return
                if time.monotonic() > deadline:
                    culprits = sorted({b for b, _ in reasons if b is not None}) or started or broker_ids[:1]
                    logs = [self.broker_dir(b) / "broker.log" for b in culprits]
                    raise ClusterError(
                        f"cluster not ready after {duration(timeout)}: {'; '.join(r for _, r in reasons)}\n"
                        + "\n".join(f"tail of {log}:\n{tail(log, 20 if len(logs) == 1 else 10)}" for log in logs))
                time.sleep(_POLL_S)
        finally:
            zk.stop()
            zk.close()

    def _not_ready(self, zk: KazooClient, broker_ids: list[int]) -> list[tuple[int | None, str]]:
        """What keeps the cluster from being ready, each with the broker it concerns (None: the
        cluster as a whole); empty once it is ready. A broker restarted after a crash finds
        its previous process's registration still there until ZooKeeper expires that session
        (zookeeper.session.timeout.ms) and waits it out, so a registration written before the
        broker's pid file is not the running broker's (ZooKeeper's own ctime would compare
        another machine's clock when --zookeeper is remote)."""
        reasons: list[tuple[int | None, str]] = []
        # one round trip for every registration and the controller, every poll
        controller = zk.exists_async(paths.CONTROLLER)
        registrations = collect_data({b: zk.get_async(paths.broker_path(b)) for b in broker_ids}, 10.0)
        for broker_id, data in registrations.items():
            if data is None:
                reasons.append((broker_id, f"broker {broker_id} has not registered in ZooKeeper {self._zookeeper}"))
                continue
            try:  # both times from this machine's clock: the broker writes its registration's timestamp
                registered_at = int(json.loads(data)["timestamp"]) / 1000
                started_at = (self.broker_dir(broker_id) / "broker.pid").stat().st_mtime
            except (OSError, ValueError, TypeError, KeyError):
                continue
            if registered_at < started_at:
                reasons.append((broker_id, f"broker {broker_id} has not registered yet: /brokers/ids/{broker_id} is "
                                           f"still its previous process's, until ZooKeeper expires that session"))
        if not controller.get():
            reasons.append((None, "no controller elected"))
        if reasons:
            return reasons

        for broker_id in broker_ids:
            address = f"{self.host}:{self.broker_port(broker_id)}"
            try:
                md = metadata_request(address, [], 2.0)
            except AdminError:
                reasons.append((broker_id, f"broker {broker_id} does not answer Metadata on {address}"))
                continue
            unknown = sorted(set(broker_ids) - {b.node_id for b in md.brokers})
            if md.controller_id < 0:
                reasons.append((broker_id, f"broker {broker_id} does not know the controller yet"))
            elif unknown:
                reasons.append((broker_id, f"broker {broker_id} does not know "
                                           f"{'broker' if len(unknown) == 1 else 'brokers'} "
                                           f"{', '.join(map(str, unknown))} yet"))
        return reasons

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
        if self.security is not None:
            settings.update(self.security.broker_settings(self.host))
        if settings:
            props = bdir / "server.properties"
            port = self.broker_port(broker_id)
            props.write_text("".join(f"{k.replace('_', '.')}={_ports(_prop(v), port)}\n" for k, v in settings.items()))
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
                killed.append(f"broker {broker_id} (pid {pid}) did not stop within {duration(timeout)} after "
                              f"SIGTERM; killed it with SIGKILL")
        for broker_id in self._broker_ids_on_disk():
            (self.broker_dir(broker_id) / "broker.pid").unlink(missing_ok=True)
        if self.private_zookeeper:
            for server in self.zookeeper_servers():
                zk_pid = server.pid
                if server.stop(timeout):
                    killed.append(f"ZooKeeper {server.connect_string} (pid {zk_pid}) did not stop within "
                                  f"{duration(timeout)} after SIGTERM; killed it with SIGKILL")
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


    def _spawn(self, cmd: list[str], log: Path, pid_file: Path) -> int:
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        with open(log, "ab") as out:
            proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                    start_new_session=True, env=env, cwd=self.data_dir)
        self._procs[proc.pid] = proc
        pid_file.write_text(f"{proc.pid}\n")
        return proc.pid


def _prop(value: object) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


_PORT_PLACEHOLDER = re.compile(r"\{port(?:\+(\d+))?\}")


def _ports(value: str, port: int) -> str:
    """A setting with each broker's own ports: {port} is the broker's port, {port+N} the one N
    above it (the ports of further listeners, as in
    listeners=PLAINTEXT://127.0.0.1:{port},SASL_SSL://127.0.0.1:{port+3})."""
    return _PORT_PLACEHOLDER.sub(lambda m: str(port + int(m.group(1) or 0)), value)
