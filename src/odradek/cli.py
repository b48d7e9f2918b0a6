# PYTHON_ARGCOMPLETE_OK  (argcomplete: `eval "$(odradek completion bash)"`)
"""The `odradek` console script: run brokers and local clusters, and operate on them.

Client commands (topics, produce, consume, bench) speak only the Kafka protocol, so they work
against Apache Kafka as well. Every user error is one `odradek: error: ...` line on stderr and
exit status 1 (2 for bad arguments), never a traceback.

Client commands find the cluster from --bootstrap-server, else --data-dir (every broker of a
cluster `odradek up` started), else $ODRADEK_BOOTSTRAP_SERVERS, else 127.0.0.1:9092.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time
from datetime import datetime
from pathlib import Path
from typing import Any, Callable, NoReturn, Sequence

from confluent_kafka import KafkaError, KafkaException

from odradek.admin import AdminError, kafka_error_text, quiet_logger
from odradek.cli_output import duration, plural
from odradek.cluster import ClusterError, LocalCluster
from odradek.consumer_groups import ResetTarget

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
BOOTSTRAP_ENV = "ODRADEK_BOOTSTRAP_SERVERS"


class UserError(Exception):
    """Anything the operator can fix; printed as one line without a traceback."""


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows an option's default where it has a meaningful one (not None, False or [])
    and its help does not already name it."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        help_text = action.help or ""
        default = action.default
        if (default in (None, False, [], argparse.SUPPRESS) or "default" in help_text
                or not (action.option_strings or action.nargs in ("?", "*"))):
            return help_text
        return f"{help_text} (default: %(default)s)".lstrip()


class _Parser(argparse.ArgumentParser):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", _HelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        """One line instead of argparse's usage block, naming the subcommand and its --help."""
        sub = self.prog.partition(" ")[2]
        where = f"{sub}: " if sub else ""
        self.exit(2, f"odradek: error: {where}{message} (see `{self.prog} --help`)\n")


def _hostport(value: str) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, got {value!r}")
    return host, int(port)


def _zk_connect(value: str) -> str:
    """A ZooKeeper connect string, HOST:PORT[,HOST:PORT...][/chroot], with ports in range."""
    hosts, _, chroot = value.partition("/")
    for entry in hosts.split(","):
        host, sep, port = entry.strip().rpartition(":")
        if not host or not sep or not port.isdigit() or not 0 < int(port) < 65536:
            raise argparse.ArgumentTypeError(f"expected HOST:PORT[,HOST:PORT...][/chroot] with ports 1-65535, "
                                             f"got {value!r}")
    return value


def _bootstrap_list(value: str) -> str:
    """HOST:PORT[,HOST:PORT...], each checked as _hostport checks one."""
    for entry in value.split(","):
        _hostport(entry.strip())
    return value


def _directory(value: str) -> Path:
    """A data directory: it may not exist yet, but it may not be a file."""
    path = Path(value)
    if path.exists() and not path.is_dir():
        raise argparse.ArgumentTypeError(f"{value} exists and is not a directory (give a directory path)")
    return path


def _offset_start(value: str) -> str | int:
    """`consume --offset`: beginning, end, or an offset N (negative: N before the end, as kcat -o)."""
    if value in ("beginning", "end"):
        return value
    try:
        return int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected beginning, end or an offset, got {value!r}") from None


def _record_format(value: str) -> str:
    from odradek.cli_output import check_format

    try:
        return check_format(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _seconds(value: str) -> float:
    try:
        seconds = float(value)
    except ValueError:
        seconds = -1.0
    if not seconds > 0 or seconds == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a number of seconds above 0, got {value!r}")
    return seconds


def _positive(value: str) -> int:
    if not value.isdigit() or int(value) < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value!r}")
    return int(value)


def _port_or_zero(value: str) -> int:
    if not value.isdigit() or int(value) > 65535:
        raise argparse.ArgumentTypeError(f"expected a port number (0-65535), got {value!r}")
    return int(value)


def _keyvalue(value: str) -> tuple[str, str]:
    key, sep, val = value.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {value!r}")
    return key, val


def _nonnegative(value: str) -> int:
    if not value.isdigit():
        raise argparse.ArgumentTypeError(f"expected an offset (0 or more), got {value!r}")
    return int(value)


def _timestamp_ms(value: str) -> int:
    try:
        return int(datetime.fromisoformat(value).timestamp() * 1000)  # naive: local time, as Kafka's tool
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an ISO 8601 time such as 2026-01-31T12:00:00, "
                                         f"got {value!r}") from None


def _reset_to(kind: str, parse: Callable[[str], int]) -> Callable[[str], ResetTarget]:
    def convert(value: str) -> ResetTarget:
        try:
            return ResetTarget(kind, parse(value))
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {value!r}") from None
    return convert


def _topic_partitions(value: str) -> tuple[str, list[int] | None]:
    """`T` (every partition) or `T:0,2` (Kafka's reset-offsets --topic syntax)."""
    topic, sep, parts = value.partition(":")
    if not topic or (sep and not all(p.isdigit() for p in parts.split(","))):
        raise argparse.ArgumentTypeError(f"expected TOPIC or TOPIC:P[,P...], got {value!r}")
    return topic, [int(p) for p in parts.split(",")] if sep else None


