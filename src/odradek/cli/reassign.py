"""`odradek reassign` (Kafka's kafka-reassign-partitions.sh): the arguments, the checks of how
they combine, and the output. The plan's decisions are admin/reassign_partitions_command.py's
pure functions; the requests are admin/reassign_client.py's."""
from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from odradek.cli.args import UserError, add_watch_option, positive_int, seconds_arg
from odradek.cli.bootstrap import add_bootstrap_options, probe_cluster
from odradek.cli.output import plural
from odradek.common.errors import os_error_text


def add_commands(sub: Any) -> None:
    """`odradek reassign` (Kafka's kafka-reassign-partitions.sh); the work is reassign_client.py's."""
    r = sub.add_parser("reassign", help="move partition replicas between brokers (Kafka's "
                       "kafka-reassign-partitions.sh): --generate a plan, --execute it, --verify it, --cancel it",
                       description="Plans in Kafka's reassignment JSON: {\"version\":1,\"partitions\":"
                       "[{\"topic\":\"T\",\"partition\":0,\"replicas\":[1,2]}]}; the first replica is the "
                       "preferred leader.")
    action = r.add_mutually_exclusive_group(required=True)
    action.add_argument("--generate", action="store_true", help="propose a plan spreading --topics evenly over "
                        "--brokers (rack-aware when brokers have broker.rack); changes nothing")
    action.add_argument("--execute", action="store_true", help="start the reassignment of --plan (after "
                        "checking it); prints the current assignment to keep for a rollback")
    action.add_argument("--verify", action="store_true", help="the state of each partition of --plan; once all "
                        "are done, removes the replication throttles; exit 1 while any is in progress")
    action.add_argument("--cancel", action="store_true", help="stop the reassignments of --plan in progress "
                        "(KIP-455): their partitions go back to the replicas they had; removes the throttles")
    r.add_argument("--plan", "--reassignment-json-file", type=Path, metavar="FILE",
                   help="the reassignment JSON (for --execute, --verify, --cancel)")
    r.add_argument("--topics", metavar="T[,T...]", help="the topics to move (--generate)")
    r.add_argument("--brokers", "--broker-list", metavar="ID[,ID...]", help="the brokers to spread them over "
                   "(--generate)")
    r.add_argument("--output", type=Path, metavar="FILE", help="--generate also writes the proposal to FILE "
                   "and the current assignment to FILE.rollback.json")
    r.add_argument("--disable-rack-aware", action="store_true", help="--generate ignores broker.rack")
    r.add_argument("--throttle", type=positive_int, metavar="BYTES_PER_S", help="--execute limits the copying to "
                   "this rate: sets leader/follower.replication.throttled.rate on the brokers involved and "
                   "leader/follower.replication.throttled.replicas on the topics (default: no throttle)")
    r.add_argument("--allow-replication-factor-change", action="store_true", help="--execute accepts a plan "
                   "that changes a partition's number of replicas (Kafka allows it without asking)")
    r.add_argument("--json", action="store_true", help="--verify prints its rows as JSON")
    add_watch_option(r, until="every partition of --verify is done or failed, or Ctrl-C")
    add_bootstrap_options(r)
    r.add_argument("--timeout-s", type=seconds_arg, default=30.0, help="how long to wait for each request (default 30)")
    r.set_defaults(func=cmd_reassign)


def cmd_reassign(args: argparse.Namespace) -> None:
    from odradek.admin.reassign_partitions_command import PlanError

    try:
        _reassign(args)
    except PlanError as exc:
        raise UserError(f"reassign: {exc}") from None


