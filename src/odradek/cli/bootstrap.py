"""How a client command finds the cluster: --bootstrap-server, else every broker of --data-dir's
cluster.json, else $ODRADEK_BOOTSTRAP_SERVERS, else 127.0.0.1:9092; and the quick probe that
a broker answers, which each command makes after its own argument checks, before its long waits."""
from __future__ import annotations

import argparse
import os
from pathlib import Path

from odradek.cli.args import UserError, bootstrap_list_arg, directory_arg
from odradek.client import client_config
from odradek.cluster.local_cluster import LocalCluster

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
BOOTSTRAP_ENV = "ODRADEK_BOOTSTRAP_SERVERS"
#: where `odradek up --secure` writes the admin user's client settings, under the cluster's data dir
ADMIN_PROPERTIES = Path("security") / "admin.properties"


def add_bootstrap_options(parser: argparse.ArgumentParser) -> None:
    """Where a client command finds the cluster; resolved by resolve_bootstrap."""
    add_cluster_options(parser, f"brokers to bootstrap from (default: every broker of --data-dir, else "
                                f"${BOOTSTRAP_ENV}, else {DEFAULT_BOOTSTRAP})",
                        "bootstrap from every broker of the cluster `odradek up` runs in DIR")
    parser.set_defaults(resolve_bootstrap=True)


def add_cluster_options(container: argparse._ActionsContainer, bootstrap_help: str, data_dir_help: str,
                        settings_to: argparse._ActionsContainer | None = None) -> None:
    """--bootstrap-server and --data-dir (as ``cluster_dir``) with a command's own help: the
    client commands' (add_bootstrap_options), or a benchmark's, which measures a private
    cluster when neither is given; and --command-config, to ``settings_to`` when ``container``
    is a group of exclusive options (a benchmark's)."""
    container.add_argument("--bootstrap-server", type=bootstrap_list_arg, metavar="HOST:PORT[,...]",
                           help=bootstrap_help)
    container.add_argument("--data-dir", type=directory_arg, metavar="DIR", dest="cluster_dir", help=data_dir_help)
    (settings_to or container).add_argument("--command-config", type=Path, metavar="FILE",
                           help="client security settings, as Kafka's tools take them: security.protocol, "
                                "sasl.mechanism, sasl.username, sasl.password, ssl.ca.location ... (default: "
                                f"--data-dir's {ADMIN_PROPERTIES} when the cluster is secured)")


def resolve_bootstrap(args: argparse.Namespace) -> None:
    """--bootstrap-server, else every broker of --data-dir's cluster.json, else the environment,
    else the default: librdkafka and the raw requests then try each of them in turn, so one
    broker down does not make the command fail. The security settings too (use_command_config)."""
    use_command_config(args)
    if args.bootstrap_server:
        return
    if args.cluster_dir is not None:
        args.bootstrap_server = LocalCluster.load(args.cluster_dir).bootstrap_servers
        return
    env = os.environ.get(BOOTSTRAP_ENV, "").strip()
    if env:
        try:
            args.bootstrap_server = bootstrap_list_arg(env)
        except argparse.ArgumentTypeError as exc:
            raise UserError(f"${BOOTSTRAP_ENV}: {exc}") from None
        return
    args.bootstrap_server = DEFAULT_BOOTSTRAP


def use_command_config(args: argparse.Namespace) -> None:
    """--command-config FILE, else the admin settings of --data-dir's secured cluster, become
    every client's security settings in this process (client_config)."""
    path = getattr(args, "command_config", None)
    cluster_dir = getattr(args, "cluster_dir", None)
    if path is None and cluster_dir is not None and (cluster_dir / ADMIN_PROPERTIES).is_file():
        path = cluster_dir / ADMIN_PROPERTIES
    if path is None:
        return
    try:
        client_config.use(client_config.read_properties(path))
    except OSError as exc:
        raise UserError(f"--command-config {path}: {exc.strerror or exc}") from None
    except ValueError as exc:  # SecurityConfigError too
        raise UserError(f"--command-config {path}: {exc}") from None


def probe_cluster(args: argparse.Namespace) -> None:
    """A client command's check, after its own argument checks and before it first talks to the
    cluster, that a broker of ``args.bootstrap_server`` answers: a dead cluster fails in about a
    second rather than at the command's first long timeout (at most 10 s, less with a shorter
    --timeout-s)."""
    require_broker(args.bootstrap_server, min(getattr(args, "timeout_s", None) or 10.0, 10.0))


def require_broker(bootstrap: str | None, timeout: float = 10.0) -> None:
    """Fail at once, not after a command's long waits (60 s for DeleteTopics), when no broker
    of ``bootstrap`` answers: one Metadata request for no topics, to each server in turn."""
    from odradek.admin.admin_client import metadata_request

    if bootstrap is not None:
        metadata_request(bootstrap, [], timeout)