def build_parser() -> argparse.ArgumentParser:
    """The whole command tree; each leaf carries its handler in `func`."""
    p = _Parser(prog="odradek", description="A Kafka-compatible broker cluster on ZooKeeper.")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", required=True)

    b = sub.add_parser("broker", help="run one broker in the foreground until SIGTERM")
    b.add_argument("--id", type=int, help="broker.id")
    b.add_argument("--listen", type=_hostport, metavar="HOST:PORT", help="address to serve Kafka clients on")
    b.add_argument("--zookeeper", type=_zk_connect, metavar="CONN", help="HOST:PORT[,HOST:PORT...][/chroot]")
    b.add_argument("--data-dir", type=_directory, metavar="DIR", help="where partition logs live")
    b.add_argument("--config", type=Path, metavar="FILE", help="Kafka-style key=value settings; flags win")
    b.add_argument("--session-timeout-ms", type=_positive, metavar="N", help="zookeeper.session.timeout.ms")
    b.set_defaults(func=cmd_broker)

    u = sub.add_parser("up", help="start (or restart what is missing of) a local cluster in the background; "
                       "on a data dir with a cluster.json, its recorded settings are reused")
    size = u.add_mutually_exclusive_group()
    size.add_argument("--brokers", type=_positive, metavar="N", help="brokers 1..N (required for a new cluster)")
    size.add_argument("--add-broker", action="store_true",
                      help="grow the recorded cluster by one broker, with the next id and port")
    u.add_argument("--data-dir", type=_directory, required=True, metavar="DIR")
    u.add_argument("--base-port", type=_positive, help="broker i listens on base-port + i - 1 (default 9092)")
    u.add_argument("--zk-port", type=_positive, help="client port of the private ZooKeeper (default 2181; "
                   "of its first server: server i of an ensemble uses zk-port + i - 1)")
    u.add_argument("--zookeeper-nodes", type=_positive, metavar="N",
                   help="run the private ZooKeeper as an ensemble of N servers (3 survives one death; default 1)")
    u.add_argument("--zookeeper", metavar="CONN", help="use this ZooKeeper instead of a private one")
    u.add_argument("--host", help="address every process listens on (default 127.0.0.1)")
    u.add_argument("--metrics-base-port", type=_port_or_zero, metavar="PORT",
                   help="broker i serves Prometheus metrics on PORT + i - 1 (default: base port + 1000; 0: none)")
    u.add_argument("--timeout-s", type=float, default=60.0, help="how long to wait for the cluster")
    u.set_defaults(func=cmd_up)

    d = sub.add_parser("down", help="stop a local cluster started by `odradek up` (data is kept)")
    d.add_argument("--data-dir", type=_directory, required=True, metavar="DIR")
    d.set_defaults(func=cmd_down)

    s = sub.add_parser("status", help="controller, live brokers and partition health, from ZooKeeper")
    where = s.add_mutually_exclusive_group()
    where.add_argument("--zookeeper", type=_zk_connect, metavar="CONN", help="default 127.0.0.1:2181")
    where.add_argument("--data-dir", type=_directory, metavar="DIR", help="a cluster started by `odradek up` "
                       "(its brokers that are down are named too)")
    s.add_argument("--json", action="store_true")
    s.add_argument("--timeout-s", type=_seconds, default=10.0, help="how long to try to reach ZooKeeper")
    _add_watch_option(s)
    s.set_defaults(func=cmd_status)

    ui = sub.add_parser("ui", help="a live web dashboard: brokers, partition leaders and ISRs, state changes, "
                        "consumer lag, reassignments and metrics")
    ui_where = ui.add_mutually_exclusive_group()
    ui_where.add_argument("--data-dir", type=_directory, metavar="DIR", help="a cluster started by `odradek up` "
                          "(its expected brokers, state-change logs and metrics URLs come from cluster.json)")
    ui_where.add_argument("--zookeeper", type=_zk_connect, metavar="CONN", help="default 127.0.0.1:2181")
    ui.add_argument("--bootstrap-server", metavar="HOST:PORT[,...]",
                    help="for the Kafka requests (default: the live brokers ZooKeeper lists)")
    ui.add_argument("--host", default="127.0.0.1", help="address to serve the dashboard on")
    ui.add_argument("--port", type=_port_or_zero, default=8080, help="port to serve the dashboard on")
    ui.add_argument("--interval-s", type=_seconds, default=1.0, help="how often ZooKeeper is read")
    ui.set_defaults(func=cmd_ui)

    t = sub.add_parser("topics", help="create, list and describe topics")
    tsub = t.add_subparsers(dest="topics_command", metavar="SUBCOMMAND", required=True)
    tc = tsub.add_parser("create", help="create a topic")
    tc.add_argument("name")
    tc.add_argument("--partitions", type=_positive, required=True, metavar="P")
    tc.add_argument("--replication-factor", type=_positive, required=True, metavar="R")
    tc.add_argument("--config", type=_keyvalue, action="append", default=[], metavar="KEY=VALUE",
                    help="topic config, e.g. retention.ms=60000 (repeatable)")
    tc.add_argument("--if-not-exists", action="store_true", help="succeed if the topic already exists")
    tc.set_defaults(func=cmd_topics_create)
    tl = tsub.add_parser("list", help="list topic names")
    tl.set_defaults(func=cmd_topics_list)
    td = tsub.add_parser("describe", help="leader, leader epoch, replicas and ISR of each partition")
    td.add_argument("name", nargs="?")
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
    _add_watch_option(td)
    td.set_defaults(func=cmd_topics_describe)
    ta = tsub.add_parser("alter", help="change a topic: its partition count (kafka-topics.sh --alter "
                         "--partitions) or its configs (Kafka's kafka-configs.sh --alter)")
    ta.add_argument("name")
    _add_topic_config_options(ta)
    _add_topic_partitions_option(ta)
    ta.set_defaults(func=cmd_topics_alter)
    tx = tsub.add_parser("delete", help="delete topics and wait until they are gone (DeleteTopics, "
                         "Kafka's kafka-topics.sh --delete)")
    tx.add_argument("names", nargs="+", metavar="NAME")
    tx.add_argument("--timeout-s", type=_seconds, default=60.0,
                    help="how long to wait for the topics to be gone")
    tx.set_defaults(func=cmd_topics_delete)
    te = tsub.add_parser("elect-leaders", help="move leadership back to preferred replicas (or, with "
                         "--unclean, elect leaders for partitions without a live in-sync replica)")
    te.add_argument("--topic", help="only this topic (default: every topic)")
    te.add_argument("--partition", type=int, action="append", metavar="P",
                    help="only this partition of --topic (repeatable)")
    te.add_argument("--unclean", action="store_true", help="allow a replica outside the ISR to lead a "
                    "partition that has no leader: messages it never received are lost")
    te.add_argument("--timeout-s", type=_seconds, default=60.0, help="how long to wait for the elections")
    te.set_defaults(func=cmd_topics_elect_leaders)
    tr = tsub.add_parser("delete-records", help="delete the records of a partition below an offset "
                         "(DeleteRecords, Kafka's kafka-delete-records.sh)")
    tr.add_argument("name")
    tr.add_argument("--partition", type=_nonnegative, action="append", required=True, metavar="P",
                    help="the partition (repeatable)")
    before = tr.add_mutually_exclusive_group(required=True)
    before.add_argument("--before", type=int, metavar="OFFSET",
                        help="the new log start offset; -1: the high watermark")
    before.add_argument("--all", action="store_const", dest="before", const=-1,
                        help="everything below the high watermark (same as --before -1)")
    tr.add_argument("--timeout-s", type=_seconds, default=30.0, help="how long to wait for each request")
    tr.add_argument("--json", action="store_true")
    tr.set_defaults(func=cmd_topics_delete_records)

    pr = sub.add_parser("produce", help="send stdin lines as records")
    pr.add_argument("topic")
    pr.add_argument("--key-separator", metavar="SEP", help="split each line into key SEP value")
    pr.add_argument("--acks", choices=("all", "1", "0"), default="all", help="how many replicas must have "
                    "a record before it counts as sent")
    pr.add_argument("--partition", type=_nonnegative, metavar="P", help="send every record to partition P "
                    "(default: by key hash, keyless records spread)")
    pr.add_argument("--header", type=_keyvalue, action="append", default=[], metavar="KEY=VALUE",
                    help="add this header to every record (repeatable)")
    pr.add_argument("--timeout-s", type=_seconds, default=30.0, help="give up on a record after this long")
    pr.set_defaults(func=cmd_produce)

    co = sub.add_parser("consume", help="print records as lines")
    co.add_argument("topic")
    co.add_argument("--from-beginning", action="store_true", help="start at the log start, not the end "
                    "(same as --offset beginning)")
    co.add_argument("--partition", type=_nonnegative, action="append", metavar="P",
                    help="read only partition P (repeatable; default: every partition)")
    co.add_argument("--offset", type=_offset_start, metavar="beginning|end|N",
                    help="where to start in each partition read: the log start, the end (the default), "
                         "offset N, or with -N N records before the end")
    co.add_argument("--max-messages", type=_positive, metavar="N",
                    help="stop after N records; exit 1 if fewer arrive before the idle timeout")
    co.add_argument("-f", "--follow", action="store_true", help="never stop for lack of records: wait for "
                    "new ones until Ctrl-C (no idle timeout)")
    co.add_argument("--timeout-s", type=_seconds, default=10.0, help="exit after this long without a record "
                    "(unless --follow)")
    co.add_argument("--format", type=_record_format, metavar="FMT", help="print each record in kcat's -f format: "
                    "%%t topic, %%p partition, %%o offset, %%k key, %%v value, %%T timestamp (ms), %%h headers "
                    "(k=v,...), %%K/%%S key/value length, \\n \\t; e.g. '%%p:%%o %%k=%%v\\n'")
    co.add_argument("--group", metavar="G", help="subscribe as a member of consumer group G, starting at its "
                    "committed offsets, and commit what was printed")
    co.add_argument("--print-key", action="store_true", help="print key<TAB>value (without --format)")
    co.set_defaults(func=cmd_consume)

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
    gr.add_argument("--topic", type=_topic_partitions, action="append", required=True, metavar="T[:P,...]",
                    help="the topic, or some of its partitions (repeatable)")
    to = gr.add_mutually_exclusive_group(required=True)
    to.add_argument("--to-earliest", action="store_const", dest="target", const=ResetTarget("earliest"),
                    help="the log start offset")
    to.add_argument("--to-latest", action="store_const", dest="target", const=ResetTarget("latest"),
                    help="the log end offset")
    to.add_argument("--to-offset", type=_reset_to("offset", _nonnegative), dest="target", metavar="N",
                    help="offset N (clamped into [log start, log end])")
    to.add_argument("--shift-by", type=_reset_to("shift", int), dest="target", metavar="N",
                    help="the committed offset plus N (may be negative; clamped)")
    to.add_argument("--to-datetime", type=_reset_to("datetime", _timestamp_ms), dest="target", metavar="ISO",
                    help="the first record at or after this time, e.g. 2026-01-31T12:00:00 (local time "
                         "unless it names a zone); the log end where there is none")
    gr.add_argument("--execute", action="store_true", help="commit the new offsets (default: only print them)")
    gr.add_argument("--json", action="store_true")
    gr.set_defaults(func=cmd_groups_reset_offsets)
    gx = gsub.add_parser("delete", help="delete a group without members and its committed offsets")
    gx.add_argument("group")
    gx.set_defaults(func=cmd_groups_delete)
    for parser in (gl, gd, gr, gx):
        _add_bootstrap_options(parser)
        parser.add_argument("--timeout-s", type=_seconds, default=10.0, help="how long to wait for each request")

    _add_configs_commands(sub)
    _add_reassign_command(sub)

    be = sub.add_parser("bench", help="benchmarks")
    bsub = be.add_subparsers(dest="bench_command", metavar="SUBCOMMAND", required=True)
    bp = bsub.add_parser("produce", help="producer throughput and latency")
    bp.add_argument("--messages", type=_positive, default=200_000, metavar="N")
    bp.add_argument("--size", type=_positive, default=100, help="bytes per message")
    bp.add_argument("--acks", choices=("all", "1"), default="all")
    bp.add_argument("--replication-factor", type=_positive, default=3, metavar="R")
    bp.add_argument("--partitions", type=_positive, default=6, metavar="P")
    bp.add_argument("--compare", action="store_true",
                    help="alternate RF3 acks=all and RF1 acks=1 runs on one cluster, each in its own "
                         "process, and print the ratio of the median throughputs")
    bp.add_argument("--rounds", type=_positive, default=3, metavar="N", help="runs of each kind with --compare")
    bp.add_argument("--json", action="store_true")
    bp.set_defaults(func=cmd_bench_produce)

    bf = bsub.add_parser("failover", help="broker and controller failover time on a private cluster, "
                                          "with the ZooKeeper multi-write floor")
    bf.add_argument("--partitions", type=_positive, default=10_000, metavar="P")
    bf.add_argument("--brokers", type=_positive, default=3, metavar="N")
    bf.add_argument("--timeout-s", type=_seconds, default=600.0, help="how long to wait for each step")
    bf.add_argument("--rounds", type=_positive, default=3, metavar="N",
                    help="failovers of each kind; the medians are reported (default 3)")
    bf.add_argument("--keep-dir", type=Path, metavar="DIR",
                    help="run the cluster in DIR and keep its logs (default: a temp dir, removed)")
    bf.add_argument("--json", action="store_true")
    bf.set_defaults(func=cmd_bench_failover)

    # the options of bench failover (the parser above), with its defaults
    bsd = bsub.add_parser("shutdown", help="controlled shutdown (SIGTERM) on a private cluster: time until "
                                          "the broker's leadership has moved, and until it exits",
                          parents=[bf], add_help=False, conflict_handler="resolve")
    bsd.add_argument("--rounds", type=_positive, default=3, metavar="N",
                     help="shutdowns, each of the broker leading a third; the medians are reported (default 3)")
    bsd.set_defaults(func=cmd_bench_shutdown)

    bra = bsub.add_parser("reassign", help="partition reassignment on a private cluster of 6 brokers: "
                                          "moving empty partitions, and a throttled move of data")
    bra.add_argument("--partitions", type=_positive, default=1000, metavar="P",
                     help="empty partitions moved in one AlterPartitionReassignments (default 1000)")
    bra.add_argument("--data-mb", type=_positive, default=1024, metavar="MB",
                     help="MiB of data in the topic moved under the throttle (default 1024)")
    bra.add_argument("--throttle-mb-per-s", type=float, default=50.0, metavar="MB",
                     help="replication throttle in MiB/s, as odradek reassign --throttle sets it (default 50)")
    bra.add_argument("--timeout-s", type=_seconds, default=900.0, help="how long to wait for each step")
    bra.add_argument("--keep-dir", type=Path, metavar="DIR",
                     help="run the cluster in DIR and keep its logs (default: a temp dir, removed)")
    bra.add_argument("--json", action="store_true")
    bra.set_defaults(func=cmd_bench_reassign)

    bg = bsub.add_parser("groups", help="consumer group rebalance, coordinator failover and commit rate "
                                        "on a private cluster")
    bg.add_argument("--members", type=_positive, default=10, metavar="N")
    bg.add_argument("--partitions", type=_positive, default=60, metavar="P")
    bg.add_argument("--rounds", type=_positive, default=3, metavar="N",
                    help="measurements of each kind; the medians are reported (default 3)")
    bg.add_argument("--keep-dir", type=Path, metavar="DIR",
                    help="run the cluster in DIR and keep its logs (default: a temp dir, removed)")
    bg.add_argument("--json", action="store_true")
    bg.set_defaults(func=cmd_bench_groups)

    bs = bsub.add_parser("spark-read", help="rows/s reading a topic through Spark vs a plain consumer")
    bs.add_argument("--records", type=_positive, default=1_000_000, metavar="N")
    bs.add_argument("--size", type=_positive, default=100, help="bytes per record")
    bs.add_argument("--partitions", type=_positive, default=6, metavar="P")
    bs.add_argument("--master", default="local[2]", help="Spark master URL")
    bs.add_argument("--json", action="store_true")
    bs.set_defaults(func=cmd_bench_spark_read)

    for parser in (tc, tl, td, ta, te, tr, tx, pr, co):
        _add_bootstrap_options(parser)
    for parser in (bp, bs):
        parser.add_argument("--bootstrap-server", type=_bootstrap_list, metavar="HOST:PORT[,...]",
                            help="the cluster to measure (default: a private 3-broker cluster)")

    cp = sub.add_parser("completion", help="print the shell code that completes odradek's commands and "
                        "options: eval \"$(odradek completion bash)\" (in ~/.bashrc to keep it)")
    cp.add_argument("shell", choices=("bash", "zsh", "fish"), nargs="?", default="bash")
    cp.set_defaults(func=cmd_completion)
    p.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    _fill_in_help(p)
    return p


