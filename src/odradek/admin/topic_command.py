"""`odradek topics delete`, `odradek topics alter --partitions` and the choice of topics
`topics describe` shows: Kafka's TopicCommand (kafka-topics.sh --delete / --alter --partitions,
--topic as a pattern, --exclude-internal, --if-exists) over the Kafka protocol only
(DeleteTopics, CreatePartitions, Metadata), so they work against Apache Kafka too.

A deletion is asynchronous in Kafka (the controller deletes every replica, and waits for
brokers that are down). DeleteTopics is given the whole timeout: odradek answers it once the
deletion completed (Kafka once the broker's metadata dropped the topic), REQUEST_TIMED_OUT
otherwise; ``delete_topics`` then polls Metadata until no broker it reaches lists the topic,
and names the topics whose deletion did not complete in time.

Topics with enable.ordered.delivery=true (KIP-253) can also lose partitions: `alter
--partitions` with a lower count is a deletion (the brokers mark the partitions past it; they
take no new records and go once empty), and `describe` adds each ordered topic's counts and
partition tree. Both read the counts with odradek's PartitionLeaderEpochsForPartitions; against
a broker without it (Apache Kafka) every topic is plain and the commands are kafka-topics.sh's.
"""
from __future__ import annotations

import concurrent.futures
import re
import time
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import NewPartitions

from odradek.admin.admin_client import (
    MAX_REQUEST_TIMEOUT_S,
    ProgressFn,
    ZooKeeperProgress,
    admin_client,
    kafka_error_text,
    metadata_request,
    partition_offsets,
    timed_out,
    zookeeper_progress,
)
from odradek.admin.errors import AdminError
from odradek.cli.output import duration
from odradek.client.ordered_metadata import OrderedMetadataClient, OrderedMetadataError, parse_bootstrap
from odradek.common.internal_topics import is_internal
from odradek.common.linear_hashing import blocked_by_deleted, creation_blocker, parent_of
from odradek.protocol.errors import ErrorCode
from odradek.protocol.ordered_delivery_api import TopicPartitionCounts


@dataclass
class DeleteOutcome:
    """What `delete_topics` did with each topic it was given, each list in the order given."""

    deleted: list[str] = field(default_factory=list)
    #: topics that did not exist (nothing to delete: --if-exists makes that no error)
    missing: list[str] = field(default_factory=list)
    #: topic -> why it was not deleted: refused, or asked for but not complete in time
    failed: dict[str, str] = field(default_factory=dict)


class TopicsNotDeleted(AdminError):
    """Some topics of a `delete_topics` were not deleted: the message names each and why, and
    ``outcome`` has what happened to every topic (the others may well be deleted)."""

    def __init__(self, outcome: DeleteOutcome, if_exists: bool) -> None:
        errors = [] if if_exists or not outcome.missing else [no_such_topics(outcome.missing)]
        super().__init__("; ".join(errors + list(outcome.failed.values())))
        self.outcome = outcome


def no_such_topics(missing: list[str]) -> str:
    """The error for requested topics (or patterns) that name no topic."""
    shown = ", ".join(repr(m) for m in missing)
    return (f"topic{'s' if len(missing) > 1 else ''} {shown} "
            f"{'do' if len(missing) > 1 else 'does'} not exist (odradek topics list shows the topics)")


def internal_topic_refusal(name: str, what: str) -> str:
    """Why ``what`` (an operation) is refused on the internal topic ``name``."""
    return (f"topic {name} is an internal topic (the brokers keep consumer groups' committed offsets "
            f"and transactions' state in Kafka's internal topics): {what}")


