"""`odradek produce` and `odradek consume`: stdin lines as records, and records as lines (as
kafka-console-producer/consumer and kcat do), over librdkafka (confluent_kafka).

`produce` sends through odradek.client's OrderedProducer, which hands a plain topic to a plain
confluent-kafka Producer and partitions a topic with enable.ordered.delivery=true by KIP-253's
linear hashing, re-sending in order what a change of its partition count refused: one path for
both, and a keyed line's order is kept across `topics alter --partitions`."""
from __future__ import annotations

import argparse
import functools
import signal
import sys
import threading
import time
from typing import TYPE_CHECKING, Any

from confluent_kafka import KafkaError, KafkaException

from odradek.admin.admin_client import kafka_error_text, quiet_logger
from odradek.cli.args import (
    UserError,
    add_topic_argument,
    keyvalue_arg,
    nonnegative_int,
    offset_start_arg,
    positive_int,
    record_format_arg,
    seconds_arg,
    topic_of,
)
from odradek.cli.bootstrap import add_bootstrap_options, probe_cluster
from odradek.cli.output import duration, plural
from odradek.client import client_config

if TYPE_CHECKING:
    from odradek.client.ordered_producer import OrderedProducer


def add_commands(sub: Any) -> None:
    """produce and consume."""
    pr = sub.add_parser("produce", help="send stdin lines as records")
    add_topic_argument(pr, "kafka-console-producer.sh")
    pr.add_argument("--key-separator", metavar="SEP", help="split each line into key SEP value")
    pr.add_argument("--acks", choices=("all", "1", "0"), default="all", help="how many replicas must have "
                    "a record before it counts as sent")
    pr.add_argument("--partition", type=nonnegative_int, metavar="P", help="send every record to partition P "
                    "(default: by key hash, keyless records spread)")
    pr.add_argument("--header", type=keyvalue_arg, action="append", default=[], metavar="KEY=VALUE",
                    help="add this header to every record (repeatable)")
    pr.add_argument("--timeout-s", type=seconds_arg, default=30.0, help="give up on a record after this long")
    pr.set_defaults(func=cmd_produce)

    co = sub.add_parser("consume", help="print records as lines")
    add_topic_argument(co, "kafka-console-consumer.sh")
    co.add_argument("--from-beginning", action="store_true", help="start at the log start, not the end "
                    "(same as --offset beginning)")
    co.add_argument("--partition", type=nonnegative_int, action="append", metavar="P",
                    help="read only partition P (repeatable; default: every partition)")
    co.add_argument("--offset", type=offset_start_arg, metavar="beginning|end|N",
                    help="where to start in each partition read: the log start, the end (the default), "
                         "offset N, or with -N N records before the end")
    co.add_argument("--max-messages", type=positive_int, metavar="N",
                    help="stop after N records; exit 1 if fewer arrive before the idle timeout")
    co.add_argument("-f", "--follow", action="store_true", help="never stop for lack of records: wait for "
                    "new ones until Ctrl-C (no idle timeout)")
    co.add_argument("--timeout-s", type=seconds_arg, default=10.0, help="exit after this long without a record "
                    "(unless --follow)")
    co.add_argument("--format", type=record_format_arg, metavar="FMT", help="print each record in kcat's -f format: "
                    "%%t topic, %%p partition, %%o offset, %%k key, %%v value, %%T timestamp (ms), %%h headers "
                    "(k=v,...), %%K/%%S key/value length, \\n \\t; e.g. '%%p:%%o %%k=%%v\\n'")
    co.add_argument("--group", metavar="G", help="subscribe as a member of consumer group G, starting at its "
                    "committed offsets, and commit what was printed")
    co.add_argument("--print-key", action="store_true", help="print key<TAB>value (without --format)")
    co.add_argument("--isolation-level", choices=("read_committed", "read_uncommitted"), default="read_committed",
                    help="read_committed: only committed transactions' records, up to the last stable offset; "
                         "read_uncommitted: every record up to the high watermark, aborted ones too")
    co.set_defaults(func=cmd_consume)
    for parser in (pr, co):
        add_bootstrap_options(parser)


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
    from odradek.client.ordered_producer import OrderedProducer

    topic_of(args)
    probe_cluster(args)
    try:
        producer = OrderedProducer(client_config.librdkafka(
            {"bootstrap.servers": args.bootstrap_server, "acks": args.acks, "linger.ms": 5,
             "message.timeout.ms": int(args.timeout_s * 1000), "logger": quiet_logger(),
             "message.max.bytes": CLIENT_MESSAGE_MAX_BYTES}))
    except (KafkaException, ValueError) as exc:
        raise UserError(f"cannot produce to {args.bootstrap_server}: {kafka_error_text(exc)}") from None
    try:
        _produce_lines(args, producer)
    finally:
        producer.close()