#: Help for the options that many commands share, filled in where a command gave none.
_SHARED_HELP = {
    "json": "print JSON instead of text",
    "timeout_s": "how long to wait, in seconds",
    "name": "the topic",
    "topic": "the topic",
    "group": "the consumer group",
    "brokers": "how many brokers",
    "data_dir": "the cluster's data directory",
    "host": "the address the brokers listen on",
    "id": "broker.id",
    "partitions": "how many partitions",
    "replication_factor": "replicas of each partition",
    "names": "the topics",
    "messages": "how many records",
    "records": "how many records",
    "members": "how many group members",
    "acks": "replicas that must have a record before it counts as sent",
    "shell": "the shell to complete in",
}


def _fill_in_help(parser: argparse.ArgumentParser) -> None:
    """Every option of every command gets a help line (and so its default shown)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                _fill_in_help(child)
        elif action.help is None and action.dest in _SHARED_HELP:
            action.help = _SHARED_HELP[action.dest]


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("odradek")
    except PackageNotFoundError:
        return "unknown (not installed)"


def _add_bootstrap_options(parser: argparse.ArgumentParser) -> None:
    """Where a client command finds the cluster; resolved by _resolve_bootstrap."""
    parser.add_argument("--bootstrap-server", type=_bootstrap_list, metavar="HOST:PORT[,...]",
                        help=f"brokers to bootstrap from (default: every broker of --data-dir, else "
                             f"${BOOTSTRAP_ENV}, else {DEFAULT_BOOTSTRAP})")
    parser.add_argument("--data-dir", type=_directory, metavar="DIR", dest="cluster_dir",
                        help="bootstrap from every broker of the cluster `odradek up` runs in DIR")
    parser.set_defaults(resolve_bootstrap=True)


def _resolve_bootstrap(args: argparse.Namespace) -> None:
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
            args.bootstrap_server = _bootstrap_list(env)
        except argparse.ArgumentTypeError as exc:
            raise UserError(f"${BOOTSTRAP_ENV}: {exc}") from None
        return
    args.bootstrap_server = DEFAULT_BOOTSTRAP


def _add_watch_option(parser: argparse.ArgumentParser, until: str = "Ctrl-C") -> None:
    parser.add_argument("--watch", type=_seconds, nargs="?", const=2.0, metavar="S",
                        help=f"redraw every S seconds (2 if not given) until {until}")


def _verify_watched(args: argparse.Namespace, plan: Any, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`reassign --verify --watch`: the per-partition progress redrawn until every partition
    is done or failed (or Ctrl-C); the last rows, for the usual verdict and throttle removal."""
    from odradek import reassign_client as rc
    from odradek.cli_output import watch
    from odradek.reassign_command import DONE, FAILED, format_states

    latest = {"rows": rows}

    def render() -> str:
        if latest.get("shown"):
            latest["rows"] = rc.verify(args.bootstrap_server, plan, args.timeout_s)
        latest["shown"] = True
        return format_states(latest["rows"])

    watch(render, args.watch, until=lambda: all(r["state"] in (DONE, FAILED) for r in latest["rows"]))
    return latest["rows"]


