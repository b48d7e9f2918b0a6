"""What the private-cluster benchmarks (`odradek bench failover`, `odradek bench groups`) share:
waiting for a settled cluster, stopping it on SIGTERM, and describing the machine a figure
came from (cores, memory, CPU model, how fast its CPU was that minute)."""
from __future__ import annotations

import contextlib
import os
import shutil
import signal
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from odradek.admin import describe_topics, filter_partitions
from odradek.cluster import ClusterError, LocalCluster, connect_zk
from odradek.netutil import free_port, free_port_block


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
def private_cluster(brokers: int, keep_dir: Path | None, prefix: str) -> Iterator[tuple[LocalCluster, str, Any]]:
    """A bench's own cluster (its own ZooKeeper, brokers on free ports, in keep_dir or a temp
    dir named ``prefix``...) as (cluster, bootstrap servers, a kazoo client of its ZooKeeper),
    stopped however the bench ends, SIGTERM included (exit_on_sigterm, tear_down)."""
    previous_sigterm = exit_on_sigterm()
    tmp = Path(keep_dir) if keep_dir else Path(tempfile.mkdtemp(prefix=prefix))
    cluster = LocalCluster(tmp, brokers, base_port=free_port_block(brokers), zk_port=free_port())
    try:
        bootstrap = cluster.up(timeout=120)
        zk = connect_zk(cluster.zookeeper_connect)
        try:
            yield cluster, bootstrap, zk
        finally:
            zk.stop()
            zk.close()
    finally:
        tear_down(cluster, tmp, keep_dir, previous_sigterm)