def delete_topics(bootstrap: str, names: list[str], timeout: float = 60.0, progress: ProgressFn | None = None,
                  zookeeper: str | None = None, if_exists: bool = False) -> DeleteOutcome:
    """Delete ``names`` and wait until no broker ``bootstrap`` reaches lists them; each topic's
    outcome. TopicsNotDeleted if a topic does not exist (unless ``if_exists``), was refused or
    is not gone in time: it carries every topic's outcome, so one that cannot be deleted never
    hides that the others were (a plain AdminError only when no broker answered at all).
    Internal topics are refused here without a request, as kafka-topics.sh refused them:
    Apache Kafka's brokers would delete them (odradek's refuse).
    ``progress`` is told how many of the topics are deleted: where ``zookeeper`` is given,
    those whose deletion completed (admin.ZooKeeperProgress), else those the brokers no
    longer list, which they stop doing when the deletion starts; so without ZooKeeper the
    count stays below the total until DeleteTopics is answered."""
    outcome = DeleteOutcome()
    unique = list(dict.fromkeys(names))
    for name in unique:
        if is_internal(name):
            outcome.failed[name] = internal_topic_refusal(name, "it cannot be deleted")
    asked = [n for n in unique if n not in outcome.failed]
    if not asked:
        raise TopicsNotDeleted(outcome, if_exists)
    deadline = time.monotonic() + timeout
    request_timeout = max(1.0, min(timeout, MAX_REQUEST_TIMEOUT_S))
    admin = admin_client(bootstrap, request_timeout=request_timeout)
    futures = admin.delete_topics(asked, request_timeout=request_timeout, operation_timeout=request_timeout)
    unfinished: list[str] = []
    if progress is not None:
        zk = zookeeper_progress(zookeeper)
        try:
            _report_while_pending(bootstrap, list(futures), futures.values(), request_timeout + 5, progress, zk)
        finally:
            if zk is not None:
                zk.close()
    for name, future in futures.items():
        try:
            future.result(timeout=request_timeout + 5)
        except KafkaException as exc:
            err = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
            if err is not None and err.code() == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                outcome.missing.append(name)
            elif not timed_out(exc):
                outcome.failed[name] = f"{name}: {kafka_error_text(exc)}"
            else:
                unfinished.append(name)  # asked, maybe (the wait below tells whether at all)
        except TimeoutError:
            unfinished.append(name)
    waiting = [n for n in asked if n not in outcome.failed and n not in outcome.missing]
    still = _wait_until_gone(bootstrap, waiting, deadline, progress, len(futures))
    still += [n for n in unfinished if n not in still]
    for name in still:
        outcome.failed[name] = (f"deletion of {name} asked for but not complete after {duration(timeout)} "
                                f"(a broker holding a replica may be down: it completes when the broker is back)")
    outcome.deleted = [n for n in waiting if n not in still]
    outcome.missing.sort(key=unique.index)
    outcome.failed = {n: outcome.failed[n] for n in unique if n in outcome.failed}
    if outcome.failed or (outcome.missing and not if_exists):
        raise TopicsNotDeleted(outcome, if_exists)
    return outcome