def cmd_completion(args: argparse.Namespace) -> None:
    try:
        import argcomplete
    except ImportError:
        raise UserError("completion needs the argcomplete package: pip install argcomplete") from None
    print(argcomplete.shellcode(["odradek"], shell=args.shell))


def cmd_broker(args: argparse.Namespace) -> None:
    """Foreground broker; the BrokerConfig is built here so flags and files share one path."""
    from odradek.broker.config import BrokerConfig

    flags = {
        "broker_id": args.id,
        "host": args.listen[0] if args.listen else None,
        "port": args.listen[1] if args.listen else None,
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
    from odradek.broker.server import run_broker
    from odradek.netutil import port_free

    if not port_free(config.host, config.port):
        raise UserError(f"broker: {config.host}:{config.port} is already in use (stop what listens there, "
                        f"or give another --listen)")
    try:
        run_broker(config)
    except OSError as exc:  # the port taken between the check and the bind, a data dir not writable
        raise UserError(f"broker {config.broker_id}: {exc.strerror or exc}"
                        + (f": {exc.filename}" if exc.filename else "")) from None
    except Exception as exc:
        if type(exc).__module__.startswith("kazoo"):  # ZooKeeper not reachable at startup
            raise UserError(f"broker {config.broker_id}: cannot reach ZooKeeper at {config.zookeeper} "
                            f"({type(exc).__name__}: {exc}); is it running?") from None
        raise


def cmd_up(args: argparse.Namespace) -> None:
    cluster = LocalCluster.for_up(args.data_dir, add_broker=args.add_broker, brokers=args.brokers,
                                  base_port=args.base_port, zk_port=args.zk_port, zookeeper=args.zookeeper,
                                  host=args.host, zookeeper_nodes=args.zookeeper_nodes,
                                  metrics_base_port=args.metrics_base_port)
    for process in cluster.start(timeout=args.timeout_s):
        print(f"{process.name}: {process.action}, {process.address} pid {process.pid} log {process.log}"
              + (f" metrics {process.metrics_url}" if process.metrics_url else ""))
    print(f"zookeeper: {cluster.zookeeper_connect}")
    print(f"bootstrap servers: {cluster.bootstrap_servers}")


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
    from odradek.admin import cluster_status, format_status

    cluster = LocalCluster.load(args.data_dir) if args.data_dir else None
    zookeeper = cluster.zookeeper_connect if cluster is not None else args.zookeeper
    expected = None
    if cluster is not None:  # the brokers it should have, so one that is down is named
        expected = {b: (cluster.host, cluster.broker_port(b)) for b in cluster.broker_ids}

    def render() -> str:
        status = cluster_status(zookeeper or "127.0.0.1:2181", timeout=args.timeout_s, expected=expected)
        for broker in status["live_brokers"] + status["brokers"]:
            broker["metrics_url"] = cluster.metrics_url(broker["id"]) if cluster is not None else None
        return json.dumps(status, indent=2) if args.json else format_status(status)

    _show(render, args.watch)


def cmd_ui(args: argparse.Namespace) -> None:
    from odradek.ui.poller import ClusterSource, source_from_data_dir
    from odradek.ui.server import serve

    if args.data_dir:
        source = source_from_data_dir(args.data_dir, args.bootstrap_server)
    else:
        source = ClusterSource(args.zookeeper or "127.0.0.1:2181", args.bootstrap_server)
    serve(source, args.host, args.port, args.interval_s)


def _show(render: Callable[[], str], watch_s: float | None) -> None:
    """Print ``render()`` once, or with --watch redraw it until Ctrl-C."""
    from odradek.cli_output import watch

    if watch_s is None:
        print(render())
    else:
        watch(render, watch_s)


def cmd_topics_create(args: argparse.Namespace) -> None:
    from odradek.admin import create_topic
    from odradek.cli_output import Progress

    bar = Progress(args.partitions, f"creating {args.name}: partitions led")
    try:
        create_topic(args.bootstrap_server, args.name, args.partitions, args.replication_factor, dict(args.config),
                     progress=_progress_fn(bar, args.partitions >= PROGRESS_MIN_PARTITIONS))
    except AdminError as exc:
        if not (args.if_not_exists and str(exc).startswith("TOPIC_ALREADY_EXISTS")):
            raise
        print(f"topic {args.name} already exists")
        return
    finally:
        bar.close()
    print(f"created topic {args.name} ({plural(args.partitions, 'partition')}, "
          f"replication factor {args.replication_factor})")


#: Topics of fewer partitions are created in about a second: no progress bar for them.
PROGRESS_MIN_PARTITIONS = 1000


def _progress_fn(bar: Any, wanted: bool) -> Callable[[int, int], None] | None:
    """A progress callback drawing ``bar``, or None where no bar is wanted or drawn."""
    return (lambda done, _total: bar.update(done)) if wanted and bar.enabled else None


def cmd_topics_list(args: argparse.Namespace) -> None:
    from odradek.admin import list_topics

    for name in list_topics(args.bootstrap_server):
        print(name)


def cmd_topics_describe(args: argparse.Namespace) -> None:
    _show(lambda: _describe_topics(args), args.watch)


def _describe_topics(args: argparse.Namespace) -> str:
    from odradek.admin import describe_topics, filter_partitions, format_describe, partition_offsets
    from odradek.config_command import topic_configs

    topics = describe_topics(args.bootstrap_server, [args.name] if args.name else None)
    # one DescribeConfigs for all: the configs each topic sets itself (kafka-topics.sh --describe
    # shows those) and the min.insync.replicas it has, set or inherited
    configs = topic_configs(args.bootstrap_server, [t["name"] for t in topics])
    for topic in topics:
        own = configs.get(topic["name"], {})
        topic["configs"] = {k: v for k, (v, source) in own.items() if source == 1}
        min_isr = own.get("min.insync.replicas", ("1", 0))[0]
        topic["min_insync_replicas"] = int(min_isr) if str(min_isr).isdigit() else 1
    if args.under_replicated or args.offline or args.under_min_isr or args.at_min_isr:
        topics = filter_partitions(topics, under_replicated=args.under_replicated, offline=args.offline,
                                   under_min_isr=args.under_min_isr, at_min_isr=args.at_min_isr,
                                   keep_empty=bool(args.name))
    if args.offsets:
        offsets = partition_offsets(args.bootstrap_server,
                                    [(t["name"], p["partition"]) for t in topics for p in t["partitions"]])
        for t in topics:
            for p in t["partitions"]:
                p["log_start_offset"], p["high_watermark"] = offsets[(t["name"], p["partition"])]
    if args.json:
        return json.dumps(topics[0] if args.name else topics)
    lines = [format_describe(topics, offsets=args.offsets)]
    for topic in topics:
        if topic["configs"]:
            shown = ",".join(f"{k}={v}" for k, v in sorted(topic["configs"].items()))
            lines.append(f"Configs of topic {topic['name']}: {shown}")
    return "\n".join(lines)


def _add_topic_config_options(parser: argparse.ArgumentParser) -> None:
    """`topics alter`'s config options (kept apart from its other options)."""
    parser.add_argument("--config", type=_keyvalue, action="append", default=[], metavar="KEY=VALUE",
                        help="set a topic config, e.g. retention.ms=60000 (repeatable)")
    parser.add_argument("--delete-config", action="append", default=[], metavar="KEY",
                        help="remove a topic config: the broker default applies again (repeatable)")
    parser.add_argument("--timeout-s", type=_seconds, default=10.0, help="how long to wait for each request")


def _alter_topic_configs(args: argparse.Namespace) -> bool:
    """Apply `topics alter`'s --config and --delete-config; False if none was given."""
    from odradek.config_command import TOPIC, alter

    if not args.config and not args.delete_config:
        return False
    alter(args.bootstrap_server, TOPIC, args.name, dict(args.config), args.delete_config, args.timeout_s)
    changes = [f"{k}={v}" for k, v in args.config] + [f"-{k}" for k in args.delete_config]
    print(f"altered configs of topic {args.name}: {', '.join(changes)}")
    return True


def _add_topic_partitions_option(parser: argparse.ArgumentParser) -> None:
    """`topics alter --partitions` (kept apart from its config options)."""
    parser.add_argument("--partitions", type=_positive, metavar="P",
                        help="grow the topic to P partitions (CreatePartitions; it cannot shrink)")


def _alter_topic_partitions(args: argparse.Namespace) -> bool:
    """Apply `topics alter --partitions`; False if it was not given."""
    from odradek.topic_command import create_partitions

    if args.partitions is None:
        return False
    create_partitions(args.bootstrap_server, args.name, args.partitions, max(args.timeout_s, 30.0))
    print(f"topic {args.name} now has {plural(args.partitions, 'partition')}")
    return True


def cmd_topics_delete(args: argparse.Namespace) -> None:
    from odradek.cli_output import Progress
    from odradek.topic_command import delete_topics

    names = list(dict.fromkeys(args.names))
    bar = Progress(len(names), "deleting topics")
    try:
        delete_topics(args.bootstrap_server, names, args.timeout_s,
                      progress=_progress_fn(bar, len(names) >= PROGRESS_MIN_TOPICS))
    finally:
        bar.close()
    print(f"deleted topic{'s' if len(names) > 1 else ''} {', '.join(names)}")


#: Deleting fewer topics takes a moment: no progress bar for them.
PROGRESS_MIN_TOPICS = 10


def cmd_topics_alter(args: argparse.Namespace) -> None:
    partitions = _alter_topic_partitions(args)
    if not _alter_topic_configs(args) and not partitions:
        raise UserError("topics alter: nothing to change (give --partitions P, --config KEY=VALUE or "
                        "--delete-config KEY)")


def _add_configs_commands(sub: Any) -> None:
    """`odradek configs describe|alter` (Kafka's kafka-configs.sh) for topics and brokers."""
    c = sub.add_parser("configs", help="describe and change topic and broker configs (Kafka's kafka-configs.sh)")
    csub = c.add_subparsers(dest="configs_command", metavar="SUBCOMMAND", required=True)
    cd = csub.add_parser("describe", help="the configs set dynamically on a topic or broker (--all: every "
                         "config, with its source)")
    cd.add_argument("--all", action="store_true", help="every config, not only those set dynamically")
    cd.add_argument("--json", action="store_true")
    cd.set_defaults(func=cmd_configs_describe)
    ca = csub.add_parser("alter", help="set or delete dynamic configs of a topic, a broker or every broker")
    ca.add_argument("--set", type=_keyvalue, action="append", default=[], metavar="KEY=VALUE", help="(repeatable)")
    ca.add_argument("--delete", action="append", default=[], metavar="KEY",
                    help="remove a dynamic config: the next layer's value applies (repeatable)")
    ca.set_defaults(func=cmd_configs_alter)
    for parser in (cd, ca):
        which = parser.add_mutually_exclusive_group(required=True)
        which.add_argument("--topic", metavar="T")
        which.add_argument("--broker", type=_nonnegative, metavar="N", help="broker N's own configs")
        which.add_argument("--broker-defaults", action="store_true", help="the cluster-wide broker defaults")
        _add_bootstrap_options(parser)
        parser.add_argument("--timeout-s", type=_seconds, default=10.0, help="how long to wait for each request")


def cmd_configs_describe(args: argparse.Namespace) -> None:
    from odradek.config_command import DYNAMIC_SOURCES, describe, entity, format_configs

    resource_type, name, what = entity(args.topic, args.broker, args.broker_defaults)
    entries = describe(args.bootstrap_server, resource_type, name, args.timeout_s)
    if args.json:
        print(json.dumps(entries if args.all else [e for e in entries if e["source"] in DYNAMIC_SOURCES]))
    else:
        print(format_configs(what, entries, args.all))


def _add_reassign_command(sub: Any) -> None:
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
    r.add_argument("--throttle", type=_positive, metavar="BYTES_PER_S", help="--execute limits the copying to "
                   "this rate: sets leader/follower.replication.throttled.rate on the brokers involved and "
                   "leader/follower.replication.throttled.replicas on the topics (default: no throttle)")
    r.add_argument("--allow-replication-factor-change", action="store_true", help="--execute accepts a plan "
                   "that changes a partition's number of replicas (Kafka allows it without asking)")
    r.add_argument("--json", action="store_true", help="--verify prints its rows as JSON")
    _add_watch_option(r, until="every partition of --verify is done or failed, or Ctrl-C")
    _add_bootstrap_options(r)
    r.add_argument("--timeout-s", type=_seconds, default=30.0, help="how long to wait for each request (default 30)")
    r.set_defaults(func=cmd_reassign)


def cmd_reassign(args: argparse.Namespace) -> None:
    from odradek.reassign_command import PlanError

    try:
        _reassign(args)
    except PlanError as exc:
        raise UserError(f"reassign: {exc}") from None


def _reassign(args: argparse.Namespace) -> None:
    from odradek import reassign_client as rc
    from odradek.reassign_command import DONE, FAILED, format_plan, format_states, parse_plan, tp_name

    if args.generate:
        if not args.topics or not args.brokers:
            raise UserError("reassign: --generate needs --topics and --brokers")
        try:
            brokers = [int(b) for b in args.brokers.split(",")]
        except ValueError:
            raise UserError(f"reassign: --brokers {args.brokers!r}: expected broker ids such as 1,2,3") from None
        topics = [t for t in args.topics.split(",") if t]
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
                raise UserError(f"reassign: cannot write --output: {exc}") from None
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


def cmd_configs_alter(args: argparse.Namespace) -> None:
    from odradek.config_command import alter, entity

    if not args.set and not args.delete:
        raise UserError("configs alter: nothing to change (give --set KEY=VALUE or --delete KEY)")
    resource_type, name, what = entity(args.topic, args.broker, args.broker_defaults)
    alter(args.bootstrap_server, resource_type, name, dict(args.set), args.delete, args.timeout_s)
    changes = [f"{k}={v}" for k, v in args.set] + [f"-{k}" for k in args.delete]
    print(f"altered configs of {what}: {', '.join(changes)}")


def cmd_topics_elect_leaders(args: argparse.Namespace) -> None:
    from odradek.admin import describe_topics, elect_leaders

    if args.partition and not args.topic:
        raise UserError("topics elect-leaders: --partition needs --topic")
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
    from odradek.delete_records_command import delete_records, format_result

    if args.before < -1:
        raise UserError(f"topics delete-records: --before {args.before}: an offset, or -1 for the high watermark")
    rows = delete_records(args.bootstrap_server, args.name, sorted(set(args.partition)), args.before,
                          args.timeout_s)
    print(json.dumps(rows) if args.json else format_result(rows))
    failed = [r for r in rows if r["error"]]
    if failed:
        first = failed[0]
        raise UserError(f"delete-records failed for {len(failed)} partition(s): "
                        f"{first['topic']}-{first['partition']}: {first['error']}")


def _check_topic(client: Any, bootstrap: str, topic: str, timeout: float) -> Any:
    """The topic's metadata, or a UserError saying whether the cluster or the topic is missing.

    Lists all topics rather than asking for one, because asking may auto-create it."""
    try:
        meta = client.list_topics(timeout=timeout)
    except KafkaException as exc:
        raise UserError(f"cannot reach {bootstrap} within {duration(timeout)} ({kafka_error_text(exc)})") from None
    if topic not in meta.topics:
        raise UserError(f"topic {topic!r} does not exist (create it with `odradek topics create`)")
    return meta.topics[topic]


def cmd_produce(args: argparse.Namespace) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": args.bootstrap_server, "acks": args.acks, "linger.ms": 5,
                         "message.timeout.ms": int(args.timeout_s * 1000), "logger": quiet_logger()})
    meta = _check_topic(producer, args.bootstrap_server, args.topic, args.timeout_s)
    if args.partition is not None and args.partition not in meta.partitions:
        raise UserError(f"topic {args.topic} has no partition {args.partition} (it has "
                        f"{plural(len(meta.partitions), 'partition')}, 0-{len(meta.partitions) - 1})")
    extra: dict[str, Any] = {} if args.partition is None else {"partition": args.partition}
    if args.header:
        extra["headers"] = [(k, v.encode()) for k, v in args.header]
    failures: list[str] = []

    def on_delivery(err: Any, _msg: Any) -> None:
        if err is not None:
            failures.append(kafka_error_text(err))

    sent = 0
    for line in sys.stdin.buffer:
        value = line.rstrip(b"\r\n")
        key = None
        if args.key_separator is not None:
            k, sep, v = value.partition(args.key_separator.encode())
            key, value = (k, v) if sep else (None, value)
        while True:
            try:
                producer.produce(args.topic, value, key, on_delivery=on_delivery, **extra)
                break
            except BufferError:  # local queue full: let deliveries drain
                producer.poll(0.1)
            except KafkaException as exc:  # refused before sending, e.g. MSG_SIZE_TOO_LARGE
                producer.flush(args.timeout_s + 5)
                raise UserError(f"record {sent + 1} ({len(value):,} bytes) not sent to {args.topic}: "
                                f"{kafka_error_text(exc)}{_produce_hint(exc)}; "
                                f"{plural(sent, 'record')} before it were sent") from None
        producer.poll(0)
        sent += 1
    left = producer.flush(args.timeout_s + 5)
    if left or failures:
        first = f": {failures[0]}" if failures else ""
        raise UserError(f"{len(failures) + left} of {plural(sent, 'record')} not delivered to {args.topic}{first}")
    print(f"produced {plural(sent, 'record')} to {args.topic}", file=sys.stderr)


