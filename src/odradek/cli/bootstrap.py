"""How a client command finds the cluster: --bootstrap-server, else every broker of --data-dir's
cluster.json, else $ODRADEK_BOOTSTRAP_SERVERS, else 127.0.0.1:9092; and the quick probe that
a broker answers before a command starts its long waits."""
from __future__ import annotations

import argparse
import os
from typing import Any

from odradek.cli.args import UserError, bootstrap_list_arg, directory_arg
from odradek.cluster.local_cluster import LocalCluster

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
BOOTSTRAP_ENV = "ODRADEK_BOOTSTRAP_SERVERS"


def add_bootstrap_options(parser: argparse.ArgumentParser) -> None:
    """Where a client command finds the cluster; resolved by resolve_bootstrap."""
    parser.add_argument("--bootstrap-server", type=bootstrap_list_arg, metavar="HOST:PORT[,...]",
                        help=f"brokers to bootstrap from (default: every broker of --data-dir, else "
                             f"${BOOTSTRAP_ENV}, else {DEFAULT_BOOTSTRAP})")
    parser.add_argument("--data-dir", type=directory_arg, metavar="DIR", dest="cluster_dir",
                        help="bootstrap from every broker of the cluster `odradek up` runs in DIR")
    parser.set_defaults(resolve_bootstrap=True)


def resolve_bootstrap(args: argparse.Namespace) -> None:
    """--bootstrap-server, else every broker of --data-dir's cluster.json, else the environment,
    else the default: librdkafka and the raw requests then try each of them in turn, so one
    broker down does not make the command fail."""
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



def require_broker(bootstrap: str | None, timeout: float = 10.0) -> None:
    """Fail at once, not after a command's long waits (60 s for DeleteTopics), when no broker
    of ``bootstrap`` answers: one Metadata request for no topics, to each server in turn."""
    from odradek.admin.admin_client import metadata_request

    if bootstrap is not None:
        metadata_request(bootstrap, [], timeout)



class ProbedNamespace(argparse.Namespace):
    """A client command's arguments whose first read of ``bootstrap_server`` checks that a
    broker answers (one quick Metadata request): a dead cluster fails in about a second rather
    than at the command's first long timeout, and the command's own argument checks, which
    come before it talks to the cluster, still come first."""

    def __getattribute__(self, name: str) -> Any:
        value = super().__getattribute__(name)
        if name == "bootstrap_server":
            state = super().__getattribute__("__dict__")
            if not state.get("_probed"):
                state["_probed"] = True
                require_broker(value, min(state.get("timeout_s") or 10.0, 10.0))
        return value