def _produce_lines(args: argparse.Namespace, producer: OrderedProducer) -> None:
    """stdin's lines to the topic through ``producer`` (an OrderedProducer), one record a line."""
    meta = _check_topic(producer, args.bootstrap_server, args.topic, args.timeout_s)
    if args.partition is not None and args.partition not in meta.partitions:
        raise UserError(f"topic {args.topic} has no partition {args.partition} (it has "
                        f"{plural(len(meta.partitions), 'partition')}, 0-{len(meta.partitions) - 1})")
    if args.partition is not None:
        _refuse_partition_of_ordered_topic(args)
    extra: dict[str, Any] = {} if args.partition is None else {"partition": args.partition}
    if args.header:
        extra["headers"] = [(k, v.encode()) for k, v in args.header]
    failures: list[tuple[int, Any, Any]] = []  # (record number, error, message)

    def on_delivery(number: int, err: Any, msg: Any) -> None:
        if err is not None:
            failures.append((number, err, msg))

    sent = 0
    for line in sys.stdin.buffer:
        value = line.rstrip(b"\r\n")
        key = None
        if args.key_separator is not None:
            k, sep, v = value.partition(args.key_separator.encode())
            key, value = (k, v) if sep else (None, value)
        while True:
            try:
                producer.produce(args.topic, value, key, on_delivery=functools.partial(on_delivery, sent + 1),
                                 **extra)
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
        first = ""
        if failures:
            number, err, msg = failures[0]
            first = f": {kafka_error_text(err)}{_delivery_hint(args, number, err, msg, failures)}"
        raise UserError(f"{len(failures) + left} of {plural(sent, 'record')} not delivered to {args.topic}{first}")
    print(f"produced {plural(sent, 'record')} to {args.topic}", file=sys.stderr)


def _ordered_group_consumer(args: argparse.Namespace, conf: dict[str, Any]) -> Any:
    """A group member for a topic with ordered delivery (KIP-253): odradek's OrderedConsumer,
    which delivers each key in order while the topic grows and shrinks; None for other topics."""
    from odradek.admin.errors import AdminError
    from odradek.admin.topic_command import ordered_counts
    from odradek.client.ordered_consumer import OrderedConsumer

    try:
        counts = ordered_counts(args.bootstrap_server, [args.topic], args.timeout_s)[args.topic]
    except AdminError as exc:
        raise UserError(str(exc)) from None
    return OrderedConsumer(conf) if counts.ordered else None


def _refuse_partition_of_ordered_topic(args: argparse.Namespace) -> None:
    """--partition on a topic with ordered delivery (KIP-253): refused before any line is read,
    since each key's partition is decided by linear hashing over the topic's counts (a record
    sent elsewhere would be refused by the partition's leader, or break its key's order)."""
    from odradek.admin.errors import AdminError
    from odradek.admin.topic_command import ordered_counts

    try:
        counts = ordered_counts(args.bootstrap_server, [args.topic], args.timeout_s)[args.topic]
    except AdminError as exc:
        raise UserError(str(exc)) from None
    if counts.ordered:
        raise UserError(f"topic {args.topic} has ordered delivery (enable.ordered.delivery=true): each record's "
                        f"partition is decided by its key over the topic's {counts.undeleted_partition_count} "
                        f"undeleted partitions, so --partition cannot be given (leave it out; use "
                        f"--key-separator to send keys)")