def _produce_hint(exc: KafkaException) -> str:
    """What to do about an error the producer raises before sending."""
    err = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
    if err is not None and err.code() == KafkaError.MSG_SIZE_TOO_LARGE:
        return " (records must be under 1 MB, librdkafka's message.max.bytes; split the line)"
    return ""


def cmd_consume(args: argparse.Namespace) -> None:
    from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, Consumer, TopicPartition

    if args.group and (args.partition or args.offset is not None):
        raise UserError("consume: --partition and --offset read without a group; a --group member reads "
                        "from the group's committed offsets (move them with `odradek groups reset-offsets`)")
    if args.from_beginning and args.offset is not None:
        raise UserError("consume: give --from-beginning or --offset, not both")
    start_at = "beginning" if args.from_beginning else args.offset if args.offset is not None else "end"
    conf = {"bootstrap.servers": args.bootstrap_server, "enable.auto.commit": False,
            "enable.auto.offset.store": False, "logger": quiet_logger(),
            "auto.offset.reset": "earliest" if start_at == "beginning" else "latest"}
    # librdkafka insists on a group.id even for assign(); nothing is committed without --group.
    conf["group.id"] = args.group or "odradek-console"
    consumer = Consumer(conf)
    commits = None
    # ^C only sets a flag the read loop checks: a KeyboardInterrupt raised wherever the signal
    # lands (inside a rebalance callback, a synchronous commit, librdkafka's close) once left
    # `consume --group` hanging in close() on a loaded machine
    interrupted = threading.Event()
    previous = signal.signal(signal.SIGINT, lambda *_: interrupted.set())
    try:
        meta = _check_topic(consumer, args.bootstrap_server, args.topic, args.timeout_s)
        if args.group:  # the group's committed offsets, or auto.offset.reset where it has none
            commits = _PrintedOffsets(consumer, sys.stdout.buffer)
            consumer.subscribe([args.topic], on_assign=commits.on_assign, on_revoke=commits.on_revoke)
        else:  # no group: read the partitions directly, as kafka-console-consumer --partition does
            missing = sorted(set(args.partition or []) - set(meta.partitions))
            if missing:
                raise UserError(f"topic {args.topic} has no partition {missing[0]} (it has "
                                f"{plural(len(meta.partitions), 'partition')})")
            if start_at in ("beginning", "end"):
                start = OFFSET_BEGINNING if start_at == "beginning" else OFFSET_END
            else:  # -N: N records before the end (librdkafka's OFFSET_TAIL)
                start = OFFSET_TAIL_BASE + start_at if start_at < 0 else start_at
            consumer.assign([TopicPartition(args.topic, p, start) for p in sorted(args.partition or meta.partitions)])
        offline = _offline_partitions(meta, args.partition)
        if offline and args.follow:
            print(f"odradek: warning: {_offline_text(args.topic, offline)}; waiting for a leader", file=sys.stderr)
        _print_records(consumer, args, commits, interrupted)
        if not interrupted.is_set():
            offline = _offline_partitions(consumer.list_topics(args.topic, timeout=args.timeout_s).topics[args.topic],
                                          args.partition)
            if offline:
                raise UserError(f"{_offline_text(args.topic, offline)}: their records were not read "
                                f"(see `odradek topics describe {args.topic} --offline`)")
    finally:
        consumer.close()  # a group member leaves the group (LeaveGroup)
        signal.signal(signal.SIGINT, previous)
    if interrupted.is_set():
        raise KeyboardInterrupt


