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
    cd = csub.add_parser("describe", help="the configs a topic, a broker or the cluster-wide defaults set "
                         "themselves (--all: every config, with its source)")
    cd.add_argument("--all", action="store_true", help="every config with its source, also those inherited "
                    "from broker defaults or built in")
    cd.add_argument("--json", action="store_true", help="a list of {name, value, source, read_only, sensitive, "
                    "synonyms}")
    cd.set_defaults(func=cmd_configs_describe)
    ca = csub.add_parser("alter", help="set or delete dynamic configs of a topic, a broker or every broker")
    ca.add_argument("--set", type=keyvalue_arg, action="append", default=[], metavar="KEY=VALUE", help="(repeatable)")
    ca.add_argument("--delete", action="append", default=[], metavar="KEY",
                    help="remove a config the resource sets: the next layer's value applies (repeatable)")
    ca.set_defaults(func=cmd_configs_alter)
    for parser in (cd, ca):
        which = parser.add_mutually_exclusive_group(required=True)
        which.add_argument("--topic", metavar="T")
        which.add_argument("--broker", type=nonnegative_int, metavar="N", help="broker N's own configs")
        which.add_argument("--broker-defaults", action="store_true", help="the cluster-wide broker defaults")
        add_bootstrap_options(parser)
        parser.add_argument("--timeout-s", type=seconds_arg, default=10.0, help="how long to wait for each request")


def cmd_configs_describe(args: argparse.Namespace) -> None:
    """kafka-configs.sh --describe: the resource's own configs (a topic's, broker N's, the
    cluster default's), not the values it inherits; --all every config with its source. --json
    prints the same entries as a list (README.md's shape), [] when there is none."""
    from odradek.admin.config_command import describe, entity, format_configs, shown_configs

    resource_type, name, what = entity(args.topic, args.broker, args.broker_defaults)
    probe_cluster(args)
    entries = describe(args.bootstrap_server, resource_type, name, args.timeout_s)
    shown = shown_configs(entries, resource_type, name, args.all)
    if args.json:
        print(json.dumps(shown))
    else:
        print(format_configs(what, shown, args.all, resource_type, name))


def cmd_configs_alter(args: argparse.Namespace) -> None:
    """kafka-configs.sh --alter: one IncrementalAlterConfigs. As kafka-configs.sh, a --delete of
    a key the resource does not set itself is refused before anything changes (the broker would
    accept it and change nothing), and so is a key named twice."""
    from odradek.admin.config_command import alter, entity, refuse_unset_deletes

    if not args.set and not args.delete:
        raise UserError("configs alter: nothing to change (give --set KEY=VALUE or --delete KEY)")
    names = [k for k, _v in args.set] + list(args.delete)
    twice = sorted({k for k in names if names.count(k) > 1})
    if twice:
        raise UserError(f"configs alter: {', '.join(twice)} given more than once (each key once, "
                        f"with --set or --delete)")
    resource_type, name, what = entity(args.topic, args.broker, args.broker_defaults)
    probe_cluster(args)
    refuse_unset_deletes(args.bootstrap_server, resource_type, name, args.delete, what, args.timeout_s)
    alter(args.bootstrap_server, resource_type, name, dict(args.set), args.delete, args.timeout_s)
    changes = [f"{k}={v}" for k, v in args.set] + [f"-{k}" for k in args.delete]
    print(f"altered configs of {what}: {', '.join(changes)}")
