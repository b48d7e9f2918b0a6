"""`odradek broker`, `up`, `down`, `status` and `ui`: running brokers and local clusters (the
processes are cluster/local_cluster.py's), and looking at a cluster through ZooKeeper."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from odradek.admin.zookeeper import zk_failure_text
from odradek.cli.args import (
    UserError,
    add_watch_option,
    directory_arg,
    hostport_arg,
    port_or_zero_arg,
    positive_int,
    seconds_arg,
    show_or_watch,
    zk_connect_arg,
)
from odradek.cluster.local_cluster import LocalCluster
from odradek.cluster.secure_setup import paste_settings
from odradek.common.errors import StartupRefusedError, os_error_text


def add_commands(sub: Any) -> None:
    """broker, up, down, status and ui."""
    b = sub.add_parser("broker", help="run one broker in the foreground until SIGTERM")
    b.add_argument("--id", type=int, help="broker.id")
    b.add_argument("--listen", type=hostport_arg, metavar="HOST:PORT", help="address to serve Kafka clients on")
    b.add_argument("--advertise", type=hostport_arg, metavar="HOST:PORT",
                   help="address to register for clients and other brokers when a port forward or proxy "
                        "leads to --listen (default: --listen)")
    b.add_argument("--zookeeper", type=zk_connect_arg, metavar="CONN", help="HOST:PORT[,HOST:PORT...][/chroot]")
    b.add_argument("--data-dir", type=directory_arg, metavar="DIR", help="where partition logs live")
    b.add_argument("--config", type=Path, metavar="FILE", help="Kafka-style key=value settings; flags win")
    b.add_argument("--session-timeout-ms", type=positive_int, metavar="N",
                   help=f"zookeeper.session.timeout.ms (default: {_default_session_timeout_ms()})")
    b.set_defaults(func=cmd_broker)

    u = sub.add_parser("up", help="start (or restart what is missing of) a local cluster in the background; "
                       "on a data dir with a cluster.json, its recorded settings are reused")
    size = u.add_mutually_exclusive_group()
    size.add_argument("--brokers", type=positive_int, metavar="N", help="brokers 1..N (required for a new cluster)")
    size.add_argument("--add-broker", action="store_true",
                      help="grow the recorded cluster by one broker, with the next id and port")
    u.add_argument("--data-dir", type=directory_arg, required=True, metavar="DIR")
    u.add_argument("--base-port", type=positive_int, help="broker i listens on base-port + i - 1 (default 9092)")
    u.add_argument("--zk-port", type=positive_int, help="client port of the private ZooKeeper (default 2181; "
                   "of its first server: server i of an ensemble uses zk-port + i - 1)")
    u.add_argument("--zookeeper-nodes", type=positive_int, metavar="N",
                   help="run the private ZooKeeper as an ensemble of N servers (3 survives one death; default 1)")
    u.add_argument("--zookeeper", metavar="CONN", help="use this ZooKeeper instead of a private one")
    u.add_argument("--host", help="address every process listens on (default 127.0.0.1)")
    u.add_argument("--metrics-base-port", type=port_or_zero_arg, metavar="PORT",
                   help="broker i serves Prometheus metrics on PORT + i - 1 (default: base port + 1000; 0: none)")
    u.add_argument("--secure", action="store_const", const=True,
                   help="TLS and SASL/SCRAM on every broker port, a SCRAM super user admin with a generated "
                        "password, ACLs, and a ZooKeeper that serves only logged-in clients; the admin's client "
                        "settings go to DATA_DIR/security/admin.properties (see docs/security.md)")
    u.add_argument("--timeout-s", type=float, default=60.0, help="how long to wait for the cluster")
    u.set_defaults(func=cmd_up)

    d = sub.add_parser("down", help="stop a local cluster started by `odradek up` (data is kept)")
    d.add_argument("--data-dir", type=directory_arg, required=True, metavar="DIR")
    d.set_defaults(func=cmd_down)

    s = sub.add_parser("status", help="controller, live brokers, partition health and leader imbalance, from "
                       "ZooKeeper; exits 3 when the cluster is unhealthy",
                       description="The cluster's health from ZooKeeper: the controller, live and dead brokers, "
                       "offline and under-replicated partitions, and partitions not led by their preferred "
                       "replica.",
                       epilog="exit status: 0 healthy; 1 error (ZooKeeper unreachable, no cluster there); 2 bad "
                       "arguments; 3 unhealthy: a broker dead, a partition offline or under-replicated, no "
                       "controller, or a server of a ZooKeeper ensemble down (leader imbalance alone is not "
                       "unhealthy). With --watch, the status of the last frame drawn.")
    where = s.add_mutually_exclusive_group()
    where.add_argument("--zookeeper", type=zk_connect_arg, metavar="CONN", help="default 127.0.0.1:2181")
    where.add_argument("--data-dir", type=directory_arg, metavar="DIR", help="a cluster started by `odradek up` "
                       "(its brokers that are down are named too, and one whose recorded process is gone is "
                       "dead at once, before ZooKeeper expires its session)")
    s.add_argument("--json", action="store_true", help='print JSON: "healthy", "unhealthy_reasons", "brokers", '
                   '"offline_partitions", "under_replicated_partitions", "preferred_replica_imbalance_count", ...')
    s.add_argument("--timeout-s", type=seconds_arg, default=10.0, help="how long to try to reach ZooKeeper")
    add_watch_option(s)
    s.set_defaults(func=cmd_status)

    ui = sub.add_parser("ui", help="a live web dashboard: brokers, partition leaders and ISRs, state changes, "
                        "consumer lag, reassignments and metrics")
    ui_where = ui.add_mutually_exclusive_group()
    ui_where.add_argument("--data-dir", type=directory_arg, metavar="DIR", help="a cluster started by `odradek up` "
                          "(its expected brokers, state-change logs and metrics URLs come from cluster.json)")
    ui_where.add_argument("--zookeeper", type=zk_connect_arg, metavar="CONN", help="default 127.0.0.1:2181")
    ui.add_argument("--bootstrap-server", metavar="HOST:PORT[,...]",
                    help="for the Kafka requests (default: the live brokers ZooKeeper lists)")
    ui.add_argument("--host", default="127.0.0.1", help="address to serve the dashboard on")
    ui.add_argument("--port", type=port_or_zero_arg, default=8080, help="port to serve the dashboard on")
    ui.add_argument("--interval-s", type=seconds_arg, default=1.0, help="how often ZooKeeper is read")
    ui.add_argument("--command-config", type=Path, metavar="FILE",
                    help="client security settings, as Kafka's tools take them (default: --data-dir's "
                         "security/admin.properties when the cluster is secured); with SASL settings the dashboard "
                         "serves HTTPS to the cluster's users only, and reads the brokers' metrics with that login")
    ui.add_argument("--tls-cert", type=Path, metavar="FILE",
                    help="the dashboard's certificate chain (PEM) for HTTPS (default on a secured cluster of "
                         "`odradek up --secure`: the brokers' keystore in its data dir)")
    ui.add_argument("--tls-key", type=Path, metavar="FILE", help="the key of --tls-cert (default: in its file)")
    ui.set_defaults(func=cmd_ui)


def _default_session_timeout_ms() -> int:
    """BrokerConfig's default, shown in --help (the flag's own default stays None, so a value
    from --config is not overridden)."""
    import dataclasses

    from odradek.broker.config import BrokerConfig

    default = next(f.default for f in dataclasses.fields(BrokerConfig) if f.name == "zookeeper_session_timeout_ms")
    assert isinstance(default, int)
    return default


def cmd_broker(args: argparse.Namespace) -> None:
    """Foreground broker; the BrokerConfig is built here so flags and files share one path."""
    from odradek.broker.config import BrokerConfig

    flags = {
        "broker_id": args.id,
        "host": args.listen[0] if args.listen else None,
        "port": args.listen[1] if args.listen else None,
        "advertised_host": args.advertise[0] if args.advertise else None,
        "advertised_port": args.advertise[1] if args.advertise else None,
        "zookeeper": args.zookeeper,
        "data_dir": args.data_dir,
        "zookeeper_session_timeout_ms": args.session_timeout_ms,
    }
    if args.config:
        try:
            config = BrokerConfig.from_file(args.config, **flags)
        except (OSError, ValueError, TypeError) as exc:
            raise UserError(f"--config {args.config}: {exc}") from None
    else:
        missing = [f for f, k in (("--id", "broker_id"), ("--listen", "host"), ("--zookeeper", "zookeeper"),
                                  ("--data-dir", "data_dir")) if flags[k] is None]
        if missing:
            raise UserError(f"broker: missing {', '.join(missing)} (or give them in --config)")
        config = BrokerConfig(**{k: v for k, v in flags.items() if v is not None})
    from odradek.broker.listener_security import check_listeners
    from odradek.broker.server import run_broker
    from odradek.common.netutil import port_free

    try:
        check_listeners(config.security, config.listeners(), config.jaas_file)
    except ValueError as exc:  # SslConfigError too: a keystore missing or unreadable
        raise UserError(f"broker {config.broker_id}: {exc}") from None

    for listener in config.listeners().listeners:
        if not port_free(listener.host, listener.port):
            raise UserError(f"broker: {listener.host}:{listener.port} ({listener.name}) is already in use (stop what "
                            f"listens there, or give another --listen or listeners)")
    if config.metrics_port and not port_free(config.host, config.metrics_port):
        raise UserError(f"broker: metrics port {config.host}:{config.metrics_port} is already in use (stop what "
                        f"listens there, or set another metrics.port in --config)")
    try:
        run_broker(config)
    except StartupRefusedError as exc:  # another broker's data dir, a broker id in use: a mistake
        raise UserError(f"broker {config.broker_id}: {exc}") from None
    except OSError as exc:  # the port taken between the check and the bind, a data dir not writable
        raise UserError(f"broker {config.broker_id}: {os_error_text(exc)}") from None
    except Exception as exc:
        if type(exc).__module__.startswith("kazoo"):  # ZooKeeper not reachable at startup
            raise UserError(f"broker {config.broker_id}: cannot reach ZooKeeper at {config.zookeeper} "
                            f"({zk_failure_text(exc)}); is it running?") from None
        raise


def cmd_up(args: argparse.Namespace) -> None:
    cluster = LocalCluster.for_up(args.data_dir, add_broker=args.add_broker, brokers=args.brokers,
                                  base_port=args.base_port, zk_port=args.zk_port, zookeeper=args.zookeeper,
                                  host=args.host, zookeeper_nodes=args.zookeeper_nodes,
                                  metrics_base_port=args.metrics_base_port, secure=args.secure)
    for process in cluster.start(timeout=args.timeout_s):
        print(f"{process.name}: {process.action}, {process.address} pid {process.pid} log {process.log}"
              + (f" metrics {process.metrics_url}" if process.metrics_url else ""))
    print(f"zookeeper: {cluster.zookeeper_connect}")
    print(f"bootstrap servers: {cluster.bootstrap_servers}")
    if cluster.security is not None:
        print(paste_settings(cluster.security, cluster.bootstrap_servers))


def cmd_down(args: argparse.Namespace) -> None:
    cluster = LocalCluster.load(args.data_dir)
    running = cluster.running()
    if not running:
        print(f"nothing is running in {args.data_dir} (already down)")
        return
    for line in cluster.down():
        print(f"odradek: warning: {line}", file=sys.stderr)
    print(f"stopped the cluster in {args.data_dir}: {', '.join(f'{name} (pid {pid})' for name, pid in running)}")


def cmd_status(args: argparse.Namespace) -> None:
    """Print the status once (or every --watch seconds), then exit with its health:
    cluster_health's EXIT_* statuses, which scripts use as a health check."""
    from odradek.admin.cluster_health import EXIT_ERROR, cluster_status, exit_status, format_status
    from odradek.admin.errors import AdminError, ClusterError

    cluster = LocalCluster.load(args.data_dir) if args.data_dir else None
    zookeeper = cluster.zookeeper_connect if cluster is not None else args.zookeeper
    expected = None
    if cluster is not None:  # the brokers it should have, so one that is down is named
        expected = {b: (cluster.host, cluster.broker_port(b)) for b in cluster.broker_ids}
    last = [0]  # the exit status of the frame last drawn

    def status_text() -> str:
        try:
            status = cluster_status(zookeeper or "127.0.0.1:2181", timeout=args.timeout_s, expected=expected,
                                    processes=_broker_processes(cluster) if cluster is not None else None)
        except AdminError as exc:
            if cluster is None or cluster.running():
                raise
            raise AdminError(f"{exc}; no process of the cluster in {args.data_dir} runs (start it with "
                             f"`odradek up --data-dir {args.data_dir}`)") from None
        for broker in status["live_brokers"] + status["brokers"]:
            if not broker.get("metrics_url") and cluster is not None:  # not registered: cluster.json's
                broker["metrics_url"] = cluster.metrics_url(broker["id"])
        last[0] = exit_status(status)
        return json.dumps(status, indent=2) if args.json else format_status(status)

    def frame() -> str:
        """A watched frame tells of a ZooKeeper it cannot read and the watch goes on: an outage
        is what a watching operator must see, not the end of the watch."""
        try:
            return status_text()
        except (AdminError, ClusterError) as exc:
            last[0] = EXIT_ERROR
            return f"cannot read the cluster: {exc}"

    show_or_watch(status_text if args.watch is None else frame, args.watch)
    if last[0]:
        raise SystemExit(last[0])  # main() returns 0 once a command returns


