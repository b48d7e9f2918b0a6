"""`odradek topics create|list|describe|alter|delete|elect-leaders|delete-records` (Kafka's
kafka-topics.sh, kafka-leader-election.sh and kafka-delete-records.sh): the arguments and the
output; the requests are admin/admin_client.py's, topic_command.py's, config_command.py's and
delete_records_command.py's."""
from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, Any, Callable

from odradek.admin.errors import AdminError
from odradek.cli.args import (
    UserError,
    add_topic_argument,
    add_watch_option,
    keyvalue_arg,
    nonnegative_int,
    positive_int,
    seconds_arg,
    show_or_watch,
    topic_of,
)
from odradek.cli.bootstrap import add_bootstrap_options, probe_cluster
from odradek.cli.output import plural

if TYPE_CHECKING:
    from odradek.admin.topic_command import PartitionCountChange


def add_commands(sub: Any) -> None:
    """`odradek topics` and its subcommands."""
    t = sub.add_parser("topics", help="create, list and describe topics")
    tsub = t.add_subparsers(dest="topics_command", metavar="SUBCOMMAND", required=True)
    tc = tsub.add_parser("create", help="create a topic")
    add_topic_argument(tc)
    tc.add_argument("--partitions", type=positive_int, metavar="P",
                    help="how many partitions (default: the brokers' num.partitions)")
    tc.add_argument("--replication-factor", type=positive_int, metavar="R",
                    help="replicas of each partition (default: the brokers' default.replication.factor)")
    tc.add_argument("--config", type=keyvalue_arg, action="append", default=[], metavar="KEY=VALUE",
                    help="topic config, e.g. retention.ms=60000 (repeatable)")
    tc.add_argument("--if-not-exists", action="store_true", help="succeed if the topic already exists")
    tc.set_defaults(func=cmd_topics_create)
    tl = tsub.add_parser("list", help="list topic names, internal topics marked (internal)")
    tl.add_argument("--exclude-internal", action="store_true",
                    help="leave out Kafka's internal topics (__consumer_offsets, __transaction_state)")
    tl.add_argument("--json", action="store_true", help='print [{"name", "internal"}, ...]')
    tl.set_defaults(func=cmd_topics_list)
    td = tsub.add_parser("describe", help="leader, leader epoch, replicas and ISR of each partition (and for a "
                         "topic with ordered delivery, KIP-253's counts, parents and partitions marked for deletion)")
    td.add_argument("names", nargs="*", metavar="NAME",
                    help="topics, or regular expressions matching whole names (as kafka-topics.sh's "
                    "--topic: 'events-.*', 'a,b'); default: every topic")
    td.add_argument("--topic", action="append", default=[], metavar="NAME", dest="topic_names",
                    help="the same as NAME (kafka-topics.sh's spelling; repeatable)")
    td.add_argument("--exclude-internal", action="store_true",
                    help="leave out Kafka's internal topics (__consumer_offsets, __transaction_state)")
    td.add_argument("--json", action="store_true")
    td.add_argument("--under-replicated", action="store_true", help="only partitions whose ISR is smaller than "
                    "their replica list")
    td.add_argument("--offline", action="store_true", help="only partitions without a live leader")
    td.add_argument("--under-min-isr", action="store_true", help="only partitions whose ISR is smaller than "
                    "their topic's min.insync.replicas (acks=all producers are refused)")
    td.add_argument("--at-min-isr", action="store_true", help="only partitions whose ISR is exactly their "
                    "topic's min.insync.replicas (one more lost replica and acks=all producers are refused)")
    td.add_argument("--offsets", action="store_true", help="also each partition's log start offset and high "
                    "watermark (ListOffsets earliest and latest)")
    add_watch_option(td)
    td.set_defaults(func=cmd_topics_describe)
    ta = tsub.add_parser("alter", help="change a topic: its partition count (kafka-topics.sh --alter "
                         "--partitions) or its configs (Kafka's kafka-configs.sh --alter)")
    add_topic_argument(ta)
    _add_topic_config_options(ta)
    _add_topic_partitions_option(ta)
    ta.add_argument("--if-exists", action="store_true", help="succeed, changing nothing, if the topic does "
                    "not exist")
    ta.set_defaults(func=cmd_topics_alter)
    tx = tsub.add_parser("delete", help="delete topics and wait until they are gone (DeleteTopics, "
                         "Kafka's kafka-topics.sh --delete)")
    tx.add_argument("names", nargs="*", metavar="NAME")
    tx.add_argument("--topic", action="append", default=[], metavar="NAME", dest="topic_names",
                    help="the same as NAME (kafka-topics.sh's spelling; repeatable)")
    tx.add_argument("--if-exists", action="store_true", help="a topic that does not exist is not an error")
    tx.add_argument("--timeout-s", type=seconds_arg, default=60.0,
                    help="how long to wait for the topics to be gone")
    tx.set_defaults(func=cmd_topics_delete, usage_error=tx.error)
    te = tsub.add_parser("elect-leaders", help="move leadership back to preferred replicas (or, with "
                         "--unclean, elect leaders for partitions without a live in-sync replica)")
    te.add_argument("--topic", help="only this topic (default: every topic)")
    te.add_argument("--partition", type=int, action="append", metavar="P",
                    help="only this partition of --topic (repeatable)")
    te.add_argument("--unclean", action="store_true", help="allow a replica outside the ISR to lead a "
                    "partition that has no leader: messages it never received are lost")
    te.add_argument("--timeout-s", type=seconds_arg, default=60.0, help="how long to wait for the elections")
    te.set_defaults(func=cmd_topics_elect_leaders)
    tr = tsub.add_parser("delete-records", help="delete the records of a partition below an offset "
                         "(DeleteRecords, Kafka's kafka-delete-records.sh)")
    add_topic_argument(tr)
    tr.add_argument("--partition", type=nonnegative_int, action="append", required=True, metavar="P",
                    help="the partition (repeatable)")
    before = tr.add_mutually_exclusive_group(required=True)
    before.add_argument("--before", type=int, metavar="OFFSET",
                        help="the new log start offset; -1: the high watermark")
    before.add_argument("--all", action="store_const", dest="before", const=-1,
                        help="everything below the high watermark (same as --before -1)")
    tr.add_argument("--timeout-s", type=seconds_arg, default=30.0, help="how long to wait for each request")
    tr.add_argument("--json", action="store_true")
    tr.set_defaults(func=cmd_topics_delete_records)
    for parser in (tc, tl, td, ta, te, tr, tx):
        add_bootstrap_options(parser)


