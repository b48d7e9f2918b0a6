"""`odradek transactions list|describe|find-hanging|abort` (Kafka's kafka-transactions.sh, with
its option names: --transactional-id, --broker-id, --max-transaction-timeout, --start-offset,
--producer-id, --producer-epoch, --coordinator-epoch); the requests are
admin/transactions_command.py's."""
from __future__ import annotations

import argparse
import json
from typing import Any, Callable

from odradek.cli.args import UserError, nonnegative_int, seconds_arg
from odradek.cli.bootstrap import add_bootstrap_options, probe_cluster

#: Kafka's names of a transaction's states (admin.transactions_command.STATES, spelled out here
#: so that building the parser imports nothing heavy)
STATES = ("Empty", "Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit", "CompleteAbort", "Dead",
          "PrepareEpochFence")


def _int_in(lo: int, hi: int, what: str) -> Callable[[str], int]:
    """An integer in [lo, hi], refused as ``expected WHAT (lo-hi)`` otherwise."""
    def convert(value: str) -> int:
        try:
            number = int(value)
        except ValueError:
            number = lo - 1
        if not lo <= number <= hi:
            raise argparse.ArgumentTypeError(f"expected {what} ({lo} to {hi}), got {value!r}")
        return number
    return convert


producer_id_arg = _int_in(0, (1 << 63) - 1, "a producer id")
producer_epoch_arg = _int_in(0, (1 << 15) - 1, "a producer epoch")
coordinator_epoch_arg = _int_in(-1, (1 << 31) - 1, "a coordinator epoch")
broker_id_arg = _int_in(0, (1 << 31) - 1, "a broker id")
minutes_arg = _int_in(0, (1 << 31) - 1, "a number of minutes")
duration_ms_arg = _int_in(0, (1 << 63) - 1, "a duration in ms")


def add_commands(sub: Any) -> None:
    """`odradek transactions` and its subcommands."""
    t = sub.add_parser("transactions", help="list, describe, find hanging and abort transactions "
                       "(Kafka's kafka-transactions.sh)")
    tsub = t.add_subparsers(dest="transactions_command", metavar="SUBCOMMAND", required=True)
    tl = tsub.add_parser("list", help="every transactional id of every broker's transaction coordinator, with "
                         "its producer id and state (ListTransactions)")
    tl.add_argument("--state", action="append", choices=STATES, default=[], metavar="STATE",
                    help=f"only ids in this state (repeatable): {', '.join(STATES)}")
    tl.add_argument("--producer-id", type=producer_id_arg, action="append", default=[], metavar="ID",
                    help="only the id of this producer id (repeatable)")
    tl.add_argument("--duration-filter", type=duration_ms_arg, metavar="MS",
                    help="only transactions running longer than MS milliseconds (ListTransactions v1: Kafka 3.8 "
                         "brokers and later)")
    tl.add_argument("--json", action="store_true", help="print [{\"transactional_id\", \"coordinator\", "
                    "\"producer_id\", \"state\"}]")
    tl.set_defaults(func=cmd_transactions_list)

    td = tsub.add_parser("describe", help="one transactional id as its coordinator holds it: producer id and "
                         "epoch, state, timeout, when its transaction started and its partitions "
                         "(FindCoordinator, DescribeTransactions)")
    which = td.add_mutually_exclusive_group(required=True)
    which.add_argument("--transactional-id", metavar="ID", help="the same as ID (kafka-transactions.sh's spelling)")
    which.add_argument("id", nargs="?", metavar="ID", help="the transactional id")
    td.add_argument("--json", action="store_true", help="print {\"transactional_id\", \"coordinator\", "
                    "\"producer_id\", \"producer_epoch\", \"state\", \"timeout_ms\", \"start_time_ms\", "
                    "\"duration_ms\", \"partitions\": [{\"topic\", \"partition\"}]}")
    td.set_defaults(func=cmd_transactions_describe)

    tf = tsub.add_parser("find-hanging", help="transactions a partition holds open that no coordinator will end, "
                         "which stop read_committed consumers there (DescribeProducers, ListTransactions, "
                         "DescribeTransactions)")
    tf.add_argument("--broker-id", "--broker", type=broker_id_arg, metavar="N",
                    help="search the partitions with a replica on broker N, as its replicas see them "
                         "(default: every partition, as its leader sees it)")
    tf.add_argument("--topic", metavar="T", help="search topic T's partitions (default: every topic's)")
    tf.add_argument("--partition", type=nonnegative_int, metavar="P", help="only partition P of --topic")
    tf.add_argument("--max-transaction-timeout", type=minutes_arg, default=15, metavar="MIN",
                    help="only transactions open longer than MIN minutes, the largest transaction timeout a "
                         "producer may have (the brokers' transaction.max.timeout.ms)")
    tf.add_argument("--json", action="store_true", help="print [{\"topic\", \"partition\", \"producer_id\", "
                    "\"producer_epoch\", \"coordinator_epoch\", \"start_offset\", \"last_timestamp\", "
                    "\"duration_min\"}]")
    tf.set_defaults(func=cmd_transactions_find_hanging, usage_error=tf.error)

    ta = tsub.add_parser("abort", help="abort a hanging transaction: its partition's leader writes an ABORT "
                         "marker (WriteTxnMarkers), and read_committed consumers move on")
    ta.add_argument("--topic", required=True, metavar="T", help="the transaction's topic")
    ta.add_argument("--partition", type=nonnegative_int, required=True, metavar="P", help="the partition")
    named = ta.add_mutually_exclusive_group(required=True)
    named.add_argument("--start-offset", type=nonnegative_int, metavar="OFFSET",
                       help="the first offset of the transaction (find-hanging's StartOffset): the producer, "
                            "its epoch and coordinator epoch are then read from the partition's leader")
    named.add_argument("--producer-id", type=producer_id_arg, metavar="ID", help="instead of --start-offset: "
                       "the producer (with --producer-epoch and --coordinator-epoch)")
    ta.add_argument("--producer-epoch", type=producer_epoch_arg, metavar="E", help="the producer's epoch")
    ta.add_argument("--coordinator-epoch", type=coordinator_epoch_arg, metavar="C",
                    help="the coordinator epoch of the producer's last marker there (-1: none, sent as 0)")
    ta.add_argument("--json", action="store_true", help="print {\"topic\", \"partition\", \"producer_id\", "
                    "\"producer_epoch\", \"coordinator_epoch\"}")
    ta.set_defaults(func=cmd_transactions_abort, usage_error=ta.error)
    for parser in (tl, td, tf, ta):
        add_bootstrap_options(parser)
        parser.add_argument("--timeout-s", type=seconds_arg, default=10.0, help="how long to wait for each request")


