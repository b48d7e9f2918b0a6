"""`odradek groups list|describe|reset-offsets|delete|delete-offsets` (Kafka's
kafka-consumer-groups.sh, with its option names: --group, --all-groups, --members, --state,
--all-topics, --to-current, --by-duration, --from-file, --export); the Admin API work is
admin/consumer_group_command.py's."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from odradek.admin.consumer_group_command import ResetTarget, parse_duration_ms, parse_offsets_csv
from odradek.admin.errors import AdminError
from odradek.cli.args import (
    UserError,
    nonnegative_int,
    reset_to_arg,
    seconds_arg,
    timestamp_ms_arg,
    topic_partitions_arg,
)
from odradek.cli.bootstrap import add_bootstrap_options, probe_cluster


def duration_arg(value: str) -> ResetTarget:
    """--by-duration's ISO 8601 duration (Kafka's PnDTnHnMnS)."""
    try:
        return ResetTarget("duration", parse_duration_ms(value))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_commands(sub: Any) -> None:
    """`odradek groups` and its subcommands."""
    g = sub.add_parser("groups", help="list, describe, reset the offsets of and delete consumer groups "
                       "(Kafka's kafka-consumer-groups.sh)")
    gsub = g.add_subparsers(dest="groups_command", metavar="SUBCOMMAND", required=True)
    gl = gsub.add_parser("list", help="every consumer group with its state and protocol type")
    gl.add_argument("--json", action="store_true")
    gl.set_defaults(func=cmd_groups_list)
    gd = gsub.add_parser("describe", help="state, members, and per partition the committed offset, "
                         "log end offset and lag, of one or more groups; for topics with "
                         "enable.ordered.delivery, the partitions blocked on KIP-253 barriers")
    _add_group_arguments(gd, "*", "the consumer groups (or --group G, repeatable)")
    gd.add_argument("--all-groups", action="store_true", help="every consumer group of the cluster")
    view = gd.add_mutually_exclusive_group()
    view.add_argument("--offsets", action="store_const", dest="view", const="offsets",
                      help="the members, then per partition Committed LogEnd Lag, then the partitions "
                           "blocked on KIP-253 barriers of ordered topics (the default)")
    view.add_argument("--members", action="store_const", dest="view", const="members",
                      help="per member its id, client id, host and partition count, instead of the default view")
    view.add_argument("--state", action="store_const", dest="view", const="state",
                      help="per group its coordinator, assignment strategy, state and member count, instead of the "
                           "default view")
    gd.add_argument("--verbose", action="store_true", help="with --members: each member's assignment too")
    gd.add_argument("--json", action="store_true")
    gd.set_defaults(func=cmd_groups_describe, view="offsets", usage_error=gd.error)
    gr = gsub.add_parser("reset-offsets", help="move a group's committed offsets (a dry run without "
                         "--execute); only while the group has no members")
    _add_group_arguments(gr, "*", "the consumer group (or --group G)")
    scope = gr.add_mutually_exclusive_group(required=True)
    scope.add_argument("--topic", type=topic_partitions_arg, action="append", metavar="T[:P,...]",
                       help="the topic, or some of its partitions (repeatable)")
    scope.add_argument("--all-topics", action="store_true",
                       help="every partition the group has a committed offset for")
    to = gr.add_mutually_exclusive_group(required=True)
    to.add_argument("--to-earliest", action="store_const", dest="target", const=ResetTarget("earliest"),
                    help="the log start offset")
    to.add_argument("--to-latest", action="store_const", dest="target", const=ResetTarget("latest"),
                    help="the log end offset")
    to.add_argument("--to-current", action="store_const", dest="target", const=ResetTarget("current"),
                    help="the committed offset, unchanged (the log end where none is): with --export, "
                         "a record of the offsets to return to")
    to.add_argument("--to-offset", type=reset_to_arg("offset", nonnegative_int), dest="target", metavar="N",
                    help="offset N (clamped into [log start, log end])")
    to.add_argument("--shift-by", type=reset_to_arg("shift", int), dest="target", metavar="N",
                    help="the committed offset plus N (may be negative; clamped)")
    to.add_argument("--to-datetime", type=reset_to_arg("datetime", timestamp_ms_arg), dest="target", metavar="ISO",
                    help="the first record at or after this time, e.g. 2026-01-31T12:00:00 (local time "
                         "unless it names a zone); the log end where there is none")
    to.add_argument("--by-duration", type=duration_arg, dest="target", metavar="PnDTnHnMnS",
                    help="the first record at or after this long ago, an ISO 8601 duration such as "
                         "PT1H30M or P1D (a negative one as --by-duration=-PT1H); the log end where there is none")
    from_file = to.add_argument("--from-file", dest="from_file", metavar="CSV",
                                help="the offsets of a CSV file of topic,partition,offset lines (what "
                                     "--export writes; clamped), its partitions instead of --topic")
    # --from-file is both the partitions and their offsets, as in Kafka's tool: it stands in
    # either required group and with nothing else of them
    scope._group_actions.append(from_file)
    run = gr.add_mutually_exclusive_group()
    run.add_argument("--execute", action="store_true", help="commit the new offsets (default: only print them)")
    run.add_argument("--dry-run", action="store_true", help="only print the new offsets (the default)")
    out = gr.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true")
    out.add_argument("--export", action="store_true",
                     help="print the new offsets as topic,partition,offset CSV, which --from-file reads")
    gr.set_defaults(func=cmd_groups_reset_offsets, usage_error=gr.error)
    gx = gsub.add_parser("delete", help="delete groups without members and their committed offsets")
    _add_group_arguments(gx, "*", "the consumer groups (or --group G, repeatable)")
    gx.add_argument("--json", action="store_true")
    gx.set_defaults(func=cmd_groups_delete, usage_error=gx.error)
    go = gsub.add_parser("delete-offsets", help="delete a group's committed offsets of some topics "
                         "(OffsetDelete); refused for a topic the group's members consume")
    _add_group_arguments(go, "*", "the consumer group (or --group G)")
    go.add_argument("--topic", type=topic_partitions_arg, action="append", required=True, metavar="T[:P,...]",
                    help="the topic, or some of its partitions (repeatable)")
    go.add_argument("--json", action="store_true")
    go.set_defaults(func=cmd_groups_delete_offsets, usage_error=go.error)
    for parser in (gl, gd, gr, gx, go):
        add_bootstrap_options(parser)
        parser.add_argument("--timeout-s", type=seconds_arg, default=10.0, help="how long to wait for each request")


def _add_group_arguments(parser: argparse.ArgumentParser, nargs: str, help_text: str) -> None:
    """The group as an argument or, as kafka-consumer-groups.sh takes it, --group (both may be
    given; _groups joins them)."""
    parser.add_argument("group", nargs=nargs, help=help_text)
    parser.add_argument("--group", action="append", dest="group_options", default=[], metavar="GROUP",
                        help="a consumer group, as kafka-consumer-groups.sh takes it"
                             + (" (repeatable)" if nargs == "*" else ""))


def _groups(args: argparse.Namespace, one: bool = False) -> list[str]:
    """The groups named as arguments and with --group; with ``one``, exactly one of them."""
    named = args.group if isinstance(args.group, list) else [args.group] if args.group else []
    groups = list(dict.fromkeys(named + args.group_options))
    if not groups and not getattr(args, "all_groups", False):
        args.usage_error("name a consumer group" + ("" if one else " (or --all-groups)"))
    if one and len(groups) > 1:
        args.usage_error(f"one consumer group at a time, got {len(groups)}: {', '.join(groups)}")
    return groups


def _failed(results: list[dict[str, Any]], what: str) -> AdminError:
    """One line for the groups of ``results`` that carry an error: the error itself for one,
    else how many of how many failed and each error."""
    errors = [r["error"] for r in results if "error" in r]
    if len(errors) == 1:
        return AdminError(errors[0])
    return AdminError(f"{len(errors)} of {len(results)} groups could not be {what}: {'; '.join(errors)}")


def cmd_groups_list(args: argparse.Namespace) -> None:
    from odradek.admin.consumer_group_command import GroupAdmin, format_list

    probe_cluster(args)
    groups = GroupAdmin(args.bootstrap_server, args.timeout_s).list_groups()
    print(json.dumps(groups) if args.json else format_list(groups))


def cmd_groups_describe(args: argparse.Namespace) -> None:
    """Every group named (or --all-groups) in one of Kafka's views; a group that cannot be
    described does not hide the others: they are printed, then one error line, exit 1."""
    from odradek.admin.consumer_group_command import (
        GroupAdmin,
        format_describe_many,
        format_members,
        format_state,
    )

    groups = _groups(args)
    if args.all_groups and groups:
        args.usage_error("give consumer groups or --all-groups, not both")
    if args.verbose and args.view != "members":
        args.usage_error("--verbose goes with --members")
    probe_cluster(args)
    admin = GroupAdmin(args.bootstrap_server, args.timeout_s)
    if args.all_groups:
        groups = [g["group"] for g in admin.list_groups()]
    described = admin.describe_many(groups, offsets=args.view == "offsets")
    if args.json:
        print(json.dumps(described))
    elif not described:
        print("no consumer groups")
    else:
        text = (format_members(described, args.verbose) if args.view == "members"
                else format_state(described) if args.view == "state" else format_describe_many(described))
        if text:
            print(text)
    if any("error" in d for d in described):
        raise _failed(described, "described")


def cmd_groups_reset_offsets(args: argparse.Namespace) -> None:
    from odradek.admin.consumer_group_command import GroupAdmin, format_plan, format_plan_csv

    [group] = _groups(args, one=True)
    target = args.target
    if args.from_file is not None:
        target = ResetTarget("file", offsets=tuple(_read_offsets_csv(args.from_file, group)))
    probe_cluster(args)
    admin = GroupAdmin(args.bootstrap_server, args.timeout_s)
    plan = admin.plan_reset(group, args.topic, target)
    if args.execute:
        admin.execute_reset(group, plan)
    if args.json:
        print(json.dumps({"group": group, "executed": args.execute, "offsets": plan}))
    else:
        print(format_plan_csv(plan) if args.export else format_plan(plan))
    if not args.execute:
        print("dry run: nothing was committed (add --execute to commit these offsets)", file=sys.stderr)


def _read_offsets_csv(path: str, group: str) -> list[tuple[str, int, int]]:
    """--from-file's rows; an unreadable or malformed file is the operator's to fix."""
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise UserError(f"cannot read --from-file {path}: {exc.strerror or 'unreadable'}") from None
    except UnicodeDecodeError:
        raise UserError(f"--from-file {path} is not a text file") from None
    try:
        rows = parse_offsets_csv(text, group)
    except ValueError as exc:
        raise UserError(f"--from-file {path}: {exc}") from None
    if not rows:
        raise UserError(f"--from-file {path} has no offsets for group {group!r}")
    return rows


def cmd_groups_delete(args: argparse.Namespace) -> None:
    """Every group named is deleted or refused on its own: those deleted are printed, the
    refusals are one error line, exit 1 (DeleteGroups answers per group)."""
    from odradek.admin.consumer_group_command import GroupAdmin

    groups = _groups(args)
    probe_cluster(args)
    results = GroupAdmin(args.bootstrap_server, args.timeout_s).delete_many(groups)
    if args.json:
        print(json.dumps(results))
    else:
        for r in results:
            if r["deleted"]:
                print(f"deleted consumer group {r['group']}")
    if not all(r["deleted"] for r in results):
        raise _failed(results, "deleted")


def cmd_groups_delete_offsets(args: argparse.Namespace) -> None:
    """Per partition deleted or refused (Kafka's TOPIC PARTITION STATUS); any refusal also an
    error line, exit 1, so a script sees it."""
    from odradek.admin.consumer_group_command import GroupAdmin, format_offset_deletion

    [group] = _groups(args, one=True)
    probe_cluster(args)
    results = GroupAdmin(args.bootstrap_server, args.timeout_s).delete_offsets(group, args.topic)
    print(json.dumps({"group": group, "partitions": results}) if args.json else format_offset_deletion(results))
    refused = [r for r in results if r["error"] is not None]
    if refused:
        names = sorted({r["error"] for r in refused})
        hint = (" (its members consume the topic: stop them, or let them unsubscribe, first)"
                if "GROUP_SUBSCRIBED_TO_TOPIC" in names else "")
        raise AdminError(f"{len(refused)} of {len(results)} partitions of group {group!r} kept their "
                         f"offsets: {', '.join(names)}{hint}")