#: The producer's message.max.bytes: the broker decides what is too large (the topic's
#: max.message.bytes, answered MESSAGE_TOO_LARGE), so the client's own limit (librdkafka's
#: default 1,000,000) must not come first. 100,000,000 keeps a request of one such record under
#: the broker's socket.request.max.bytes (104,857,600, which closes the connection instead of
#: answering) and far below librdkafka's maximum of 1,000,000,000.
CLIENT_MESSAGE_MAX_BYTES = 100_000_000


def _produce_hint(exc: KafkaException) -> str:
    """What to do about an error the producer raises before sending."""
    err = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
    if err is not None and err.code() == KafkaError.MSG_SIZE_TOO_LARGE:
        return (f" (the producer sends records up to {CLIENT_MESSAGE_MAX_BYTES:,} bytes, under the broker's "
                f"socket.request.max.bytes; split the line)")
    return ""


def _delivery_hint(args: argparse.Namespace, number: int, err: Any, msg: Any,
                   failures: list[tuple[int, Any, Any]]) -> str:
    """Why the first record failed and what to do about it: the broker's size limit, or a
    delivery timeout behind which librdkafka hid the real cause (it retries NOT_ENOUGH_REPLICAS
    and a missing leader until message.timeout.ms, then reports only _MSG_TIMED_OUT)."""
    if err.code() == KafkaError.MSG_SIZE_TOO_LARGE:  # the broker's MESSAGE_TOO_LARGE
        size = len(msg.value() or b"") + len(msg.key() or b"")
        return (f" (record {number}, {size:,} bytes, is over topic {args.topic}'s max.message.bytes: raise it "
                f"with `odradek topics alter {args.topic} --config max.message.bytes=N`)")
    if err.code() != KafkaError._MSG_TIMED_OUT:
        return ""
    from odradek.admin.admin_client import filter_partitions
    from odradek.admin.config_command import describe_topics_with_configs
    from odradek.admin.errors import AdminError

    wanted = {m.partition() for _, e, m in failures if e.code() == KafkaError._MSG_TIMED_OUT}
    try:
        [topic] = filter_partitions(describe_topics_with_configs(args.bootstrap_server, [args.topic], 5.0),
                                    under_replicated=False, offline=True, under_min_isr=args.acks == "all",
                                    keep_empty=True)
    except (AdminError, KafkaException, OSError, ValueError):
        return ""
    min_isr = topic["min_insync_replicas"]
    offline, short = [], []
    for p in topic["partitions"]:
        if wanted - {-1} and p["partition"] not in wanted:
            continue
        if p["leader"] < 0:
            offline.append(f"partition {p['partition']} has no leader")
        else:
            short.append(f"partition {p['partition']} has {plural(len(p['isr']), 'in-sync replica')}, "
                         f"min.insync.replicas is {min_isr}")
    if not offline and not short:
        return ""
    found = offline + short
    more = f" (+{len(found) - 2} more)" if len(found) > 2 else ""
    todo = "start the stopped brokers" + (", or produce with --acks 1" if short else "")
    return f"; {'; '.join(found[:2])}{more}: {todo}"


