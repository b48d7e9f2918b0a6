"""`odradek configs describe|alter` (Kafka's kafka-configs.sh) for topics and brokers; the
DescribeConfigs and IncrementalAlterConfigs requests are config_command.py's."""
from __future__ import annotations

import argparse
import json
from typing import Any

from odradek.cli.args import UserError, keyvalue_arg, nonnegative_int, seconds_arg
from odradek.cli.bootstrap import add_bootstrap_options, probe_cluster


def add_commands(sub: Any) -> None:
    """`odradek configs describe|alter` (Kafka's kafka-configs.sh) for topics and brokers."""
    c = sub.add_parser("configs", help="describe and change topic and broker configs (Kafka's kafka-configs.sh)")
    csub = c.add_subparsers(dest="configs_command", metavar="SUBCOMMAND", required=True)
    cd = csub.add_parser("describe", help="the configs set dynamically on a topic or broker (--all: every "
                         "config, with its source)")
    cd.add_argument("--all", action="store_true", help="every config, not only those set dynamically")
    cd.add_argument("--json", action="store_true")
    cd.set_defaults(func=cmd_configs_describe)
    ca = csub.add_parser("alter", help="set or delete dynamic configs of a topic, a broker or every broker")
    ca.add_argument("--set", type=keyvalue_arg, action="append", default=[], metavar="KEY=VALUE", help="(repeatable)")
    ca.add_argument("--delete", action="append", default=[], metavar="KEY",
                    help="remove a dynamic config: the next layer's value applies (repeatable)")
    ca.set_defaults(func=cmd_configs_alter)
    for parser in (cd, ca):
        which = parser.add_mutually_exclusive_group(required=True)
        which.add_argument("--topic", metavar="T")
        which.add_argument("--broker", type=nonnegative_int, metavar="N", help="broker N's own configs")
        which.add_argument("--broker-defaults", action="store_true", help="the cluster-wide broker defaults")
        add_bootstrap_options(parser)
        parser.add_argument("--timeout-s", type=seconds_arg, default=10.0, help="how long to wait for each request")


def cmd_configs_describe(args: argparse.Namespace) -> None:
    from odradek.admin.config_command import DYNAMIC_SOURCES, describe, entity, format_configs

    resource_type, name, what = entity(args.topic, args.broker, args.broker_defaults)
    probe_cluster(args)
    entries = describe(args.bootstrap_server, resource_type, name, args.timeout_s)
    if args.json:
        print(json.dumps(entries if args.all else [e for e in entries if e["source"] in DYNAMIC_SOURCES]))
    else:
        print(format_configs(what, entries, args.all))



def cmd_configs_alter(args: argparse.Namespace) -> None:
    from odradek.admin.config_command import alter, entity

    if not args.set and not args.delete:
        raise UserError("configs alter: nothing to change (give --set KEY=VALUE or --delete KEY)")
    resource_type, name, what = entity(args.topic, args.broker, args.broker_defaults)
    probe_cluster(args)
    alter(args.bootstrap_server, resource_type, name, dict(args.set), args.delete, args.timeout_s)
    changes = [f"{k}={v}" for k, v in args.set] + [f"-{k}" for k in args.delete]
    print(f"altered configs of {what}: {', '.join(changes)}")
