"""The cluster a fault run attacks: a ZooKeeper ensemble and N brokers, each on loopback
addresses of its own, inside a private network namespace, with the firewall rules that cut it
apart.

Broker N listens on 127.0.N.1 (and makes its broker-to-broker connections from there:
netutil.bind_outgoing_to) and reaches the ZooKeeper servers at 127.0.N.2 (they listen on every
address).
So "broker N cut off from ZooKeeper" is a rule on 127.0.N.2, and "broker A cut off from broker
B" a rule between 127.0.A.1 and 127.0.B.1, while clients (127.0.0.1) reach every broker. The
rules live in the namespace the run made (`unshare --net`), so they vanish with it and nothing
outside it is touched.

With `proxied`, each broker listens on 127.0.N.1:PROXIED_PORT and registers 127.0.N.1:9092,
where the delay proxy (faults/delay_proxy.py) forwards to it: every client and broker-to-broker
connection passes the proxy, which can hold one of them (delay_one_connection). The cut rules
still apply: a connection from broker A reaches broker B's proxy from 127.0.A.1.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from odradek.zk.server import ZooKeeperEnsemble

BROKER_PORT = 9092
#: where a proxied broker listens (its proxy listens on BROKER_PORT)
PROXIED_PORT = 19092
ZK_PORTS = (2181, 2182, 2183, 2184, 2185)
CHROOT = "/odradek"


def broker_host(broker_id: int) -> str:
    return f"127.0.{broker_id}.1"


def zookeeper_host(broker_id: int) -> str:
    """The address broker `broker_id` reaches ZooKeeper at (cut it to cut that broker off)."""
    return f"127.0.{broker_id}.2"


class FaultCluster:
    def __init__(self, data_dir: Path, brokers: int, session_timeout_ms: int,
                 broker_config: dict[str, str], zookeeper_nodes: int = 3, proxied: bool = False) -> None:
        self.data_dir = data_dir
        self.broker_ids = list(range(1, brokers + 1))
        self.session_timeout_ms = session_timeout_ms
        self.broker_config = broker_config
        self.zookeeper = ZooKeeperEnsemble.on_free_ports(data_dir / "zookeeper", zookeeper_nodes, host="0.0.0.0",
                                                         client_ports=ZK_PORTS[:zookeeper_nodes])
        self._procs: dict[int, subprocess.Popen[bytes]] = {}
        self._started_ms: dict[int, int] = {}  # wall clock, as the registration's timestamp
        self._rules: list[list[str]] = []
        self._zk: KazooClient | None = None
        self.proxied = proxied
        self._proxy: subprocess.Popen[str] | None = None

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(f"{broker_host(b)}:{BROKER_PORT}" for b in self.broker_ids)

    def broker_dir(self, broker_id: int) -> Path:
        return self.data_dir / f"broker-{broker_id}"

    # -- processes --------------------------------------------------------------------------

    def start(self, timeout_s: float = 60.0) -> None:
        self.zookeeper.start()
        if self.proxied:
            self._start_proxy()
        for b in self.broker_ids:
            self.start_broker(b)
        self.wait_registered(timeout_s)

    def start_broker(self, broker_id: int) -> None:
        bdir = self.broker_dir(broker_id)
        bdir.mkdir(parents=True, exist_ok=True)
        props = bdir / "server.properties"
        props.write_text("".join(f"{k}={v}\n" for k, v in self.broker_config.items()))
        log = open(bdir / "broker.log", "ab")
        self._started_ms[broker_id] = int(time.time() * 1000)
        address = ["--listen", f"{broker_host(broker_id)}:{PROXIED_PORT}",
                   "--advertise", f"{broker_host(broker_id)}:{BROKER_PORT}"] if self.proxied else \
            ["--listen", f"{broker_host(broker_id)}:{BROKER_PORT}"]
        try:
            self._procs[broker_id] = subprocess.Popen(
                [sys.executable, "-m", "odradek", "broker", "--id", str(broker_id), *address,
                 "--zookeeper", self._zookeeper_connect(zookeeper_host(broker_id)),
                 "--data-dir", str(bdir / "data"), "--config", str(props),
                 "--session-timeout-ms", str(self.session_timeout_ms)],
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        finally:
            log.close()

    def _start_proxy(self) -> None:
        routes = [f"{broker_host(b)}:{BROKER_PORT}={broker_host(b)}:{PROXIED_PORT}" for b in self.broker_ids]
        log = open(self.data_dir / "delay-proxy.log", "ab")
        try:
            self._proxy = subprocess.Popen([sys.executable, "-m", "odradek.faults.delay_proxy", *routes],
                                           stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, text=True,
                                           start_new_session=True)
        finally:
            log.close()
        assert self._proxy.stdout is not None
        if self._proxy.stdout.readline().strip() != "ready":
            raise RuntimeError(f"the delay proxy did not start: see {self.data_dir / 'delay-proxy.log'}")

    def delay_one_connection(self, seconds: float, seed: int) -> str:
        """Hold what one connection (preferably one that carried a produce or a transactional
        request) sends towards its broker for `seconds`; what the proxy chose."""
        assert self._proxy is not None and self._proxy.stdin is not None and self._proxy.stdout is not None, \
            "a proxied cluster"
        self._proxy.stdin.write(f"delay {seconds} {seed}\n")
        self._proxy.stdin.flush()
        return self._proxy.stdout.readline().strip()

    def _zookeeper_connect(self, host: str) -> str:
        return ",".join(f"{host}:{p.client_port}" for p in self.zookeeper.peers) + CHROOT

    def broker_alive(self, broker_id: int) -> bool:
        proc = self._procs.get(broker_id)
        return proc is not None and proc.poll() is None

    def signal_broker(self, broker_id: int, sig: int) -> None:
        proc = self._procs[broker_id]
        if proc.poll() is None:
            os.kill(proc.pid, sig)
        if sig == signal.SIGKILL:
            proc.wait(30)

    def stop(self) -> None:
        """Every broker and ZooKeeper, by pid; a broker still paused is resumed to be killed."""
        for b, proc in self._procs.items():
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGCONT)
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait(30)
        if self._zk is not None:
            self._zk.stop()
            self._zk.close()
            self._zk = None
        self.zookeeper.stop()
        if self._proxy is not None:
            self._proxy.kill()
            self._proxy.communicate(timeout=30)   # waits, and closes its pipes

    # -- ZooKeeper's view ---------------------------------------------------------------------

    def zk(self) -> KazooClient:
        if self._zk is None:
            self._zk = KazooClient(hosts=self._zookeeper_connect("127.0.0.1"), timeout=10)
            self._zk.start(30)
        return self._zk

    def registered(self) -> set[int]:
        """The brokers registered by their running process: a killed broker's registration
        outlives it until its session expires, and a check passing on it let the next fault
        (a ZooKeeper restart) hit the new process during its first connection, which it
        does not survive, as Kafka's broker does not."""
        try:
            zk = self.zk()
            pending = {int(c): zk.get_async(f"/brokers/ids/{c}") for c in zk.get_children("/brokers/ids")}
            return {b for b, result in pending.items()
                    if int(json.loads(result.get()[0])["timestamp"]) >= self._started_ms.get(b, 0)}
        except Exception:  # noqa: BLE001 - ZooKeeper restarting: nobody known for now
            return set()

    def controller(self) -> int | None:
        try:
            return int(json.loads(self.zk().get("/controller")[0])["brokerid"])
        except (NoNodeError, ValueError, KeyError):
            return None
        except Exception:  # noqa: BLE001 - ZooKeeper restarting
            return None

    def leaders(self, topic: str) -> dict[int, int]:
        """partition -> leader as the partition state znodes say."""
        out = {}
        try:
            zk = self.zk()
            partitions = zk.get_children(f"/brokers/topics/{topic}/partitions")
            pending = {int(p): zk.get_async(f"/brokers/topics/{topic}/partitions/{p}/state") for p in partitions}
            for p, result in pending.items():  # pipelined: one round trip, not one a partition
                out[p] = int(json.loads(result.get()[0])["leader"])
        except Exception:  # noqa: BLE001 - ZooKeeper restarting
            pass
        return out

    def wait_registered(self, timeout_s: float) -> bool:
        """Until every ZooKeeper server serves, every broker process runs, is registered, and a
        controller is elected; False at once if a broker process has exited."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if not all(self.broker_alive(b) for b in self.broker_ids):
                return False
            if (all(m in ("leader", "follower", "standalone") for m in self.zookeeper.modes().values())
                    and all(self.broker_alive(b) for b in self.broker_ids)
                    and self.registered() == set(self.broker_ids) and self.controller() is not None):
                return True
            time.sleep(0.2)
        return False

    # -- network partitions (iptables in our own namespace) -----------------------------------

    def _drop(self, *match: str) -> None:
        rule = ["INPUT", *match, "-j", "DROP"]
        subprocess.run(["iptables", "-A", *rule], check=True)
        self._rules.append(rule)

    def cut_from_zookeeper(self, broker_id: int) -> None:
        host = zookeeper_host(broker_id)
        self._drop("-d", host, "-p", "tcp")
        self._drop("-s", host, "-p", "tcp")

    def cut_from_brokers(self, broker_id: int) -> None:
        """Broker `broker_id` and every other broker stop hearing each other; clients still
        reach all of them."""
        for other in self.broker_ids:
            if other != broker_id:
                self._drop("-s", broker_host(broker_id), "-d", broker_host(other))
                self._drop("-s", broker_host(other), "-d", broker_host(broker_id))

    def heal(self) -> None:
        while self._rules:
            subprocess.run(["iptables", "-D", *self._rules.pop()], check=True)