def _admin(args: argparse.Namespace) -> Any:
    from odradek.admin.transactions_command import TransactionsAdmin

    probe_cluster(args)
    return TransactionsAdmin(args.bootstrap_server, args.timeout_s)


def cmd_transactions_list(args: argparse.Namespace) -> None:
    """Every answer, then one error line if a broker could not answer (exit 1)."""
    from odradek.admin.transactions_command import format_list

    listed, errors = _admin(args).list_transactions(args.state, args.producer_id, args.duration_filter)
    print(json.dumps(listed) if args.json else format_list(listed))
    if errors:
        raise UserError(f"transactions list: {'; '.join(errors)}")


def cmd_transactions_describe(args: argparse.Namespace) -> None:
    from odradek.admin.transactions_command import format_describe

    transactional_id = args.id if args.id is not None else args.transactional_id
    if not transactional_id:
        raise UserError("transactions describe: the transactional id is empty")
    described = _admin(args).describe(transactional_id)
    print(json.dumps(described) if args.json else format_describe(described))


def cmd_transactions_find_hanging(args: argparse.Namespace) -> None:
    """The hanging transactions found, then one error line for partitions that could not be
    described (exit 1): the others are still worth seeing. Kafka's tool insists on --topic or
    --broker-id; without either this searches every partition of the cluster."""
    from odradek.admin.transactions_command import format_hanging

    if args.partition is not None and args.topic is None:
        args.usage_error("--partition needs --topic")
    hanging, failed = _admin(args).find_hanging(args.topic, args.partition, args.broker_id,
                                                args.max_transaction_timeout * 60_000)
    print(json.dumps(hanging) if args.json else format_hanging(hanging))
    if failed:
        raise UserError(f"transactions find-hanging: {len(failed)} partitions not searched: {'; '.join(failed)}"
                        if len(failed) > 1 else f"transactions find-hanging: not searched: {failed[0]}")


def cmd_transactions_abort(args: argparse.Namespace) -> None:
    """The transaction named by --start-offset (argparse makes it that or --producer-id), or by
    the producer id, epoch and coordinator epoch together."""
    manual = (args.producer_id, args.producer_epoch, args.coordinator_epoch)
    if args.start_offset is not None and any(v is not None for v in manual):
        args.usage_error("--producer-epoch and --coordinator-epoch go with --producer-id, not --start-offset")
    if args.start_offset is None:
        missing = [name for name, v in zip(("--producer-epoch", "--coordinator-epoch"), manual[1:]) if v is None]
        if missing:
            args.usage_error(f"--producer-id needs {' and '.join(missing)} too")
    spec = _admin(args).abort(args.topic, args.partition, args.start_offset, *manual)
    if args.json:
        print(json.dumps(spec))
    else:
        print(f"aborted the transaction of producer {spec['producer_id']} (epoch {spec['producer_epoch']}, "
              f"coordinator epoch {spec['coordinator_epoch']}) on {spec['topic']}-{spec['partition']}: "
              f"its leader wrote an ABORT marker")
