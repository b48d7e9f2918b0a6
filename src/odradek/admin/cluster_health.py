"""`odradek status`: a cluster's health read straight from ZooKeeper, in Kafka's znode layout,
because offline and under-replicated partitions are exactly what a broker that is down cannot
tell you, and an exit status a script can use as a health check, as `rpk cluster health` gives.

ZooKeeper alone lags behind a crash: a broker killed with SIGKILL keeps its registration in
/brokers/ids, and stays leader and in-sync replica in every partition state, until ZooKeeper
expires its session (zookeeper.session.timeout.ms). For a local cluster the data dir records
each broker's pid, so a broker whose process is gone is reported dead at once, and its
partitions are counted from that truth rather than from ZooKeeper's stale view.
"""
from __future__ import annotations

import json
import socket
from dataclasses import dataclass
from typing import Any

from odradek.admin.errors import AdminError, ClusterError
from odradek.admin.zookeeper import collect_data, connect_zk
from odradek.cli.output import plural
from odradek.zk import paths

#: `odradek status`'s exit statuses (documented in its --help, README and docs/operations.md);
#: 1 is every `odradek: error:` (ZooKeeper unreachable, no cluster there) and 2 argparse's bad
#: arguments, so an unhealthy cluster gets a status of its own.
EXIT_HEALTHY, EXIT_ERROR, EXIT_UNHEALTHY = 0, 1, 3

#: How many problem partitions the text lists by name (the counts are always whole).
_LISTED = 20


@dataclass(frozen=True)
class BrokerProcess:
    """What a local cluster's data dir records of one broker's process: the pid in its pid
    file (None: nothing recorded, e.g. after `odradek down`) and whether that process runs."""

    pid: int | None
    running: bool


def zookeeper_modes(zookeeper: str) -> list[dict[str, str]]:
    """Each server of a connect string with its mode (leader, follower, standalone, "not
    serving" or "down"), from the `srvr` four-letter word: what an operator needs when the
    ensemble lost its quorum and nothing else can be read."""
    from odradek.zk.server import connect_string_servers, server_mode

    return [{"server": f"{host}:{port}", "mode": server_mode(host, port)}
            for host, port in connect_string_servers(zookeeper)]


def refused_servers(zookeeper: str, timeout: float = 1.0) -> list[str]:
    """The servers of a connect string that refuse a connection outright (nothing listens):
    kazoo would retry them until its whole timeout and then only say "Connection time-out"."""
    from odradek.zk.server import connect_string_servers

    refused = []
    for host, port in connect_string_servers(zookeeper):
        try:
            socket.create_connection((host, port), timeout=timeout).close()
        except ConnectionRefusedError:
            refused.append(f"{host}:{port}")
        except OSError:
            pass  # unreachable or slow: kazoo's timeout decides
    return refused


