"""The faults, drawn at random under a seed so a run replays.

Each fault is injected, held, healed, and the run waits until every broker is back and
registered before drawing the next, so at most one fault is in force at a time. Hold times are
multiples of the brokers' ZooKeeper session timeout: "soon" is within it (ZooKeeper never
notices), "late" and "past" beyond it (the controller fails the broker over).
"""
from __future__ import annotations

import random
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

from odradek.faults.cluster import FaultCluster

KINDS = (
    "kill-leader-restart-soon", "kill-leader-restart-late",
    "kill-controller-restart-soon", "kill-controller-restart-late",
    "pause-past-session-timeout", "zookeeper-server-kill", "zookeeper-quorum-loss", "zookeeper-restart",
    "broker-cut-from-zookeeper", "leader-cut-from-followers", "controller-cut-from-brokers",
)


@dataclass
class Fault:
    kind: str
    broker: int | None
    started: float
    held_s: float
    detail: str = ""     # what a workload's own fault did ("4 -> 7", "member 2", "not now: ...")


#: a workload's own fault: given the nemesis's random source, inject, hold and heal it;
#: returns (the hold in seconds, what it did)
WorkloadFault = Callable[[random.Random], tuple[float, str]]


class Nemesis:
    def __init__(self, cluster: FaultCluster, topic: str, seed: int, kinds: tuple[str, ...] = KINDS,
                 workload_faults: dict[str, WorkloadFault] | None = None) -> None:
        self.cluster, self.topic = cluster, topic
        self.rng = random.Random(seed)
        self.kinds = kinds
        self.workload_faults = workload_faults or {}
        self.session_s = cluster.session_timeout_ms / 1000
        self.history: list[Fault] = []

    def _leader(self) -> int:
        leaders = [b for b in self.cluster.leaders(self.topic).values() if b in self.cluster.broker_ids]
        return self.rng.choice(sorted(leaders)) if leaders else self.rng.choice(self.cluster.broker_ids)

    def _controller(self) -> int:
        controller = self.cluster.controller()
        return controller if controller is not None else self.rng.choice(self.cluster.broker_ids)

    def _soon(self) -> float:
        return self.rng.uniform(0.2, 0.6) * self.session_s

    def _past(self) -> float:
        return self.rng.uniform(1.5, 2.5) * self.session_s

    def step(self) -> Fault:
        """Inject one fault, hold it, heal it."""
        kind = self.rng.choice(self.kinds)
        c = self.cluster
        broker: int | None = None
        start = time.monotonic()
        if kind in self.workload_faults:
            hold, detail = self.workload_faults[kind](self.rng)
            fault = Fault(kind, None, start, hold, detail)
            self.history.append(fault)
            return fault
        if kind.startswith("kill-"):
            broker = self._controller() if "controller" in kind else self._leader()
            c.signal_broker(broker, signal.SIGKILL)
            hold = self._soon() if kind.endswith("soon") else self._past()
            time.sleep(hold)
            c.start_broker(broker)
        elif kind == "pause-past-session-timeout":
            broker = self.rng.choice([self._leader(), self._controller()])
            c.signal_broker(broker, signal.SIGSTOP)
            hold = self._past()
            time.sleep(hold)
            c.signal_broker(broker, signal.SIGCONT)
        elif kind.startswith("zookeeper-"):
            hold = self._zookeeper_fault(kind)
        else:
            cut: Callable[[int], None]
            if kind == "broker-cut-from-zookeeper":
                broker, cut = self.rng.choice(c.broker_ids), c.cut_from_zookeeper
            elif kind == "leader-cut-from-followers":
                broker, cut = self._leader(), c.cut_from_brokers
            else:
                broker, cut = self._controller(), c.cut_from_brokers
            cut(broker)
            hold = self._past()
            time.sleep(hold)
            c.heal()
        fault = Fault(kind, broker, start, hold)
        self.history.append(fault)
        return fault

    def _zookeeper_fault(self, kind: str) -> float:
        """kill -9 of one server (clients must not notice), of a majority (no quorum: brokers
        keep serving what they lead, nothing can change leadership), or a restart of all."""
        ensemble = self.cluster.zookeeper
        ids = ensemble.server_ids
        if kind == "zookeeper-restart" or len(ids) < 3:
            victims, hold = ids, self._soon()
        elif kind == "zookeeper-server-kill":
            leader = ensemble.leader_id()
            victims, hold = [leader if leader is not None and self.rng.random() < 0.5 else self.rng.choice(ids)], \
                self.rng.choice((self._soon(), self._past()))
        else:
            victims, hold = self.rng.sample(ids, ensemble.quorum_size), self._past()
        for sid in victims:
            ensemble.kill(sid)
        time.sleep(hold)
        for sid in victims:
            ensemble.restart(sid, wait=False)
        ensemble.wait_for_quorum(60)
        return hold


def fault_log(history: list[Fault]) -> list[str]:
    """The faults as a report lists them, each with its start on the monotonic clock (the one
    the workloads' own event files use), e.g. "1234.567 kill-group-member (member eager-1)"."""
    return [f"{f.started:.3f} {f.kind}{'' if f.broker is None else f' on broker {f.broker}'}"
            f"{f' ({f.detail})' if f.detail else ''}" for f in history]


def run_faults(cluster: FaultCluster, nemesis: Nemesis, count: int, seed: int, brokers_exited: list[str],
               not_recovered: list[str], after_fault: Callable[[int, str], None] | None = None) -> None:
    """The nemesis's ``count`` faults one after another, as every workload runs them: each
    printed to stderr; then every broker registered again (a broker that exited by itself is
    an anomaly, started again so the rest of the run still attacks three brokers), the
    workload's own check (``after_fault(i, what)``), and a pause of 0.2-1.0 s drawn from the
    seed."""
    pause = random.Random(seed + 1)
    for i in range(1, count + 1):
        fault = nemesis.step()
        target = "" if fault.broker is None else f" on broker {fault.broker}"
        detail = f" ({fault.detail})" if fault.detail else ""
        print(f"fault {i}/{count}: {fault.kind}{target}{detail}, held {fault.held_s:.1f} s",
              file=sys.stderr, flush=True)
        recovered = cluster.wait_registered(60)
        for b in [b for b in cluster.broker_ids if not cluster.broker_alive(b)]:
            brokers_exited.append(f"broker {b} exited after fault {i} ({fault.kind}{target}{detail})")
            cluster.start_broker(b)
        if after_fault is not None:
            after_fault(i, f"{fault.kind}{target}{detail}")
        if not recovered and not cluster.wait_registered(60):
            not_recovered.append(f"{fault.kind}{target}: the cluster did not recover in 120 s")
        time.sleep(pause.uniform(0.2, 1.0))