def cmd_topics_create(args: argparse.Namespace) -> None:
    from odradek.admin.admin_client import BROKER_DEFAULT, create_topic
    from odradek.cli.output import Progress

    name = topic_of(args)
    partitions = BROKER_DEFAULT if args.partitions is None else args.partitions
    rf = BROKER_DEFAULT if args.replication_factor is None else args.replication_factor
    bar = Progress(max(partitions, 1), f"creating {name}: partitions led")
    try:
        probe_cluster(args)
        partitions, rf = create_topic(
            args.bootstrap_server, name, partitions, rf, dict(args.config),
            progress=_progress_fn(bar, partitions >= PROGRESS_MIN_PARTITIONS),
            zookeeper=_zookeeper_for_progress(args, bar))
    except AdminError as exc:
        if not (args.if_not_exists and str(exc).startswith("TOPIC_ALREADY_EXISTS")):
            raise
        print(f"topic {name} already exists")
        return
    finally:
        bar.close()
    print(f"created topic {name} ({plural(partitions, 'partition')}, replication factor {rf})")


#: Topics of fewer partitions are created in about a second: no progress bar for them.
PROGRESS_MIN_PARTITIONS = 1000


def _progress_fn(bar: Any, wanted: bool) -> Callable[[int, int], None] | None:
    """A progress callback drawing ``bar``, or None where no bar is wanted or drawn."""
    return (lambda done, _total: bar.update(done)) if wanted and bar.enabled else None