def cluster_status(zookeeper: str, timeout: float = 10.0,
                   expected: dict[int, tuple[str, int]] | None = None,
                   processes: dict[int, BrokerProcess] | None = None) -> dict[str, Any]:
    """Controller, brokers, partition health and preferred-leader imbalance, read from
    ZooKeeper's znodes, the mode of every ZooKeeper server, and the verdict: "healthy" and the
    "unhealthy_reasons" (rpk cluster health's names).

    "brokers" lists every broker known to exist, live or not: the registered ones, those in
    ``expected`` (id -> (host, port), e.g. a local cluster's cluster.json), and those named as
    replicas in a partition assignment. A dead broker has deregistered from /brokers/ids, so
    only these other sources can name it. ``processes`` (a local cluster's recorded pids)
    overrules a registration whose process is gone: ZooKeeper keeps it until the session
    expires, but nothing answers there any more.

    Offline: no live leader. Under-replicated: a live leader, but fewer live in-sync replicas
    than replicas (a replica whose process is gone is not in sync, whatever ZooKeeper's ISR
    still says; otherwise the rule of `topics describe --under-replicated`). Raises
    AdminError when ZooKeeper cannot be read."""
    modes = zookeeper_modes(zookeeper)
    refused = refused_servers(zookeeper)
    if refused and len(refused) == len(modes):  # fail now rather than after kazoo's whole timeout
        raise AdminError(f"nothing listens on {', '.join(refused)} (is ZooKeeper running there?)")
    try:
        zk = connect_zk(zookeeper, timeout)
    except ClusterError as exc:
        shown = ", ".join(f"{m['server']} {m['mode']}" for m in modes)
        raise AdminError(f"{exc}; ZooKeeper servers: {shown}") from None
    try:
        if not zk.exists("/brokers/ids"):  # every broker registers there: nothing of a cluster here
            chroot = "/" in zookeeper
            raise AdminError(f"no odradek/Kafka cluster under ZooKeeper {zookeeper}"
                              + (" (wrong chroot?)" if chroot else " (no broker ever registered; a chroot missing?)"))
        broker_ids = sorted(zk.get_children("/brokers/ids"), key=int)
        topics = sorted(_children(zk, "/brokers/topics"))
        # Pipelined reads: one round trip for the controller, every registration and every topic
        read = collect_data({path: zk.get_async(path) for path in
                             ["/controller", "/controller_epoch"] + [f"/brokers/ids/{b}" for b in broker_ids]
                             + [f"/brokers/topics/{t}" for t in topics]}, timeout)
        controller = _loads_or_none(read["/controller"])
        epoch = _loads_or_none(read["/controller_epoch"])
        registered: list[dict[str, Any]] = []
        for bid in broker_ids:
            data = read[f"/brokers/ids/{bid}"]
            info = _loads_or_none(data) or {}
            # the broker publishes where it serves metrics in its own registration (zk.paths.encode_broker_info)
            registered.append({"id": int(bid), "host": info.get("host"), "port": info.get("port"),
                               "metrics_url": paths.decode_broker_metrics_url(data) if data else None})
        topic_znodes = {t: _loads_or_none(read[f"/brokers/topics/{t}"]) or {} for t in topics}
        assignments = {t: z.get("partitions", {}) for t, z in topic_znodes.items()}
        # replicas a reassignment is adding are not missing from the ISR yet (Kafka's isUnderReplicated)
        adding = {(t, int(p)): len(r) for t, z in topic_znodes.items()
                  for p, r in (z.get("adding_replicas") or {}).items()}
        # Pipelined reads: one round trip per partition would dominate with thousands of them.
        pending = {(t, int(p)): zk.get_async(f"/brokers/topics/{t}/partitions/{p}/state")
                   for t, parts in assignments.items() for p in parts}
        states: dict[tuple[str, int], dict[str, Any] | None] = {}
        for tp, result in sorted(pending.items()):
            try:
                states[tp] = json.loads(result.get(timeout=timeout)[0])
            except Exception:  # NoNodeError: the controller has not elected a leader yet
                states[tp] = None
    finally:
        zk.stop()
        zk.close()

    processes = processes or {}
    gone = {b["id"] for b in registered if _gone(processes.get(b["id"]))}
    live_brokers = [{**b, "pid": _pid(processes, b["id"])} for b in registered if b["id"] not in gone]
    live = {b["id"] for b in live_brokers}
    known = {b["id"]: {**b, "live": b["id"] in live, "registered": True, "pid": _pid(processes, b["id"])}
             for b in registered}
    for bid, (host, port) in (expected or {}).items():
        known.setdefault(bid, {"id": bid, "host": host, "port": port, "metrics_url": None, "live": False,
                               "registered": False, "pid": _pid(processes, bid)})
    for parts in assignments.values():
        for replicas in parts.values():
            for bid in replicas:
                known.setdefault(int(bid), {"id": int(bid), "host": None, "port": None, "metrics_url": None,
                                            "live": False, "registered": False, "pid": _pid(processes, int(bid))})

    offline, under = [], []
    for (t, p), state in states.items():
        replicas = assignments[t][str(p)]
        leader = -1 if state is None else state.get("leader", -1)
        if leader not in live:
            offline.append(f"{t}-{p}")
        elif state is not None and (len([r for r in state.get("isr", ()) if r in live])
                                    < len(replicas) - adding.get((t, p), 0)):
            under.append(f"{t}-{p}")
    imbalance = leader_imbalance(assignments, states)

    reasons = [_dead_reason(b, processes.get(b["id"])) for b in sorted(known.values(), key=lambda b: b["id"])
               if not b["live"]]
    if not known:
        reasons.append("no broker has registered")
    if controller is None:
        reasons.append("no controller elected")
    if offline:
        reasons.append(f"{plural(len(offline), 'partition')} offline (no live leader)")
    if under:
        reasons.append(f"{plural(len(under), 'partition')} under-replicated")
    if len(modes) > 1:  # an ensemble: a server down or out of the quorum is one failure closer to losing it
        reasons += [f"ZooKeeper server {m['server']} {m['mode']}" for m in modes
                    if m["mode"] in ("down", "not serving")]
    return {
        "healthy": not reasons,
        "unhealthy_reasons": reasons,
        "zookeeper": zookeeper,
        "zookeeper_servers": modes,
        "controller": controller["brokerid"] if controller else None,
        "controller_epoch": epoch,
        "live_brokers": live_brokers,
        "brokers": [known[b] for b in sorted(known)],
        "dead_brokers": sorted(b for b in known if not known[b]["live"]),
        "topics": len(topics),
        "partitions": len(states),
        "offline_partitions": offline,
        "under_replicated_partitions": under,
        **imbalance,
    }