#: librdkafka's RD_KAFKA_OFFSET_TAIL_BASE: offset TAIL_BASE - N means N records before the end.
OFFSET_TAIL_BASE = -2000


def _offline_partitions(topic_meta: Any, wanted: list[int] | None) -> list[int]:
    """The partitions (of ``wanted``, or all) that have no leader: nothing can be read from them."""
    return sorted(p for p, pm in topic_meta.partitions.items()
                  if (not wanted or p in wanted) and (pm.leader < 0 or pm.error is not None))


def _offline_text(topic: str, offline: list[int]) -> str:
    return (f"topic {topic}: partition{'s' if len(offline) > 1 else ''} {','.join(map(str, offline))} "
            f"offline (no leader)")


_FATAL_CONSUME_ERRORS = {KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC, KafkaError._UNKNOWN_PARTITION}
#: How often `consume --group` commits what it has printed (librdkafka's auto.commit.interval.ms).
COMMIT_INTERVAL_S = 5.0
#: How long `consume --group` waits for its first assignment, if --timeout-s is shorter.
GROUP_JOIN_TIMEOUT_S = 30.0


class _PrintedOffsets:
    """`consume --group` reads at least once: a record's offset is stored after the record is
    written, and stored offsets are committed synchronously, after stdout is flushed, every
    COMMIT_INTERVAL_S, when the group takes partitions away and at exit (also on ^C; not on a
    broken pipe, whose reader may not have read everything)."""

    def __init__(self, consumer: Any, out: Any) -> None:
        self.consumer, self.out = consumer, out
        self.started = self.last_commit = time.monotonic()
        self.assigned_at: float | None = None

    def on_assign(self, _consumer: Any, _partitions: Any) -> None:
        self.assigned_at = time.monotonic()  # the idle timeout counts from here, not from the join

    def check_joined(self, group: str, timeout_s: float) -> None:
        """Joining takes FindCoordinator, the coordinator's group.initial.rebalance.delay.ms (3 s
        by default) and a SyncGroup: the wait for a first assignment has a bound of its own."""
        limit = max(timeout_s, GROUP_JOIN_TIMEOUT_S)
        if time.monotonic() - self.started > limit:
            raise UserError(f"consumer group {group!r} assigned no partitions within {duration(limit)}")

    def on_revoke(self, _consumer: Any, _partitions: Any) -> None:
        # best effort: a member already fenced off cannot commit, and the next owner of the
        # partitions then reads the records since the last commit again
        self.commit(strict=False)

    def printed(self, msg: Any) -> None:
        try:
            self.consumer.store_offsets(msg)
        except KafkaException:  # its partition was just taken away: its next owner reads it again
            pass
        if time.monotonic() - self.last_commit > COMMIT_INTERVAL_S:
            self.commit()

    def commit(self, strict: bool = True) -> None:
        self.out.flush()
        self.last_commit = time.monotonic()
        try:
            self.consumer.commit(asynchronous=False)
        except KafkaException as exc:
            err = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
            if strict and (err is None or err.code() != KafkaError._NO_OFFSET):  # _NO_OFFSET: nothing new
                raise UserError(f"commit failed: {kafka_error_text(exc)}") from None


