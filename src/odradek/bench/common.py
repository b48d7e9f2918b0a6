"""What the private-cluster benchmarks (`odradek bench failover|groups|shutdown`) share: their
cluster (stopped however the bench ends, SIGTERM included), waiting for a settled cluster,
restarting a broker into a balanced one, the controller's timing records, and describing the
machine a figure came from (cores, memory, CPU model, how fast its CPU was that minute)."""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from odradek.admin.admin_client import describe_topics, elect_leaders, filter_partitions
from odradek.admin.errors import ClusterError
from odradek.admin.zookeeper import connect_zk
from odradek.cluster.local_cluster import LocalCluster
from odradek.common.netutil import free_port, free_port_block


def wait_full_isrs(bootstrap: str, topics: list[str], timeout: float) -> float:
    """Wait until no partition is under-replicated, so the controller failover starts from a
    settled cluster rather than racing the leaders' ISR expansions; returns when that was."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            short = filter_partitions(describe_topics(bootstrap, topics, timeout=60),
                                      under_replicated=True, offline=True)
        except Exception:  # noqa: BLE001 - a broker still starting: ask again
            short = [{"partitions": [None]}]
        if not short:
            return time.time()
        if time.monotonic() > deadline:
            count = sum(len(t["partitions"]) for t in short)
            raise ClusterError(f"{count} partitions still under-replicated after {timeout:g} s")
        time.sleep(0.5)


TIMING_MARK = "odradek.controller.timing: "


def timing_records(log: Path) -> list[dict[str, Any]]:
    """Every controller timing record in a broker log, in order."""
    out: list[dict[str, Any]] = []
    try:
        text = log.read_text(errors="replace")
    except OSError:
        return out
    for line in text.splitlines():
        at = line.find(TIMING_MARK)
        if at >= 0:
            try:
                out.append(json.loads(line[at + len(TIMING_MARK):]))
            except ValueError:
                pass
    return out


def wait_record(cluster: LocalCluster, broker_ids: list[int], event: str, after: float,
                timeout: float, want=lambda r: True) -> tuple[int, dict[str, Any]]:
    """The first timing record of `event` fired after `after` and fully answered."""
    deadline = time.monotonic() + timeout
    while True:
        for b in broker_ids:
            for r in timing_records(cluster.broker_dir(b) / "broker.log"):
                if (r.get("event") == event and (r.get("fired") or r.get("dequeued", 0)) >= after
                        and "acked" in r and want(r)):
                    return b, r
        if time.monotonic() > deadline:
            raise ClusterError(f"no acknowledged {event} event in the controller timing log after "
                               f"{timeout:g} s (brokers {broker_ids})")
        time.sleep(0.1)


def restart_broker(cluster: LocalCluster, bootstrap: str, topics: list[str], broker: int,
                   timeout: float, controllers: list[int] | None = None,
                   settle_s: float = 2.0) -> tuple[float, int]:
    """Start ``broker`` again (with ``controllers``, wait until one of them handled its
    BrokerChange), wait until it is back in every ISR, then move leadership back to the
    preferred replicas, as the controller's leader rebalance would do within
    leader.imbalance.check.interval.seconds: the next round starts from a balanced cluster
    (else the controller leads half the partitions), ``settle_s`` later. Returns the seconds
    until every ISR was full and the number of leaders moved back."""
    restarted = time.time()
    cluster.start_broker(broker)
    if controllers:
        wait_record(cluster, controllers, "BrokerChange", restarted, timeout,
                    lambda r: broker in r.get("new", []))
    back_s = round(wait_full_isrs(bootstrap, topics, timeout) - restarted, 3)
    elected = elect_leaders(bootstrap, None, timeout=min(timeout, 120.0))
    time.sleep(settle_s)
    return back_s, sum(1 for e in elected.values() if e is None)


def exit_on_sigterm() -> Any:
    """A bench killed with SIGTERM (timeout, Ctrl-C's cousin) still stops its cluster: the
    signal becomes SystemExit, so the finally clauses run. Returns the handler it replaced."""
    if threading.current_thread() is not threading.main_thread():
        return None

    def stop(signum: int, frame: Any) -> None:
        raise SystemExit(128 + signum)

    return signal.signal(signal.SIGTERM, stop)


def cpu_probe_s(n: int = 3_000_000) -> float:
    """Seconds a fixed pure-Python loop takes: how fast this machine's CPU was during the run
    (shared machines vary by 2x from hour to hour), so runs can be compared."""
    started = time.perf_counter()
    total = 0
    for i in range(n):
        total += i
    return round(time.perf_counter() - started, 3)


def machine() -> dict[str, Any]:
    """Cores, memory and CPU model (from /proc/cpuinfo and /proc/meminfo) and the UTC date."""
    model = "unknown"
    mem_kb = 0
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem_kb = int(line.split()[1])
                break
    except (OSError, ValueError, IndexError):
        pass
    return {"cores": os.cpu_count() or 0, "memory_gib": round(mem_kb / 1024 ** 2, 1),
            "cpu_model": model, "date_utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
            "loadavg_1m": round(os.getloadavg()[0], 2)}


def format_machine(m: dict[str, Any]) -> str:
    return (f"{m['cores']} cores ({m['cpu_model']}), {m['memory_gib']:g} GiB, {m['date_utc']} UTC, "
            f"load average {m['loadavg_1m']}")


def tear_down(cluster: LocalCluster, tmp: Path, keep_dir: Path | None, previous_sigterm: Any) -> None:
    """The end of a bench's private cluster: stop it, remove its temp dir unless the caller
    keeps it (--keep-dir), and give SIGTERM back its previous handler."""
    cluster.down()
    if keep_dir is None:
        shutil.rmtree(tmp, ignore_errors=True)
    if previous_sigterm is not None:
        signal.signal(signal.SIGTERM, previous_sigterm)


@contextlib.contextmanager
def private_cluster(brokers: int, keep_dir: Path | None, prefix: str, *,
                    broker_args: dict[str, Any] | None = None,
                    kill_at_end: bool = False, metrics: bool = False) -> Iterator[tuple[LocalCluster, str, Any]]:
    """A bench's own cluster (its own ZooKeeper, brokers on free ports started with
    ``broker_args``, in keep_dir or a temp dir named ``prefix``...) as (cluster, bootstrap
    servers, a kazoo client of its ZooKeeper), stopped however the bench ends, SIGTERM included
    (exit_on_sigterm, tear_down). ``kill_at_end``: the brokers are killed rather than shut down
    (a cluster thrown away needs no controlled shutdown: the last broker would wait out its
    retries with nobody left to lead its partitions). ``metrics``: the brokers serve Prometheus
    metrics (LocalCluster.metrics_url)."""
    previous_sigterm = exit_on_sigterm()
    tmp = Path(keep_dir) if keep_dir else Path(tempfile.mkdtemp(prefix=prefix))
    cluster = LocalCluster(tmp, brokers, base_port=free_port_block(brokers), zk_port=free_port(),
                           broker_args=broker_args,
                           metrics_base_port=free_port_block(brokers) if metrics else None)
    try:
        bootstrap = cluster.up(timeout=120)
        zk = connect_zk(cluster.zookeeper_connect)
        try:
            yield cluster, bootstrap, zk
        finally:
            zk.stop()
            zk.close()
    finally:
        if kill_at_end:
            for b in cluster.broker_ids:
                if cluster.broker_pid(b) is not None:
                    cluster.kill_broker(b, signal.SIGKILL)
        tear_down(cluster, tmp, keep_dir, previous_sigterm)