def _broker_processes(cluster: LocalCluster) -> dict[int, Any]:
    """Each recorded broker's pid file and whether that process still runs (status reports a
    broker whose process is gone as dead before ZooKeeper expires its session)."""
    from odradek.admin.cluster_health import BrokerProcess
    from odradek.cluster.cluster_spec import read_pid
    from odradek.cluster.local_cluster import pid_alive

    processes = {}
    for broker_id in cluster.broker_ids:
        pid = read_pid(cluster.broker_dir(broker_id) / "broker.pid")
        processes[broker_id] = BrokerProcess(pid, pid_alive(pid))
    return processes


def cmd_ui(args: argparse.Namespace) -> None:
    from odradek.cli.bootstrap import use_command_config
    from odradek.client import client_config
    from odradek.ui.access import AccessError, dashboard_access
    from odradek.ui.poller import ClusterSource, source_from_data_dir
    from odradek.ui.server import serve

    if args.data_dir:
        source = source_from_data_dir(args.data_dir, args.bootstrap_server)
    else:
        source = ClusterSource(args.zookeeper or "127.0.0.1:2181", args.bootstrap_server)
    use_command_config(argparse.Namespace(command_config=args.command_config, cluster_dir=args.data_dir))
    try:
        access = dashboard_access(client_config.security(), args.data_dir, args.tls_cert, args.tls_key)
    except AccessError as exc:
        raise UserError(f"ui: {exc}") from None
    serve(source, args.host, args.port, args.interval_s, access)