def _print_records(consumer: Any, args: argparse.Namespace, commits: _PrintedOffsets | None,
                   interrupted: threading.Event) -> None:
    from odradek.cli_output import format_record

    count, idle_since = 0, time.monotonic()
    out = sys.stdout.buffer
    try:
        while (args.max_messages is None or count < args.max_messages) and not interrupted.is_set():
            msg = consumer.poll(0.2)
            if msg is None:
                if commits is not None:
                    if commits.assigned_at is None:  # still joining: the idle timeout starts later
                        commits.check_joined(args.group, args.timeout_s)
                        continue
                    idle_since = max(idle_since, commits.assigned_at)
                if not args.follow and time.monotonic() - idle_since > args.timeout_s:
                    break
                continue
            err = msg.error()
            if err:
                # Others (a leader moving, no group coordinator yet) librdkafka rides out.
                if err.fatal() or err.code() in _FATAL_CONSUME_ERRORS:
                    raise UserError(f"consume failed: {kafka_error_text(err)}")
                continue
            idle_since = time.monotonic()
            if args.format is not None:
                out.write(format_record(args.format, msg))
            else:
                if args.print_key:
                    out.write((msg.key() or b"") + b"\t")
                out.write((msg.value() or b"") + b"\n")
            if args.follow:
                out.flush()  # a follower is read live
            count += 1
            if commits is not None:
                commits.printed(msg)
    except KeyboardInterrupt:
        if commits is not None:
            commits.commit()
        raise
    out.flush()
    if commits is not None:
        commits.commit()
    if args.max_messages is not None and count < args.max_messages and not interrupted.is_set():
        raise UserError(f"only {count} of {plural(args.max_messages, 'record')} within {duration(args.timeout_s)} "
                        f"idle timeout (wait longer with --timeout-s or --follow)")


