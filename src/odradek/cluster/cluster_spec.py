"""cluster.json, the truth about a data dir's cluster: what `odradek up` records there (ports,
broker count, ZooKeeper, the ensemble's quorum and election ports) and how a later `up`'s
flags are checked against it. Running the processes is local_cluster.py's (LocalCluster).

A later `up` reuses the recorded settings, refuses flags that contradict them
(ClusterSpec.for_up) and grows the cluster only when asked (`--add-broker`). Otherwise a
re-run with other flags would start a second set of processes on other ports and forget the
first set, which `down` then misses.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self

from odradek.admin.errors import ClusterError
from odradek.admin.zookeeper import use_credentials
from odradek.cli.output import plural
from odradek.cluster import secure_setup
from odradek.cluster.secure_setup import SecureCluster

if TYPE_CHECKING:
    from odradek.zk.server import QuorumPeer, ZooKeeperEnsemble, ZooKeeperServer

STATE_FILE = "cluster.json"

#: the `odradek up` flag behind each recorded setting (ClusterSpec.settings), for errors
#: that tell the operator which flag contradicts cluster.json
UP_FLAGS = {"brokers": "--brokers", "base_port": "--base-port", "zk_port": "--zk-port",
            "zookeeper": "--zookeeper", "host": "--host", "zookeeper_nodes": "--zookeeper-nodes",
            "metrics_base_port": "--metrics-base-port", "secure": "--secure"}


class ClusterSpec:
    """What a local cluster is, without its processes (LocalCluster runs them): ZooKeeper
    plus brokers 1..N on one host, all state under `data_dir`.

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
        secure: bool = False,
    ) -> None:
        """``quorum_peers``: the ensemble's recorded addresses (ClusterSpec.load); without
        them a new ensemble gets free quorum and election ports. With ``metrics_base_port``
        broker i serves Prometheus metrics on metrics_base_port + i - 1. ``secure``: TLS, SASL,
        ACLs and an authenticated ZooKeeper (cluster/secure_setup.py), the metrics over HTTPS
        with HTTP Basic logins; this process's clients then use the cluster's admin settings."""
        if brokers < 1:
            raise ClusterError("a cluster needs at least one broker")
        if zookeeper_nodes < 1:
            raise ClusterError("a cluster needs at least one ZooKeeper server")
        if zookeeper is not None and zookeeper_nodes > 1:
            raise ClusterError("--zookeeper-nodes starts a private ensemble; it cannot go with --zookeeper")
        _check_port_range("--base-port", base_port, brokers, "broker")
        if metrics_base_port is not None:
            _check_port_range("--metrics-base-port", metrics_base_port, brokers, "broker")
        if zookeeper is None:
            _check_port_range("--zk-port", zk_port, zookeeper_nodes, "ZooKeeper server")
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
        self.secure = secure
        self.security: SecureCluster | None = None
        if secure:
            self.security = secure_setup.load(self.data_dir) or secure_setup.prepare(self.data_dir, host)
            self.security.use_admin_settings()
            use_credentials(self.security.zookeeper_credentials())
        if zookeeper_nodes > 1 and quorum_peers is None:
            self._quorum_peers = self._recorded_quorum_peers()
        self._zookeeper = zookeeper or ",".join(s.connect_string for s in self.zookeeper_servers())


    @classmethod
    def load(cls, data_dir: Path) -> Self:
        """The cluster `odradek up` left in `data_dir`, as recorded in its cluster.json."""
        path = Path(data_dir) / STATE_FILE
        try:
            state = json.loads(path.read_text())
        except FileNotFoundError:
            raise ClusterError(f"no cluster in {data_dir} (missing {STATE_FILE}; run `odradek up`)") from None
        except (OSError, ValueError) as exc:
            raise ClusterError(f"cannot read {path}: {exc}") from None
        return cls.from_state(data_dir, state)

    @classmethod
    def from_state(cls, data_dir: Path, state: dict) -> Self:
        """The cluster that cluster.json's parsed contents ``state`` record for `data_dir`."""
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
            secure=state.get("secure", False),
        )

    @classmethod
    def for_up(cls, data_dir: Path, add_broker: bool = False, **given: object) -> Self:
        """The cluster `odradek up` is to start in `data_dir`, from the flags the operator gave
        (`given`: ClusterSpec.settings keys; None means not given).

        With a cluster.json there, it is the truth: its settings are reused, and a given flag
        that contradicts one is refused (naming the flag, the recorded value and what to do)
        before anything starts. Growing is explicit, one broker per `--add-broker`, with the
        next id and port; shrinking is not offered, as the removed brokers' replicas would be
        left without a broker. Without a cluster.json the flags (or their defaults) make a
        new cluster."""
        flags: dict[str, Any] = {k: v for k, v in given.items() if v is not None}
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
            secure = bool(flags.get("secure", False))
            if metrics is None:  # the default, where it fits below 65536
                metrics = base_port + 1000 if base_port + 1000 + brokers <= 65536 else 0
            return cls(Path(data_dir), brokers, base_port=base_port, zk_port=int(flags.get("zk_port", 2181)),
                       zookeeper=flags.get("zookeeper"), host=str(flags.get("host", "127.0.0.1")),
                       zookeeper_nodes=int(flags.get("zookeeper_nodes", 1)), metrics_base_port=int(metrics) or None,
                       secure=secure)
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
                          zookeeper_nodes=cluster.zookeeper_nodes, metrics_base_port=cluster.metrics_base_port,
                          secure=cluster.secure)
        return cluster

    def settings(self) -> dict[str, object]:
        """This cluster's settings as `odradek up` flags give them (keys of UP_FLAGS; no
        metrics is 0, a private ZooKeeper is zookeeper None)."""
        return {"brokers": self.brokers, "base_port": self.base_port, "zk_port": self.zk_port,
                "zookeeper": None if self.private_zookeeper else self._zookeeper, "host": self.host,
                "zookeeper_nodes": self.zookeeper_nodes, "metrics_base_port": self.metrics_base_port or 0,
                "secure": self.secure}

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
                raise ClusterError(f"the cluster in {self.data_dir} has "
                                   f"{plural(len(recorded), 'ZooKeeper server')}, not {self.zookeeper_nodes}")
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
        """Where broker `broker_id` serves Prometheus metrics, if it does (over HTTPS, behind a
        login, on a secured cluster: broker/metrics_security.py)."""
        if self.metrics_base_port is None:
            return None
        scheme = "https" if self.secure else "http"
        return f"{scheme}://{self.host}:{self.metrics_base_port + broker_id - 1}/metrics"

    def broker_dir(self, broker_id: int) -> Path:
        return self.data_dir / f"broker-{broker_id}"


    def _check_record(self, text: str | None) -> dict | None:
        """cluster.json's contents, refusing to start a cluster it contradicts: other ports,
        another ZooKeeper, or fewer brokers (those left out would keep running unrecorded, and
        `down` would miss them)."""
        if text is None:
            return None
        try:
            recorded = json.loads(text)
            settings = ClusterSpec.from_state(self.data_dir, recorded).settings()
        except (ValueError, KeyError, TypeError) as exc:
            raise ClusterError(f"cannot read {self.data_dir / STATE_FILE}: {exc!r}") from None
        for key, value in self.settings().items():
            grown = key == "brokers" and self.brokers > len(recorded["brokers"])
            if value != settings[key] and not grown:
                raise ClusterError(_contradiction(self.data_dir, key, value, settings[key]))
        return recorded

    def zookeeper_servers(self) -> "list[ZooKeeperServer]":
        """The private ZooKeeper's servers: one standalone, or the ensemble's members (empty
        for a cluster on a ZooKeeper of its own)."""
        from odradek.zk.server import ZooKeeperServer

        if not self.private_zookeeper:
            return []
        if self._quorum_peers:
            return list(self.zookeeper_ensemble().servers.values())
        return [ZooKeeperServer(self.data_dir / "zookeeper", self.zk_port, host=self.host,
                                sasl_users=self.security.zookeeper_users() if self.security else None)]

    def zookeeper_ensemble(self) -> "ZooKeeperEnsemble":
        """The private ensemble (with --zookeeper-nodes > 1), to kill and restart servers by id."""
        from odradek.zk.server import ZooKeeperEnsemble

        if not (self.private_zookeeper and self._quorum_peers):
            raise ClusterError(f"the cluster in {self.data_dir} runs no private ZooKeeper ensemble")
        return ZooKeeperEnsemble(self.data_dir / "zookeeper", self._quorum_peers,
                                 sasl_users=self.security.zookeeper_users() if self.security else None)

    def _write_state(self) -> None:
        """Record the cluster in cluster.json, with the pids it has now; written to a temporary
        file and renamed, so a concurrent `up`, `down` or `status` never reads half of it."""
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
                    if (p := peer_of(s)) else {})}
                for s in servers
            ],
            "host": self.host,
            "base_port": self.base_port,
            "bootstrap_servers": self.bootstrap_servers,
            "broker_args": self.broker_args,
            "metrics_base_port": self.metrics_base_port,
            "secure": self.secure,
            "brokers": [
                {"id": b, "port": self.broker_port(b), "pid": read_pid(self.broker_dir(b) / "broker.pid"),
                 "metrics_url": self.metrics_url(b)}
                for b in self.broker_ids
            ],
        }
        tmp = self.data_dir / (STATE_FILE + ".tmp")
        tmp.write_text(json.dumps(state, indent=2) + "\n")
        tmp.replace(self.data_dir / STATE_FILE)


def read_pid(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None



def _check_port_range(flag: str, first: int, count: int, what: str) -> None:
    """Refuse, before anything starts, ports a server cannot bind (e.g. --base-port 70000)."""
    last = first + count - 1
    if not 1 <= first <= last <= 65535:
        span = f"port {first}" if count == 1 else f"ports {first}..{last}"
        raise ClusterError(f"{flag} {first}: {plural(count, what)} would need {span}, outside 1-65535; "
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


def peer_of(server: "ZooKeeperServer") -> "QuorumPeer | None":
    return next((p for p in server.quorum if p.server_id == server.server_id), None)