def cmd_consume(args: argparse.Namespace) -> None:
    from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, Consumer, TopicPartition

    topic_of(args)
    if args.group and (args.partition or args.offset is not None):
        raise UserError("consume: --partition and --offset read without a group; a --group member reads "
                        "from the group's committed offsets (move them with `odradek groups reset-offsets`)")
    if args.from_beginning and args.offset is not None:
        raise UserError("consume: give --from-beginning or --offset, not both")
    start_at: str | int = "beginning" if args.from_beginning else args.offset if args.offset is not None else "end"
    probe_cluster(args)
    conf = {"bootstrap.servers": args.bootstrap_server, "enable.auto.commit": False,
            "enable.auto.offset.store": False, "logger": quiet_logger(),
            "auto.offset.reset": "earliest" if start_at == "beginning" else "latest",
            "isolation.level": args.isolation_level,
            # a response may carry one batch as large as a producer sends (KIP-74: a batch over
            # fetch.max.bytes is still returned when it comes first); librdkafka's default
            # 100,000,000 would refuse it with its protocol overhead
            "receive.message.max.bytes": 2 * CLIENT_MESSAGE_MAX_BYTES}
    # librdkafka insists on a group.id even for assign(); nothing is committed without --group.
    conf["group.id"] = args.group or "odradek-console"
    conf = client_config.librdkafka(conf)
    consumer = _ordered_group_consumer(args, conf) if args.group else None
    if consumer is None:
        consumer = Consumer(conf)
    commits = None
    # ^C only sets a flag the read loop checks: a KeyboardInterrupt raised wherever the signal
    # lands (inside a rebalance callback, a synchronous commit, librdkafka's close) can leave
    # `consume --group` hanging in close()
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
            if isinstance(start_at, str):  # "beginning" or "end" (offset_start_arg)
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
                raise UserError(f"{_offline_text(args.topic, offline)}: "
                                f"{'their records were' if len(offline) > 1 else 'its records were'} not read "
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
#: Commit errors of a group in the middle of a rebalance: the member's next commit, after it
#: rejoined, carries the offsets (librdkafka does not mark them retriable).
_REBALANCE_ERRORS = {KafkaError.REBALANCE_IN_PROGRESS, KafkaError.ILLEGAL_GENERATION, KafkaError.UNKNOWN_MEMBER_ID}
#: How long `consume --group` waits for its first assignment, if --timeout-s is shorter.
GROUP_JOIN_TIMEOUT_S = 30.0


class _PrintedOffsets:
    """`consume --group` reads at least once: a record's offset is stored after the record is
    written, and stored offsets are committed synchronously, after stdout is flushed, every
    COMMIT_INTERVAL_S, when the group takes partitions away and at exit (also on ^C; not on a
    broken pipe, whose reader may not have read everything).

    The timer runs from the read loop whether records arrive or not (due()): a member that
    printed a burst and then went idle must not leave it uncommitted, or the group's lag
    (`groups describe`, kafka_consumergroup_lag) counts records printed long ago. Committing
    by hand rather than with librdkafka's enable.auto.commit keeps the flush of stdout before
    each commit, so no offset is committed for a record still in a buffer."""

    def __init__(self, consumer: Any, out: Any) -> None:
        self.consumer, self.out = consumer, out
        self.started = self.last_commit = time.monotonic()
        self.assigned_at: float | None = None
        self.uncommitted = False  # offsets stored since the last commit that succeeded

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
            self.uncommitted = True
        except KafkaException:  # its partition was just taken away: its next owner reads it again
            pass
        self.due()

    def due(self) -> None:
        """Commit if printed offsets wait and COMMIT_INTERVAL_S has passed since the last
        commit; called after each record and each empty poll. A retriable failure (the
        coordinator moving, a rebalance under way) is tried again at the next interval."""
        if self.uncommitted and time.monotonic() - self.last_commit > COMMIT_INTERVAL_S:
            self.commit(retry_later=True)

    def commit(self, strict: bool = True, retry_later: bool = False) -> None:
        self.out.flush()
        self.last_commit = time.monotonic()
        try:
            self.consumer.commit(asynchronous=False)
        except KafkaException as exc:
            err = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
            if err is not None and err.code() == KafkaError._NO_OFFSET:  # nothing new to commit
                self.uncommitted = False
                return
            if retry_later and err is not None and (err.retriable() or err.code() in _REBALANCE_ERRORS):
                return
            if strict:
                raise UserError(f"commit failed: {kafka_error_text(exc)}") from None
            return
        self.uncommitted = False


def _print_records(consumer: Any, args: argparse.Namespace, commits: _PrintedOffsets | None,
                   interrupted: threading.Event) -> None:
    from odradek.cli.output import format_record

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
                    commits.due()  # idle: what was printed is committed all the same
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