def _report_while_pending(bootstrap: str, names: list[str], futures: Any, timeout: float,
                          progress: ProgressFn, zk: ZooKeeperProgress | None) -> None:
    """While DeleteTopics is unanswered, count the topics deleted, twice a second."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        deleted = zk.deleted(names) if zk is not None else None
        try:
            if deleted is None:
                deleted = len(names) - len(_still_listed(bootstrap, names, 5.0))
            progress(min(deleted, len(names) - 1), len(names))  # the total once DeleteTopics is answered
        except AdminError:
            pass
        if not concurrent.futures.wait(list(futures), timeout=0.5).not_done:
            return


def _still_listed(bootstrap: str, names: list[str], timeout: float) -> list[str]:
    known = metadata_request(bootstrap, names, timeout)
    return [t.name for t in known.topics if t.error_code != ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]


def _wait_until_gone(bootstrap: str, names: list[str], deadline: float, progress: ProgressFn | None = None,
                     total: int = 0) -> list[str]:
    """The topics still listed at the deadline; AdminError if no broker ever answered."""
    pending = list(names)
    unreachable: AdminError | None = None
    reached = False
    while pending:
        try:
            pending = _still_listed(bootstrap, pending, max(1.0, deadline - time.monotonic()))
            reached = True
            if progress is not None:
                progress(total - len(pending), total)
        except AdminError as exc:
            unreachable = exc  # a broker restarting meanwhile: asked again until the deadline
        if not pending:
            return pending
        if time.monotonic() > deadline:
            if not reached and unreachable is not None:
                raise unreachable
            return pending
        time.sleep(0.1)
    return pending


def create_partitions(bootstrap: str, name: str, count: int, timeout: float = 30.0) -> None:
    """Grow ``name`` to ``count`` partitions (CreatePartitions), or for a topic with ordered
    delivery lower its undeleted count to ``count`` (KIP-253); AdminError with Kafka's error
    (INVALID_PARTITIONS for a count that does not grow a plain topic, UNKNOWN_TOPIC_OR_PARTITION...).
    An internal topic is refused without a request, as kafka-topics.sh refuses it: a group's
    coordinator is chosen by the partition count of __consumer_offsets."""
    if is_internal(name):
        raise AdminError(internal_topic_refusal(name, "its partition count cannot change (each consumer "
                                                "group's coordinator is chosen by it)"))
    request_timeout = max(1.0, min(timeout, MAX_REQUEST_TIMEOUT_S))
    admin = admin_client(bootstrap, request_timeout=request_timeout)
    future = admin.create_partitions([NewPartitions(name, count)], request_timeout=request_timeout,
                                     operation_timeout=request_timeout)[name]
    try:
        future.result(timeout=request_timeout + 5)
    except KafkaException as exc:
        raise AdminError(kafka_error_text(exc)) from None
    except TimeoutError:
        raise AdminError(f"CreatePartitions of {name!r} got no answer within {duration(timeout)}") from None


@dataclass(frozen=True)
class PartitionCountChange:
    """What `alter --partitions` did to a topic's count, for its progress line."""

    name: str
    count: int
    #: enable.ordered.delivery=true: the counts below are KIP-253's, read before the change
    ordered: bool = False
    initial: int = 0
    #: the undeleted partitions before the change (ordered topics only)
    before: int = 0

    @property
    def deletion(self) -> bool:
        return self.ordered and self.count < self.before

    def marked(self) -> list[int]:
        """The partitions a deletion marked: the undeleted ones at or past the new count."""
        return list(range(self.count, self.before)) if self.deletion else []

    def sources(self) -> dict[int, int]:
        """Each partition a growth of an ordered topic created -> the one partition whose keys
        it takes (linear hashing: its nearest ancestor among the partitions before)."""
        if not self.ordered or self.count <= self.before:
            return {}
        existing = range(self.before)
        return {p: creation_blocker(p, self.initial, existing) for p in range(self.before, self.count)}


def ordered_counts(bootstrap: str, names: list[str], timeout: float = 10.0) -> dict[str, TopicPartitionCounts]:
    """KIP-253's counts of each topic (``ordered`` False for a plain topic, for one that does not
    exist, and for every topic of a broker without KIP-253); AdminError if no broker answers."""
    client = OrderedMetadataClient(parse_bootstrap(bootstrap), "odradek-topics", timeout)
    try:
        return client.counts(names)
    except OrderedMetadataError as exc:
        raise AdminError(f"cannot read the partition counts of {', '.join(names)}: {exc}") from None
    finally:
        client.close()


def alter_partition_count(bootstrap: str, name: str, count: int, timeout: float = 30.0) -> PartitionCountChange:
    """`topics alter --partitions`: CreatePartitions with ``count``, which grows any topic and
    shrinks one with ordered delivery (KIP-253's deletion; the broker refuses it for any other
    topic, as Kafka does). The counts are read first, for the progress line only: the broker
    decides on what ZooKeeper holds when it answers."""
    # an internal topic is refused by create_partitions without any request
    counts = TopicPartitionCounts() if is_internal(name) else ordered_counts(bootstrap, [name], min(timeout, 10.0))[name]
    create_partitions(bootstrap, name, count, timeout)
    if not counts.ordered:
        return PartitionCountChange(name, count)
    return PartitionCountChange(name, count, True, counts.initial_partition_count,
                                counts.undeleted_partition_count)


