"""``python -m odradek.fuzz``: fuzz the broker's request path and print what happened.

Volume comes from a deterministic pseudo-random byte-mutation loop over valid requests driving
the broker in-process (inprocess.py): a frame costs well under a millisecond there, so a
million take minutes, where Hypothesis, which spends most of its time deciding what to
generate and shrinking, manages about a thousand examples a second at best. Hypothesis drives
the schema-aware generator (structured.py) in the tests instead, where a failure should
shrink to a minimal request. A sample of the same cases then goes over TCP to a live broker
process (tcp.py) with its own ZooKeeper. The same --stream number gives the same frames; the exit status is 1 when anything
crashed, hung, answered malformed or changed stored data.

Then the SASL exchange of a SASL_PLAINTEXT listener (sasl_cases.py, sasl_driver.py): truncated,
oversized and out-of-order SASL frames, garbage mechanism messages, bare tokens after a v0
handshake, re-authentications as another user, Kafka requests before authentication; in-process
(sasl_inprocess.py) and over TCP to a live broker (sasl_tcp.py). Besides crashes and hangs it
fails on any request served before a successful authentication (or as another principal) and on
a correct login refused.
"""
from __future__ import annotations

import argparse
import multiprocessing
import platform
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from odradek.fuzz import inprocess
from odradek.fuzz.report import Report


def in_process(frames: int, stream: int, workers: int, workdir: Path | None) -> Report:
    return _on_workers(inprocess.worker, frames, stream, workers, workdir)


def _on_workers(worker: Callable[[tuple[int, int, int, str | None]], Report], count: int, stream: int,
                workers: int, workdir: Path | None) -> Report:
    """``count`` cases shared among ``workers`` processes running ``worker`` (a module-level
    function, which a spawned process can import), their reports merged."""
    started = time.perf_counter()
    shares = [count // workers + (1 if w < count % workers else 0) for w in range(workers)]
    jobs = [(share, stream, w, str(workdir) if workdir else None) for w, share in enumerate(shares)]
    if workers == 1:
        results = [worker(jobs[0])]
    else:
        with multiprocessing.get_context("spawn").Pool(workers) as pool:
            results = pool.map(worker, jobs)
    total = Report()
    for r in results:
        total.merge(r)
    total.seconds = time.perf_counter() - started
    return total


def over_tcp(frames: int, stream: int, workdir: Path | None) -> Report:
    """A private ZooKeeper and one broker on free loopback ports, stopped by pid afterwards."""
    from odradek.cluster.local_cluster import LocalCluster
    from odradek.common.netutil import free_port, free_port_block
    from odradek.fuzz import tcp

    with tempfile.TemporaryDirectory(prefix="odradek-fuzz-tcp-", dir=workdir) as tmp:
        cluster = LocalCluster(Path(tmp), 1, base_port=free_port_block(1), zk_port=free_port(),
                               broker_args={"controlled_shutdown_enable": False})
        try:
            cluster.up(timeout=90)
            return tcp.run(cluster.host, cluster.broker_port(1), cluster.zookeeper_connect, cluster.broker_dir(1),
                           lambda: cluster.broker_pid(1) is not None, frames, stream)
        finally:
            cluster.down()


def sasl_in_process(cases: int, stream: int, workers: int, workdir: Path | None) -> Report:
    from odradek.fuzz import sasl_inprocess

    return _on_workers(sasl_inprocess.worker, cases, stream, workers, workdir)


def sasl_over_tcp(cases: int, stream: int, workdir: Path | None) -> Report:
    """A private ZooKeeper and one broker with a SASL_PLAINTEXT listener, stopped by pid afterwards."""
    from odradek.cluster.local_cluster import LocalCluster
    from odradek.common.netutil import free_port, free_port_block
    from odradek.fuzz import sasl_tcp

    with tempfile.TemporaryDirectory(prefix="odradek-fuzz-sasl-", dir=workdir) as tmp:
        cluster = LocalCluster(Path(tmp), 1, base_port=free_port_block(2), zk_port=free_port(),
                               broker_args=sasl_tcp.broker_settings())
        try:
            cluster.up(timeout=90)
            port = cluster.broker_port(1)
            return sasl_tcp.run(cluster.host, port + 1, port, cluster.broker_dir(1) / "broker.log",
                                lambda: cluster.broker_pid(1) is not None, cases, stream)
        finally:
            cluster.down()


def default_workdir() -> Path | None:
    """A RAM-backed directory when there is one: rebuilding a broker fsyncs its checkpoints."""
    shm = Path("/dev/shm")
    return shm if shm.is_dir() else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m odradek.fuzz", description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=1_000_000, help="in-process frames (default 1,000,000)")
    parser.add_argument("--tcp-frames", type=int, default=3000, help="frames over TCP to a live broker (0: none)")
    parser.add_argument("--sasl-cases", type=int, default=200_000,
                        help="SASL exchanges in-process, on a SASL_PLAINTEXT listener (default 200,000)")
    parser.add_argument("--sasl-tcp-cases", type=int, default=3000,
                        help="SASL exchanges over TCP to a live broker's SASL_PLAINTEXT listener (0: none)")
    parser.add_argument("--stream", type=int, default=1, help="which pseudo-random stream of cases (default 1)")
    parser.add_argument("--workers", type=int, default=2, help="in-process worker processes (default 2)")
    parser.add_argument("--workdir", type=Path, default=None, help="where brokers keep their data (default /dev/shm)")
    args = parser.parse_args(argv)
    workdir = args.workdir or default_workdir()
    print(f"odradek protocol fuzzing: stream {args.stream}, {args.frames:,} frames in-process on {args.workers} "
          f"workers, {args.tcp_frames:,} over TCP; SASL: {args.sasl_cases:,} exchanges in-process, "
          f"{args.sasl_tcp_cases:,} over TCP; {platform.python_implementation()} {platform.python_version()}",
          flush=True)
    failures = 0
    if args.frames:
        report = in_process(args.frames, args.stream, args.workers, workdir)
        print(report.summary("in-process"), flush=True)
        failures += report.failures
    if args.tcp_frames:
        report = over_tcp(args.tcp_frames, args.stream, workdir)
        print(report.summary("over TCP"), flush=True)
        failures += report.failures
    if args.sasl_cases:
        report = sasl_in_process(args.sasl_cases, args.stream, args.workers, workdir)
        print(report.summary("SASL in-process"), flush=True)
        failures += report.failures
    if args.sasl_tcp_cases:
        report = sasl_over_tcp(args.sasl_tcp_cases, args.stream, workdir)
        print(report.summary("SASL over TCP"), flush=True)
        failures += report.failures
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
