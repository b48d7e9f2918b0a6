"""`odradek log-dirs describe` (Kafka's kafka-log-dirs.sh): each broker's log dir and the size on
disk of every partition replica in it; the DescribeLogDirs requests are
admin/log_dirs_command.py's."""
from __future__ import annotations

import argparse
import json
from typing import Any

from odradek.cli.args import UserError, seconds_arg
from odradek.cli.bootstrap import add_bootstrap_options, probe_cluster


def _broker_list_arg(value: str) -> list[int]:
    """kafka-log-dirs.sh's --broker-list: broker ids joined by commas, e.g. `1,2`."""
    try:
        ids = [int(part) for part in value.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected broker ids joined by commas, e.g. 1,2; got {value!r}") from None
    if not ids or any(i < 0 for i in ids):
        raise argparse.ArgumentTypeError(f"expected broker ids (0 or more) joined by commas, e.g. 1,2; got {value!r}")
    return ids


def _topic_list_arg(value: str) -> list[str]:
    """kafka-log-dirs.sh's --topic-list: topic names joined by commas."""
    topics = [part.strip() for part in value.split(",") if part.strip()]
    if not topics:
        raise argparse.ArgumentTypeError(f"expected topic names joined by commas, e.g. a,b; got {value!r}")
    return topics


def add_commands(sub: Any) -> None:
    """`odradek log-dirs describe`."""
    ld = sub.add_parser("log-dirs", help="the brokers' log dirs and the size of each partition replica on disk "
                        "(Kafka's kafka-log-dirs.sh)")
    lsub = ld.add_subparsers(dest="log_dirs_command", metavar="SUBCOMMAND", required=True)
    d = lsub.add_parser("describe", help="per broker: its log dir, and per partition replica its size on disk "
                        "and offset lag (DescribeLogDirs)")
    d.add_argument("--broker-list", type=_broker_list_arg, metavar="ID,ID", help="only these brokers "
                   "(default: every live broker)")
    d.add_argument("--topic-list", type=_topic_list_arg, metavar="TOPIC,TOPIC", help="only these topics' "
                   "partitions (default: every topic)")
    d.add_argument("--json", action="store_true", help="print kafka-log-dirs.sh's JSON: {\"version\": 1, "
                   "\"brokers\": [{\"broker\", \"logDirs\": [{\"logDir\", \"error\", \"partitions\": [{\"partition\", "
                   "\"size\", \"offsetLag\", \"isFuture\"}], \"totalBytes\", \"usableBytes\"}]}]}")
    d.add_argument("--timeout-s", type=seconds_arg, default=10.0, help="how long to wait for each broker")
    add_bootstrap_options(d)
    d.set_defaults(func=cmd_log_dirs_describe)


def cmd_log_dirs_describe(args: argparse.Namespace) -> None:
    """Print every answer, then fail with one line if a broker could not answer: the other
    brokers' sizes are still worth seeing."""
    from odradek.admin.log_dirs_command import describe, failed_brokers, format_log_dirs

    probe_cluster(args)
    described = describe(args.bootstrap_server, args.broker_list, args.topic_list, args.timeout_s)
    print(json.dumps(described) if args.json else format_log_dirs(described, args.topic_list))
    failed = failed_brokers(described)
    if failed:
        raise UserError(f"log-dirs describe: {'; '.join(failed)}")