def cmd_groups_list(args: argparse.Namespace) -> None:
    from odradek.consumer_groups import GroupAdmin, format_list

    groups = GroupAdmin(args.bootstrap_server, args.timeout_s).list_groups()
    print(json.dumps(groups) if args.json else format_list(groups))


def cmd_groups_describe(args: argparse.Namespace) -> None:
    from odradek.consumer_groups import GroupAdmin, format_describe

    group = GroupAdmin(args.bootstrap_server, args.timeout_s).describe(args.group)
    print(json.dumps(group) if args.json else format_describe(group))


def cmd_groups_reset_offsets(args: argparse.Namespace) -> None:
    from odradek.consumer_groups import GroupAdmin, format_plan

    admin = GroupAdmin(args.bootstrap_server, args.timeout_s)
    plan = admin.plan_reset(args.group, args.topic, args.target)
    if args.execute:
        admin.execute_reset(args.group, plan)
    print(json.dumps({"group": args.group, "executed": args.execute, "offsets": plan}) if args.json
          else format_plan(plan))
    if not args.execute:
        print("dry run: nothing was committed (add --execute to commit these offsets)", file=sys.stderr)


def cmd_groups_delete(args: argparse.Namespace) -> None:
    from odradek.consumer_groups import GroupAdmin

    GroupAdmin(args.bootstrap_server, args.timeout_s).delete(args.group)
    print(f"deleted consumer group {args.group}")


def _require_broker(bootstrap: str | None, timeout: float = 10.0) -> None:
    """Fail at once, not after a command's long waits (60 s for DeleteTopics), when no broker
    of ``bootstrap`` answers: one Metadata request for no topics, to each server in turn."""
    from odradek.admin import metadata_request

    if bootstrap is not None:
        metadata_request(bootstrap, [], timeout)


def cmd_bench_produce(args: argparse.Namespace) -> None:
    from odradek.bench import run_produce_command

    _require_broker(args.bootstrap_server)
    print(run_produce_command(args.bootstrap_server, messages=args.messages, size=args.size, acks=args.acks,
                              replication_factor=args.replication_factor, partitions=args.partitions,
                              compare=args.compare, as_json=args.json, rounds=args.rounds))


def cmd_bench_spark_read(args: argparse.Namespace) -> None:
    from odradek.spark.bench import format_result, run_spark_read

    _require_broker(args.bootstrap_server)
    print(format_result(run_spark_read(args.bootstrap_server, args.records, args.size, args.partitions,
                                       args.master), args.json))


def cmd_bench_failover(args: argparse.Namespace) -> None:
    from odradek import bench_failover

    _leadership_bench(args, bench_failover.run_failover_bench, bench_failover.format_result)


def cmd_bench_shutdown(args: argparse.Namespace) -> None:
    from odradek import bench_shutdown

    _leadership_bench(args, bench_shutdown.run_shutdown_bench, bench_shutdown.format_result)


def cmd_bench_reassign(args: argparse.Namespace) -> None:
    from odradek import bench_reassign

    if args.throttle_mb_per_s <= 0:
        raise UserError("bench reassign: --throttle-mb-per-s must be positive")
    result = bench_reassign.run_reassign_bench(args.partitions, args.data_mb, args.throttle_mb_per_s,
                                               timeout=args.timeout_s, keep_dir=args.keep_dir)
    print(json.dumps(result) if args.json else bench_reassign.format_result(result))


def _leadership_bench(args: argparse.Namespace, run: Any, format_result: Any) -> None:
    """bench failover and bench shutdown: the same options, a private cluster of --brokers."""
    if args.brokers < 2:
        raise UserError(f"bench {args.bench_command}: --brokers must be at least 2")
    result = run(args.partitions, args.brokers, timeout=args.timeout_s, keep_dir=args.keep_dir,
                 rounds=args.rounds)
    print(json.dumps(result) if args.json else format_result(result))


def cmd_bench_groups(args: argparse.Namespace) -> None:
    from odradek.bench_groups import format_result, run_groups_bench

    result = run_groups_bench(args.members, args.partitions, rounds=args.rounds, keep_dir=args.keep_dir)
    print(json.dumps(result) if args.json else format_result(result))


class _ProbedNamespace(argparse.Namespace):
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
                _require_broker(value, min(state.get("timeout_s") or 10.0, 10.0))
        return value


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the console script; returns the exit status."""
    parser = build_parser()
    _autocomplete(parser)
    args = parser.parse_args(argv)
    try:
        if getattr(args, "resolve_bootstrap", False):
            _resolve_bootstrap(args)
            args.__class__ = _ProbedNamespace
        args.func(args)
    except (UserError, AdminError, ClusterError) as exc:
        message = str(exc) or type(exc).__name__
        if message.startswith("cannot reach") and "bootstrap-server" not in message and "ZooKeeper" not in message:
            message += f" (is the cluster up? give --bootstrap-server, --data-dir or ${BOOTSTRAP_ENV})"
        return _error(message)
    except KafkaException as exc:  # a client call the command did not expect to fail
        return _error(f"{kafka_error_text(exc)}")
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `odradek consume ... | head`
        return 0
    except TimeoutError:  # a future not done in time (concurrent.futures.TimeoutError is this one)
        return _error(f"odradek {' '.join(_command_path(args))}: no answer in time (is the cluster up and "
                      f"reachable? a longer --timeout-s may help)")
    except OSError as exc:  # a path that is a file, a directory not writable, a port taken
        where = f": {exc.filename}" if exc.filename else ""
        return _error(f"{exc.strerror or exc or type(exc).__name__}{where}")
    except Exception as exc:  # noqa: BLE001 - a bug; still one line (ODRADEK_TRACEBACK=1 for the whole)
        if os.environ.get("ODRADEK_TRACEBACK"):
            raise
        return _error(f"{INTERNAL_ERROR} {type(exc).__name__}: {exc} (please report it; "
                      f"ODRADEK_TRACEBACK=1 shows where)")
    return 0


def _command_path(args: argparse.Namespace) -> list[str]:
    """The subcommand names the user typed, e.g. ['topics', 'describe']."""
    return [v for k, v in vars(args).items() if k == "command" or k.endswith("_command")]


#: How main() words an exception no command expected: tests look for it as for a traceback.
INTERNAL_ERROR = "internal error:"


def _error(message: str) -> int:
    """One `odradek: error:` line; more lines (e.g. the tail of a broker log) follow as context."""
    lines = message.splitlines() or [message]
    print(f"odradek: error: {lines[0]}", file=sys.stderr)
    if len(lines) > 1:
        print("\n".join(lines[1:]), file=sys.stderr)
    return 1


def _autocomplete(parser: argparse.ArgumentParser) -> None:
    """Answer the shell's completion request (argcomplete sets _ARGCOMPLETE) and exit."""
    if "_ARGCOMPLETE" not in os.environ:
        return
    try:
        import argcomplete
    except ImportError:
        return
    argcomplete.autocomplete(parser)


if __name__ == "__main__":
    sys.exit(main())