def _zookeeper_for_progress(args: argparse.Namespace, bar: Any) -> str | None:
    """The ZooKeeper of --data-dir's cluster, for a bar drawn from what only ZooKeeper shows
    as it happens (admin.ZooKeeperProgress); None with only bootstrap servers: the command
    still speaks only the Kafka protocol then."""
    if not bar.enabled or args.cluster_dir is None:
        return None
    from odradek.cluster.local_cluster import LocalCluster

    return LocalCluster.load(args.cluster_dir).zookeeper_connect


def cmd_topics_list(args: argparse.Namespace) -> None:
    """One name a line, Kafka's internal topics followed by "(internal)"; --json for scripts."""
    from odradek.admin.admin_client import list_topics

    probe_cluster(args)
    topics = [t for t in list_topics(args.bootstrap_server) if not (args.exclude_internal and t["internal"])]
    if args.json:
        print(json.dumps(topics))
    elif not topics:
        print("no topics" + (" other than internal ones" if args.exclude_internal else ""))
    else:
        for t in topics:
            print(f"{t['name']} (internal)" if t["internal"] else t["name"])


def cmd_topics_describe(args: argparse.Namespace) -> None:
    probe_cluster(args)
    if args.watch is not None:
        show_or_watch(lambda: _describe_topics(args, in_frame=True), args.watch)
        return
    missing: list[str] = []
    print(_describe_topics(args, missing))
    if missing:
        from odradek.admin.topic_command import no_such_topics

        raise UserError(no_such_topics(missing))


#: the partition filters of `topics describe`, as its flags and the words for them
_FILTERS = {"under_replicated": "under-replicated", "offline": "offline", "under_min_isr": "under min ISR",
            "at_min_isr": "at min ISR"}


def _describe_topics(args: argparse.Namespace, missing: list[str] | None = None, in_frame: bool = False) -> str:
    """The text (or JSON list) `topics describe` prints. Requested topics that do not exist go
    to ``missing`` (the caller fails after printing the others), or with ``in_frame`` (--watch)
    into the text itself."""
    from odradek.admin.admin_client import filter_partitions, format_describe, list_topics, partition_offsets
    from odradek.admin.config_command import describe_topics_with_configs
    from odradek.admin.topic_command import (
        add_ordered_delivery,
        format_ordered_delivery,
        no_such_topics,
        select_topics,
    )

    requested = (args.names + args.topic_names) or None
    selected, unmatched = select_topics(list_topics(args.bootstrap_server), requested, args.exclude_internal)
    if missing is not None:
        missing.extend(unmatched)
    topics = describe_topics_with_configs(args.bootstrap_server, selected) if selected else []
    filters = [flag for flag in _FILTERS if getattr(args, flag)]
    if filters:
        topics = filter_partitions(topics, under_replicated=args.under_replicated, offline=args.offline,
                                   under_min_isr=args.under_min_isr, at_min_isr=args.at_min_isr,
                                   keep_empty=requested is not None)
    if args.offsets:
        offsets = partition_offsets(args.bootstrap_server,
                                    [(t["name"], p["partition"]) for t in topics for p in t["partitions"]])
        for t in topics:
            for p in t["partitions"]:
                p["log_start_offset"], p["high_watermark"] = offsets[(t["name"], p["partition"])]
    add_ordered_delivery(args.bootstrap_server, topics)  # KIP-253's counts and tree; plain topics unchanged
    if args.json:
        return json.dumps(topics)
    if filters and selected and not any(t["partitions"] for t in topics):
        lines = [f"no {' or '.join(_FILTERS[f] for f in filters)} partitions"]
        topics = []
    elif not topics:
        lines = ["no topics"]
    else:
        lines = [format_describe(topics, offsets=args.offsets)]
    for topic in topics:
        if topic["configs"]:
            shown = ",".join(f"{k}={v}" for k, v in sorted(topic["configs"].items()))
            lines.append(f"Configs of topic {topic['name']}: {shown}")
        if "ordered_delivery" in topic:
            lines.extend(format_ordered_delivery(topic))
    if in_frame and unmatched:
        lines.append(no_such_topics(unmatched))
    return "\n".join(lines)