def leader_imbalance(assignments: dict[str, dict[str, list[int]]],
                     states: dict[tuple[str, int], dict[str, Any] | None]) -> dict[str, Any]:
    """Kafka's PreferredReplicaImbalanceCount (partitions with a leader state whose leader is
    not their first replica, offline ones included, as the controller counts them) and, per
    broker preferred for some partition, the share of those it does not lead: what the
    controller's leader rebalance compares with leader.imbalance.per.broker.percentage."""
    count = 0
    preferred: dict[int, list[int]] = {}  # broker -> [partitions it is preferred for, of those led elsewhere]
    for (t, p), state in states.items():
        replicas = assignments[t][str(p)]
        if state is None or not replicas:
            continue
        first = int(replicas[0])
        led_elsewhere = state.get("leader", -1) != first
        count += led_elsewhere
        tally = preferred.setdefault(first, [0, 0])
        tally[0] += 1
        tally[1] += led_elsewhere
    return {
        "preferred_replica_imbalance_count": count,
        "leader_imbalance_per_broker": [
            {"broker": b, "preferred_partitions": total, "not_led": not_led,
             "percentage": round(100 * not_led / total, 1)}
            for b, (total, not_led) in sorted(preferred.items())],
    }


def _gone(process: BrokerProcess | None) -> bool:
    """A recorded process that no longer runs (nothing recorded: ZooKeeper's word stands)."""
    return process is not None and process.pid is not None and not process.running


def _pid(processes: dict[int, BrokerProcess], broker_id: int) -> int | None:
    process = processes.get(broker_id)
    return process.pid if process is not None and process.running else None


def _dead_reason(broker: dict[str, Any], process: BrokerProcess | None) -> str:
    """Why broker ``broker`` counts as dead, in the words an operator acts on."""
    bid = broker["id"]
    if broker["registered"]:  # only a recorded pid that is gone overrules a registration
        assert process is not None
        return f"broker {bid}: process {process.pid} is gone; its ZooKeeper session has not expired yet"
    if process is None:
        return f"broker {bid}: not registered in ZooKeeper"
    if process.pid is None:
        return f"broker {bid}: not running"
    if not process.running:
        return f"broker {bid}: process {process.pid} is gone"
    return f"broker {bid}: process {process.pid} runs but has not registered in ZooKeeper"


def _loads_or_none(data: bytes | None) -> Any:
    return json.loads(data) if data else None


def _children(zk: Any, path: str) -> list[str]:
    return zk.get_children(path) if zk.exists(path) else []


def exit_status(status: dict[str, Any]) -> int:
    """EXIT_HEALTHY or EXIT_UNHEALTHY for a status cluster_status returned."""
    return EXIT_HEALTHY if status["healthy"] else EXIT_UNHEALTHY


def format_status(status: dict[str, Any]) -> str:
    """The status as `key: value` lines, the verdict and its reasons first; problem partitions
    listed (first 20) when present."""
    brokers = ", ".join(f"{b['id']} ({b['host']}:{b['port']})" if b["host"] else str(b["id"])
                        for b in status["live_brokers"]) or "none"
    dead = ", ".join(_dead_text(b) for b in status.get("brokers", []) if not b["live"]) or "none"
    ctrl = status["controller"]
    lines = [
        f"healthy:            {'yes' if status['healthy'] else 'no'}",
        *(f"  - {reason}" for reason in status["unhealthy_reasons"]),
        f"zookeeper:          {status['zookeeper']}",
        *(f"  server {i}:         {m['server']} {m['mode']}" for i, m in enumerate(status["zookeeper_servers"], 1)),
        f"controller:         {'none' if ctrl is None else ctrl}"
        + (f" (epoch {status['controller_epoch']})" if status["controller_epoch"] is not None else ""),
        f"live brokers:       {brokers}",
        f"dead brokers:       {dead}",
        f"topics:             {status['topics']}",
        f"partitions:         {status['partitions']}",
        f"offline:            {len(status['offline_partitions'])}",
        f"under-replicated:   {len(status['under_replicated_partitions'])}",
        f"leader imbalance:   {_imbalance_text(status)}",
    ]
    for key in ("offline_partitions", "under_replicated_partitions"):
        if status[key]:
            more = f" (+{len(status[key]) - _LISTED} more)" if len(status[key]) > _LISTED else ""
            lines.append(f"{key.replace('_', ' ')}: {' '.join(status[key][:_LISTED])}{more}")
    return "\n".join(lines)


def _dead_text(broker: dict[str, Any]) -> str:
    where = [f"{broker['host']}:{broker['port']}"] if broker["host"] else []
    if broker["registered"]:
        where.append("process gone, still registered")
    return f"{broker['id']}" + (f" ({', '.join(where)})" if where else "")


def _imbalance_text(status: dict[str, Any]) -> str:
    """`0`, or the count and each broker that does not lead all it is preferred for."""
    count = status["preferred_replica_imbalance_count"]
    if not count:
        return "0"
    per_broker = "; ".join(f"broker {b['broker']} leads {b['preferred_partitions'] - b['not_led']} of the "
                           f"{b['preferred_partitions']} it is preferred for (imbalance {b['percentage']:g}%)"
                           for b in status["leader_imbalance_per_broker"] if b["not_led"])
    return f"{plural(count, 'partition')} not led by {'its' if count == 1 else 'their'} preferred replica: {per_broker}"