def _reassign(args: argparse.Namespace) -> None:
    from odradek.admin import reassign_client as rc
    from odradek.admin.reassign_partitions_command import DONE, FAILED, format_plan, format_states, parse_plan, tp_name

    if args.generate:
        if not args.topics or not args.brokers:
            raise UserError("reassign: --generate needs --topics and --brokers")
        try:
            brokers = [int(b) for b in args.brokers.split(",")]
        except ValueError:
            raise UserError(f"reassign: --brokers {args.brokers!r}: expected broker ids such as 1,2,3") from None
        topics = [t for t in args.topics.split(",") if t]
        probe_cluster(args)
        current, proposal = rc.generate(args.bootstrap_server, topics, brokers, not args.disable_rack_aware,
                                        args.timeout_s)
        print(f"Current partition replica assignment\n{format_plan(current)}\n")
        print(f"Proposed partition reassignment configuration\n{format_plan(proposal)}")
        if args.output:
            rollback = args.output.with_name(args.output.name + ".rollback.json")
            try:
                args.output.write_text(format_plan(proposal) + "\n")
                rollback.write_text(format_plan(current) + "\n")
            except OSError as exc:
                raise UserError(f"reassign: cannot write --output: {os_error_text(exc)}") from None
            print(f"\nwrote the proposal to {args.output} and the current assignment to {rollback}")
        return
    if args.plan is None:
        raise UserError("reassign: --execute, --verify and --cancel need --plan FILE")
    if args.throttle is not None and not args.execute:
        raise UserError("reassign: --throttle goes with --execute")
    if args.watch is not None and (not args.verify or args.json):
        raise UserError("reassign: --watch goes with --verify (and not --json)")
    try:
        plan = parse_plan(args.plan.read_text())
    except OSError as exc:
        raise UserError(f"reassign: cannot read --plan {args.plan}: {exc.strerror or exc}") from None
    topics = sorted({t for t, _ in plan})
    probe_cluster(args)
    if args.execute:
        view = rc.prepare(args.bootstrap_server, plan, args.allow_replication_factor_change, args.timeout_s)
        print(f"Current partition replica assignment\n\n{format_plan({tp: view.assignment[tp] for tp in plan})}\n\n"
              f"Save this to use as the --plan for rollback")
        errors = rc.execute(args.bootstrap_server, plan, view, args.throttle, args.timeout_s)
        if args.throttle is not None:
            print(f"Throttled replication to {args.throttle} bytes/s (`--verify` removes the throttles once done)")
        started = [tp_name(tp) for tp in sorted(plan) if tp not in errors]
        if started:
            print(f"Successfully started partition reassignment{'s' if len(started) > 1 else ''} for "
                  f"{','.join(started)}")
        if errors:
            raise UserError(f"reassign: {rc.refused_line(errors)}")
    elif args.verify:
        rows = rc.verify(args.bootstrap_server, plan, args.timeout_s)
        if args.watch is None:
            print(json.dumps(rows) if args.json else format_states(rows))
        else:
            rows = _verify_watched(args, plan, rows)
        failed = [r for r in rows if r["state"] == FAILED]
        pending = [r for r in rows if r["state"] not in (DONE, FAILED)]
        if failed:
            first = failed[0]
            raise UserError(f"reassign: reassignment of {first['topic']}-{first['partition']} failed: replicas "
                            f"{first['current']}, not {first['target']}, and none is in progress")
        if pending:
            raise UserError(f"reassign: {len(pending)} of {len(rows)} partitions still being reassigned")
        removed = rc.remove_throttles(args.bootstrap_server, topics, args.timeout_s)
        for line in removed:
            print(f"Removed throttle: {line}")
        print(f"{'All ' + plural(len(rows), 'partition') + ' are' if len(rows) > 1 else 'The partition is'} "
              f"reassigned{'; throttles removed' if removed else ''}")
    else:
        cancelled, errors = rc.cancel(args.bootstrap_server, plan, args.timeout_s)
        idle = sorted(tp for tp, e in errors.items() if e.startswith("NO_REASSIGNMENT_IN_PROGRESS"))
        if cancelled:
            print(f"Successfully cancelled partition reassignments for: {','.join(map(tp_name, cancelled))}")
        if idle:
            print(f"Not in progress: {','.join(map(tp_name, idle))}")
        for line in rc.remove_throttles(args.bootstrap_server, topics, args.timeout_s):
            print(f"Removed throttle: {line}")
        other = {tp: e for tp, e in errors.items() if tp not in idle}
        if other:
            raise UserError(f"reassign: {rc.refused_line(other)}")



def _verify_watched(args: argparse.Namespace, plan: Any, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`reassign --verify --watch`: the per-partition progress redrawn until every partition
    is done or failed (or Ctrl-C); the last rows, for the usual verdict and throttle removal."""
    from odradek.admin import reassign_client as rc
    from odradek.admin.reassign_partitions_command import DONE, FAILED, format_states
    from odradek.cli.output import watch

    latest: dict[str, Any] = {"rows": rows}

    def render() -> str:
        if latest.get("shown"):
            latest["rows"] = rc.verify(args.bootstrap_server, plan, args.timeout_s)
        latest["shown"] = True
        return format_states(latest["rows"])

    watch(render, args.watch, until=lambda: all(r["state"] in (DONE, FAILED) for r in latest["rows"]))
    return latest["rows"]