def _add_topic_config_options(parser: argparse.ArgumentParser) -> None:
    """`topics alter`'s config options (kept apart from its other options)."""
    parser.add_argument("--config", type=keyvalue_arg, action="append", default=[], metavar="KEY=VALUE",
                        help="set a topic config, e.g. retention.ms=60000 (repeatable)")
    parser.add_argument("--delete-config", action="append", default=[], metavar="KEY",
                        help="remove a topic config: the broker default applies again (repeatable)")
    parser.add_argument("--timeout-s", type=seconds_arg, default=10.0, help="how long to wait for each request")


def _alter_topic_configs(args: argparse.Namespace) -> bool:
    """Apply `topics alter`'s --config and --delete-config; False if none was given."""
    from odradek.admin.config_command import TOPIC, alter, refuse_unset_deletes

    if not args.config and not args.delete_config:
        return False
    refuse_unset_deletes(args.bootstrap_server, TOPIC, args.name, args.delete_config, f"topic {args.name}",
                         args.timeout_s)
    alter(args.bootstrap_server, TOPIC, args.name, dict(args.config), args.delete_config, args.timeout_s)
    changes = [f"{k}={v}" for k, v in args.config] + [f"-{k}" for k in args.delete_config]
    print(f"altered configs of topic {args.name}: {', '.join(changes)}")
    return True


def _add_topic_partitions_option(parser: argparse.ArgumentParser) -> None:
    """`topics alter --partitions` (kept apart from its config options)."""
    parser.add_argument("--partitions", type=positive_int, metavar="P",
                        help="grow the topic to P partitions (CreatePartitions); a topic with "
                        "enable.ordered.delivery=true can also shrink (KIP-253: the partitions past P are "
                        "marked for deletion, take no new records and are removed once empty)")


def _alter_topic_partitions(args: argparse.Namespace) -> bool:
    """Apply `topics alter --partitions`; False if it was not given."""
    from odradek.admin.topic_command import alter_partition_count

    if args.partitions is None:
        return False
    change = alter_partition_count(args.bootstrap_server, args.name, args.partitions, max(args.timeout_s, 30.0))
    print(partition_count_line(change))
    return True


def partition_count_line(change: PartitionCountChange) -> str:
    """The progress line of `topics alter --partitions` (a topic_command.PartitionCountChange):
    Kafka's for a plain topic; for an ordered one (KIP-253) what moved where, since that is
    what its consumers will wait on."""
    name = change.name
    if not change.ordered:
        return f"topic {name} now has {plural(change.count, 'partition')}"
    if change.deletion:
        marked = change.marked()
        one = len(marked) == 1
        return (f"{name}: {change.before} -> {change.count} undeleted partitions; "
                f"partition{'' if one else 's'} {', '.join(map(str, marked))} marked for deletion "
                f"({'it takes' if one else 'they take'} no new records and {'is' if one else 'are'} "
                f"removed once empty)")
    sources = list(change.sources().items())
    shown = [f"partition {p} takes keys from partition {q}" if i == 0 else f"partition {p} from {q}"
             for i, (p, q) in enumerate(sources[:PARENTS_SHOWN])]
    more = (f" and {len(sources) - PARENTS_SHOWN} more (`odradek topics describe {name}` shows each "
            f"partition's parent)") if len(sources) > PARENTS_SHOWN else ""
    return f"{name}: {change.before} -> {change.count} partitions; {', '.join(shown)}{more}"


#: how many new partitions' sources `topics alter --partitions` names on its one line
PARENTS_SHOWN = 8


