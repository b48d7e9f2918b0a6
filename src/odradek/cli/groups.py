"""`odradek groups list|describe|reset-offsets|delete` (Kafka's kafka-consumer-groups.sh); the
Admin API work is admin/consumer_group_command.py's."""
from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from odradek.admin.consumer_group_command import ResetTarget
from odradek.cli.args import nonnegative_int, reset_to_arg, seconds_arg, timestamp_ms_arg, topic_partitions_arg
from odradek.cli.bootstrap import add_bootstrap_options, probe_cluster


def add_commands(sub: Any) -> None:
    """`odradek groups` and its subcommands."""
    g = sub.add_parser("groups", help="list, describe, reset the offsets of and delete consumer groups "
                       "(Kafka's kafka-consumer-groups.sh)")
    gsub = g.add_subparsers(dest="groups_command", metavar="SUBCOMMAND", required=True)
    gl = gsub.add_parser("list", help="every consumer group with its state and protocol type")
    gl.add_argument("--json", action="store_true")
    gl.set_defaults(func=cmd_groups_list)
    gd = gsub.add_parser("describe", help="state, members, and per partition the committed offset, "
                         "log end offset and lag")
    gd.add_argument("group")
    gd.add_argument("--json", action="store_true")
    gd.set_defaults(func=cmd_groups_describe)
    gr = gsub.add_parser("reset-offsets", help="move a group's committed offsets (a dry run without "
                         "--execute); only while the group has no members")
    gr.add_argument("group")
    gr.add_argument("--topic", type=topic_partitions_arg, action="append", required=True, metavar="T[:P,...]",
                    help="the topic, or some of its partitions (repeatable)")
    to = gr.add_mutually_exclusive_group(required=True)
    to.add_argument("--to-earliest", action="store_const", dest="target", const=ResetTarget("earliest"),
                    help="the log start offset")
    to.add_argument("--to-latest", action="store_const", dest="target", const=ResetTarget("latest"),
                    help="the log end offset")
    to.add_argument("--to-offset", type=reset_to_arg("offset", nonnegative_int), dest="target", metavar="N",
                    help="offset N (clamped into [log start, log end])")
    to.add_argument("--shift-by", type=reset_to_arg("shift", int), dest="target", metavar="N",
                    help="the committed offset plus N (may be negative; clamped)")
    to.add_argument("--to-datetime", type=reset_to_arg("datetime", timestamp_ms_arg), dest="target", metavar="ISO",
                    help="the first record at or after this time, e.g. 2026-01-31T12:00:00 (local time "
                         "unless it names a zone); the log end where there is none")
    gr.add_argument("--execute", action="store_true", help="commit the new offsets (default: only print them)")
    gr.add_argument("--json", action="store_true")
    gr.set_defaults(func=cmd_groups_reset_offsets)
    gx = gsub.add_parser("delete", help="delete a group without members and its committed offsets")
    gx.add_argument("group")
    gx.set_defaults(func=cmd_groups_delete)
    for parser in (gl, gd, gr, gx):
        add_bootstrap_options(parser)
        parser.add_argument("--timeout-s", type=seconds_arg, default=10.0, help="how long to wait for each request")


def cmd_groups_list(args: argparse.Namespace) -> None:
    from odradek.admin.consumer_group_command import GroupAdmin, format_list

    probe_cluster(args)
    groups = GroupAdmin(args.bootstrap_server, args.timeout_s).list_groups()
    print(json.dumps(groups) if args.json else format_list(groups))


def cmd_groups_describe(args: argparse.Namespace) -> None:
    from odradek.admin.consumer_group_command import GroupAdmin, format_describe

    probe_cluster(args)
    group = GroupAdmin(args.bootstrap_server, args.timeout_s).describe(args.group)
    print(json.dumps(group) if args.json else format_describe(group))


def cmd_groups_reset_offsets(args: argparse.Namespace) -> None:
    from odradek.admin.consumer_group_command import GroupAdmin, format_plan

    probe_cluster(args)
    admin = GroupAdmin(args.bootstrap_server, args.timeout_s)
    plan = admin.plan_reset(args.group, args.topic, args.target)
    if args.execute:
        admin.execute_reset(args.group, plan)
    print(json.dumps({"group": args.group, "executed": args.execute, "offsets": plan}) if args.json
          else format_plan(plan))
    if not args.execute:
        print("dry run: nothing was committed (add --execute to commit these offsets)", file=sys.stderr)


def cmd_groups_delete(args: argparse.Namespace) -> None:
    from odradek.admin.consumer_group_command import GroupAdmin

    probe_cluster(args)
    GroupAdmin(args.bootstrap_server, args.timeout_s).delete(args.group)
    print(f"deleted consumer group {args.group}")