def add_ordered_delivery(bootstrap: str, topics: list[dict[str, Any]], timeout: float = 10.0) -> None:
    """Add KIP-253's view to each ordered topic of ``topics`` (describe_topics' dicts, their
    partitions perhaps filtered): "ordered_delivery" {"initial_partition_count",
    "undeleted_partition_count"}, and per partition "parent" (the partition whose keys it took
    when an expansion created it; None for an initial partition) and "marked_for_deletion"; a
    marked partition also gets "records_left" (log end - log start offset, ListOffsets; None if
    its leader cannot answer) and "blocks" (the undeleted partitions whose consumers wait until
    it is read to its end: linear hashing's owner of its keys now). Plain topics are left as
    they are: one request for the counts, and ListOffsets only for marked partitions."""
    if not topics:
        return
    counts = ordered_counts(bootstrap, [t["name"] for t in topics], timeout)
    ordered = [t for t in topics if counts[t["name"]].ordered]
    marked: list[tuple[str, int]] = []
    for topic in ordered:
        found = counts[topic["name"]]
        initial, undeleted = found.initial_partition_count, found.undeleted_partition_count
        topic["ordered_delivery"] = {"initial_partition_count": initial, "undeleted_partition_count": undeleted}
        for p in topic["partitions"]:
            index = p["partition"]
            p["parent"] = parent_of(index, initial)
            p["marked_for_deletion"] = index >= undeleted
            if index >= undeleted:
                p["blocks"] = list(blocked_by_deleted(index, initial, undeleted))
                marked.append((topic["name"], index))
    offsets = partition_offsets(bootstrap, marked, timeout) if marked else {}
    for topic in ordered:
        for p in topic["partitions"]:
            if p["marked_for_deletion"]:
                start, end = p.get("log_start_offset"), p.get("high_watermark")
                if start is None or end is None:
                    start, end = offsets.get((topic["name"], p["partition"]), (None, None))
                p["records_left"] = None if start is None or end is None else max(end - start, 0)


def format_ordered_delivery(topic: dict[str, Any]) -> list[str]:
    """The lines `topics describe` prints under the table for an ordered topic (add_ordered_delivery's
    fields): its counts, then each partition created by an expansion or marked for deletion."""
    counts = topic["ordered_delivery"]
    lines = [f"Ordered delivery of topic {topic['name']} (KIP-253): initial_partition_count "
             f"{counts['initial_partition_count']}, undeleted_partition_count {counts['undeleted_partition_count']}"]
    for p in topic["partitions"]:
        said = []
        if p["parent"] is not None:
            said.append(f"parent {p['parent']}")
        if p["marked_for_deletion"]:
            left = p["records_left"]
            records = "records left unknown (no leader)" if left is None else (
                f"{left} record{'' if left == 1 else 's'} left")
            blocks = ", ".join(map(str, p["blocks"]))
            said.append(f"marked for deletion, {records}; blocks partition{'s' if len(p['blocks']) > 1 else ''} "
                        f"{blocks} until read to its end")
        if said:
            lines.append(f"  partition {p['partition']}: {'; '.join(said)}")
    return lines


def topic_exists(bootstrap: str, name: str, timeout: float = 10.0) -> bool:
    """Whether the brokers' metadata lists ``name`` (kafka-topics.sh's --if-exists asks first)."""
    response = metadata_request(bootstrap, [name], timeout)
    return any(t.name == name and t.error_code == 0 for t in response.topics)


#: the characters of a topic name (topic_admin's rule): a requested name made only of them is
#: taken as a name, anything else as a regular expression
_NAME_CHARS = re.compile(r"[a-zA-Z0-9._-]+")


def select_topics(listing: list[dict[str, Any]], requested: list[str] | None,
                  exclude_internal: bool = False) -> tuple[list[str], list[str]]:
    """The topics of ``listing`` (list_topics' {"name", "internal"}) that ``requested`` names,
    sorted, and the requested entries that matched none. Kafka's TopicCommand.getTopics, with
    one difference: kafka-topics.sh takes every --topic as a regular expression (commas
    separate alternatives), odradek takes an entry made only of a topic name's characters as
    that name, so `a.b` is the topic a.b and not also aXb; anything else must match a whole
    name. ``requested`` None: every topic. ``exclude_internal`` leaves out the internal
    topics even where named (as kafka-topics.sh --exclude-internal does)."""
    names = [t["name"] for t in listing if not (exclude_internal and t["internal"])]
    if requested is None:
        return sorted(names), []
    known = set(names) | {t["name"] for t in listing}
    selected: set[str] = set()
    unmatched: list[str] = []
    for entry in requested:
        found: set[str] = set()
        for part in (p.strip() for p in entry.split(",")):
            if not part:
                continue
            if _NAME_CHARS.fullmatch(part):
                found |= {part} & known
            else:
                try:
                    pattern = re.compile(part)
                except re.error as exc:
                    raise AdminError(f"{part!r} is neither a topic name nor a regular expression ({exc})") from None
                found |= {n for n in names if pattern.fullmatch(n)}
        if not found:
            unmatched.append(entry)
        selected |= found & set(names)
    return sorted(selected), unmatched