def cmd_topics_delete(args: argparse.Namespace) -> None:
    """Every topic's outcome: "deleted topic(s) ..." on stdout, then one error line naming each
    topic that was not deleted (exit 1), so a topic that cannot be deleted never hides that
    the others were. --if-exists: a topic that does not exist is said so on stdout, no error."""
    from odradek.admin.topic_command import TopicsNotDeleted, delete_topics, no_such_topics
    from odradek.cli.output import Progress

    names = list(dict.fromkeys(args.names + args.topic_names))
    if not names:
        args.usage_error("give the topics to delete: NAME ... or --topic NAME")
    bar = Progress(len(names), "deleting topics")
    failure: TopicsNotDeleted | None = None
    try:
        probe_cluster(args)
        outcome = delete_topics(args.bootstrap_server, names, args.timeout_s,
                                progress=_progress_fn(bar, len(names) >= PROGRESS_MIN_TOPICS),
                                zookeeper=_zookeeper_for_progress(args, bar), if_exists=args.if_exists)
    except TopicsNotDeleted as exc:
        failure, outcome = exc, exc.outcome
    finally:
        bar.close()
    if outcome.deleted:
        print(f"deleted topic{'s' if len(outcome.deleted) > 1 else ''} {', '.join(outcome.deleted)}")
    if outcome.missing and args.if_exists:
        print(f"{no_such_topics(outcome.missing).partition(' (')[0]}: nothing to delete")
    if failure is not None:
        raise failure


#: Deleting fewer topics takes a moment: no progress bar for them.
PROGRESS_MIN_TOPICS = 10


def cmd_topics_alter(args: argparse.Namespace) -> None:
    from odradek.admin.topic_command import topic_exists

    name = topic_of(args)
    if args.partitions is None and not args.config and not args.delete_config:
        raise UserError("topics alter: nothing to change (give --partitions P, --config KEY=VALUE or "
                        "--delete-config KEY)")
    probe_cluster(args)
    if args.if_exists and not topic_exists(args.bootstrap_server, name, args.timeout_s):
        print(f"topic {name!r} does not exist: nothing altered")
        return
    _alter_topic_partitions(args)
    _alter_topic_configs(args)


def cmd_topics_elect_leaders(args: argparse.Namespace) -> None:
    from odradek.admin.admin_client import describe_topics, elect_leaders

    if args.partition and not args.topic:
        raise UserError("topics elect-leaders: --partition needs --topic")
    probe_cluster(args)
    partitions = None
    if args.topic:
        known = [p["partition"] for p in describe_topics(args.bootstrap_server, [args.topic])[0]["partitions"]]
        partitions = [(args.topic, p) for p in (args.partition or known)]
    results = elect_leaders(args.bootstrap_server, partitions, args.unclean, args.timeout_s)
    kind = "unclean" if args.unclean else "preferred"
    elected = sorted(tp for tp, err in results.items() if err is None)
    not_needed = sorted(tp for tp, err in results.items() if err and err.startswith("ELECTION_NOT_NEEDED"))
    failed = sorted((tp, err) for tp, err in results.items() if err and tp not in not_needed)
    if partitions is None:  # ElectLeaders for every partition leaves out those that needed none
        print(f"{kind} leader election: {len(elected)} elected, {len(failed)} failed, every other "
              f"partition needed none")
    else:
        print(f"{kind} leader election: {len(elected)} elected, {len(not_needed)} not needed, "
              f"{len(failed)} failed")
    for (topic, partition), err in failed[:20]:
        print(f"  {topic}-{partition}: {err}")
    if len(failed) > 20:
        print(f"  ... and {len(failed) - 20} more")
    if failed:
        raise UserError(f"leader election failed for {len(failed)} partition{'s' if len(failed) > 1 else ''}")


def cmd_topics_delete_records(args: argparse.Namespace) -> None:
    from odradek.admin.delete_records_command import delete_records, format_result

    topic_of(args)
    if args.before < -1:
        raise UserError(f"topics delete-records: --before {args.before}: an offset, or -1 for the high watermark")
    probe_cluster(args)
    rows = delete_records(args.bootstrap_server, args.name, sorted(set(args.partition)), args.before,
                          args.timeout_s)
    print(json.dumps(rows) if args.json else format_result(rows))
    failed = [r for r in rows if r["error"]]
    if failed:
        first = failed[0]
        raise UserError(f"delete-records failed for {len(failed)} partition(s): "
                        f"{first['topic']}-{first['partition']}: {first['error']}")
