"""Kafka's ConsumerGroupCommand (kafka-consumer-groups.sh) behind `odradek groups ...`: list,
describe with lag (its --offsets, --members and --state views), reset-offsets (KIP-122),
delete and delete-offsets (KIP-496).

Only the Kafka protocol, through confluent-kafka's AdminClient: ListGroups, DescribeGroups,
OffsetFetch and DeleteGroups (KIP-222), OffsetCommit as AlterConsumerGroupOffsets and
ListOffsets (KIP-396); OffsetDelete, which confluent-kafka lacks, as a raw request to the
group's coordinator. So it works unchanged against Apache Kafka. Like Kafka's tool, offsets
are only reset while the group has no members (Empty, or Dead: never seen, where the commit
creates it); the coordinator itself refuses a commit without a member id to any other group
(UNKNOWN_MEMBER_ID), so a consumer joining between the check and the commit is not overwritten.

For a group reading a topic with enable.ordered.delivery (KIP-253), describe also shows which of
its partitions wait on a barrier: odradek's DescribeOrderedGroups, asked of the group's
coordinator only when some topic of the group is ordered (a stock Kafka broker never sees it).
"""
from __future__ import annotations

import concurrent.futures
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from confluent_kafka import ConsumerGroupState, ConsumerGroupTopicPartitions, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from odradek.admin.admin_client import format_table, kafka_error_text, quiet_logger, request_first, send_request
from odradek.admin.errors import AdminError
from odradek.cli.output import duration, plural
from odradek.client import client_config
from odradek.client.group_membership import decode_assignment
from odradek.client.ordered_metadata import OrderedMetadataClient, OrderedMetadataError, parse_bootstrap
from odradek.protocol import ordered_delivery_api as ordered_api
from odradek.protocol.errors import ErrorCode, error_name
from odradek.protocol.schema import SchemaError

Partition = tuple[str, int]

#: Kafka's names of the group states (GroupState in its coordinator, what DescribeGroups and
#: ListGroups carry on the wire); librdkafka turns them into an enum.
STATE_NAMES = {
    ConsumerGroupState.UNKNOWN: "Unknown",
    ConsumerGroupState.PREPARING_REBALANCING: "PreparingRebalance",
    ConsumerGroupState.COMPLETING_REBALANCING: "CompletingRebalance",
    ConsumerGroupState.STABLE: "Stable",
    ConsumerGroupState.DEAD: "Dead",
    ConsumerGroupState.EMPTY: "Empty",
}
#: The states in which a group has no members, so its offsets may be reset.
INACTIVE = ("Empty", "Dead")


#: OffsetDelete's API key (KIP-496); confluent-kafka has no call for it.
OFFSET_DELETE = 47
OFFSET_FETCH = 9
FIND_COORDINATOR = 10
DESCRIBE_GROUPS = 15
#: A coordinator that is moving or loading its partition of __consumer_offsets answers these;
#: the request is sent again, to the coordinator FindCoordinator then names.
COORDINATOR_RETRIABLE = {ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                         ErrorCode.NOT_COORDINATOR}


@dataclass(frozen=True)
class ResetTarget:
    """Where reset-offsets moves each partition (Kafka's --to-earliest, --to-latest,
    --to-offset, --shift-by, --to-datetime, --by-duration, --to-current, --from-file);
    ``value`` is the offset, the shift, the timestamp in ms or the duration in ms;
    ``offsets`` the (topic, partition, offset) rows of --from-file's CSV."""
    kind: str  # "earliest" | "latest" | "offset" | "shift" | "datetime" | "duration" | "current" | "file"
    value: int = 0
    offsets: tuple[tuple[str, int, int], ...] = ()


_DURATION = re.compile(r"([-+]?)P(?:([-+]?\d+)D)?(?:T(?:([-+]?\d+)H)?(?:([-+]?\d+)M)?"
                       r"(?:([-+]?\d+)(?:[.,](\d{0,9}))?S)?)?", re.IGNORECASE)


def parse_duration_ms(text: str) -> int:
    """An ISO-8601 duration as Java's Duration.parse reads it (what --by-duration takes in
    Kafka's tool): PnDTnHnMn.nS, e.g. PT1H30M or P1D, each part optional but at least one
    given, signs allowed; in ms. ValueError for anything else."""
    m = _DURATION.fullmatch(text.strip())
    if not m or not any(m.group(i) for i in (2, 3, 4, 5)) or text.strip().upper().endswith("T"):
        raise ValueError(f"expected an ISO 8601 duration such as PT1H30M or P1DT12H, got {text!r}")
    days, hours, minutes, seconds = (int(m.group(i) or 0) for i in (2, 3, 4, 5))
    fraction = m.group(6) or ""
    millis = int((fraction + "000")[:3]) if fraction else 0
    total = ((days * 24 + hours) * 60 + minutes) * 60_000 + seconds * 1000
    total += -millis if m.group(5) and m.group(5).startswith("-") else millis
    return -total if m.group(1) == "-" else total


def parse_offsets_csv(text: str, group: str) -> list[tuple[str, int, int]]:
    """The rows of a reset plan as kafka-consumer-groups.sh --export writes it:
    `topic,partition,offset`, or `group,topic,partition,offset` when it exported several
    groups (then only ``group``'s rows count). Blank lines are skipped; ValueError naming the
    line for anything else."""
    rows: dict[tuple[str, int], int] = {}
    for number, line in enumerate(text.splitlines(), 1):
        fields = [f.strip() for f in line.split(",")]
        if fields == [""]:
            continue
        if len(fields) == 4:
            if fields[0] != group:
                continue
            fields = fields[1:]
        if (len(fields) != 3 or not fields[0] or not fields[1].isdigit()
                or not fields[2].lstrip("-").isdigit() or int(fields[2]) < 0):
            raise ValueError(f"line {number}: expected topic,partition,offset (offset 0 or more), got {line!r}")
        rows[(fields[0], int(fields[1]))] = int(fields[2])
    return [(t, p, o) for (t, p), o in sorted(rows.items())]


def error_name_text(err: KafkaError | KafkaException | Exception) -> str:
    """kafka_error_text with Kafka's own error name (odradek.protocol.errors) where librdkafka
    abbreviates it (UNKNOWN_TOPIC_OR_PART): librdkafka's non-negative codes are Kafka's."""
    if isinstance(err, KafkaException) and err.args and isinstance(err.args[0], KafkaError):
        err = err.args[0]
    if isinstance(err, KafkaError) and err.code() > 0:
        try:
            return f"{error_name(err.code())}: {err.str()}"
        except ValueError:
            pass
    return kafka_error_text(err)


class GroupAdmin:
    """The requests of one `odradek groups` command, each bounded by ``timeout`` seconds.
    ``client``: a long-lived AdminClient to reuse (the dashboard's, ui/kafka_reader.py), else
    one of its own."""

    def __init__(self, bootstrap: str, timeout: float, client: AdminClient | None = None) -> None:
        self.bootstrap = bootstrap
        self.timeout = timeout
        # confluent_kafka types conf values as str/int/float/bool; its "logger" setting takes a Logger
        self.client = client or AdminClient(client_config.librdkafka(
            {"bootstrap.servers": bootstrap, "logger": quiet_logger()}))
        self._topics: dict[str, Any] | None = None

    def _wait(self, future: concurrent.futures.Future[Any], what: str) -> Any:
        try:
            return future.result(timeout=self.timeout + 5)
        except KafkaException as exc:
            raise AdminError(f"{what}: {error_name_text(exc)}") from None
        except concurrent.futures.TimeoutError:
            raise AdminError(f"{what}: no answer from {self.bootstrap} within {duration(self.timeout)}") from None

    def topics(self) -> dict[str, Any]:
        """The cluster's topics (Metadata), asked once; also tells an unreachable cluster apart
        from a slow request."""
        if self._topics is None:
            try:
                self._topics = self.client.list_topics(timeout=self.timeout).topics
            except KafkaException as exc:
                raise AdminError(f"cannot reach {self.bootstrap} within {duration(self.timeout)} "
                                 f"({error_name_text(exc)})") from None
        return self._topics

    # -- list, describe, delete ----------------------------------------------------------------

    def list_groups(self) -> list[dict[str, str]]:
        """Every consumer group of the cluster (ListGroups to every broker), sorted by id.

        librdkafka, like Kafka's Admin.listConsumerGroups, keeps the groups of protocol type
        "consumer" and those with none (offsets committed without a member, e.g. by
        reset-offsets), which it calls simple."""
        self.topics()
        result = self._wait(self.client.list_consumer_groups(request_timeout=self.timeout), "ListGroups")
        if result.errors:  # some broker did not answer: a partial list would look complete
            raise AdminError(f"ListGroups: {error_name_text(result.errors[0])}")
        return sorted(({"group": g.group_id, "state": STATE_NAMES.get(g.state, str(g.state)),
                        "protocol_type": "" if g.is_simple_consumer_group else "consumer"}
                       for g in result.valid), key=lambda g: g["group"])

    def state(self, group: str) -> tuple[str, Any]:
        """(Kafka's state name, the group's DescribeGroups answer and its coordinator) of one
        group; an unknown group is Dead (what DescribeGroups answers for it)."""
        described, coordinator = self._to_coordinator(
            group, DESCRIBE_GROUPS, 5, {"groups": [group], "include_authorized_operations": False},
            f"DescribeGroups {group!r}", error_of=_describe_error)
        answer = described.groups[0]
        return str(answer.group_state) or "Dead", (answer, coordinator)

    def describe(self, group: str) -> dict[str, Any]:
        """State, members with their assignments, and per partition the committed offset, the
        log end offset (high watermark) and the lag: Kafka's `--describe --members --offsets`.
        AdminError if the group does not exist or could not be described."""
        [described] = self.describe_many([group])
        if "error" in described:
            raise AdminError(described["error"])
        return described

    def describe_many(self, groups: list[str], offsets: bool = True) -> list[dict[str, Any]]:
        """describe() of each group (one DescribeGroups for all), in the order given, duplicates
        once; a group that does not exist or could not be described is ``{"group", "error"}``, so
        one bad name does not hide the others (Kafka's tool goes on to the next group too).
        Without ``offsets`` no OffsetFetch or ListOffsets is sent (the --members and --state
        views) and the descriptions have no "offsets"."""
        topics = self.topics()
        groups = list(dict.fromkeys(groups))
        out = []
        for group in groups:
            try:
                state, description = self.state(group)
                if state == "Dead":
                    raise AdminError(f"consumer group {group!r} does not exist")
                out.append(self._description(group, state, description, topics if offsets else None))
            except AdminError as exc:
                out.append({"group": group, "error": str(exc)})
        if offsets:
            self._add_ordered(out)
        return out

    def _add_ordered(self, described: list[dict[str, Any]]) -> None:
        """An "ordered" section (ordered_section) in each described group that reads a topic
        with ordered delivery: the group's topics (committed or assigned) are asked for their
        KIP-253 counts, and the groups reading an ordered one for their blocks. A cluster
        without KIP-253 has no ordered topic, so nothing is added and nothing else is asked."""
        topics_of = {d["group"]: {o["topic"] for o in d["offsets"]} for d in described if "error" not in d}
        every = sorted(set().union(*topics_of.values())) if topics_of else []
        if not every:
            return
        try:
            brokers = parse_bootstrap(self.bootstrap)
        except ValueError:
            raise AdminError(f"expected HOST:PORT[,HOST:PORT...] as the bootstrap servers, got {self.bootstrap!r}") \
                from None
        client = OrderedMetadataClient(brokers, "odradek-groups", self.timeout)
        try:
            counts = client.counts(every)
            ordered = {t for t, c in counts.items() if c.ordered}
            groups = [g for g, topics in topics_of.items() if topics & ordered]
            answers = client.describe_groups(groups) if groups else {}
        except OrderedMetadataError:
            raise AdminError(f"cannot read the KIP-253 state of the groups' topics: no broker of "
                             f"{self.bootstrap} answered") from None
        finally:
            client.close()
        now_ms = int(time.time() * 1000)
        for d in described:
            if d["group"] in groups:
                answer = None if answers is None else answers[d["group"]]
                d["ordered"] = ordered_section(sorted(topics_of[d["group"]] & ordered), answer, now_ms)

    def _description(self, group: str, state: str, description: Any,
                     topics: dict[str, Any] | None) -> dict[str, Any]:
        """One group's describe() from its DescribeGroups answer and coordinator (state()), and
        with ``topics`` (the metadata) its offsets."""
        answer, coordinator = description
        consumer = answer.protocol_type == "consumer"
        members = [{"member_id": str(m.member_id), "client_id": str(m.client_id),
                    "host": str(m.client_host), "group_instance_id": m.group_instance_id,
                    "assignment": [{"topic": t, "partition": p} for t, p in
                                   _assigned(m.member_assignment if consumer else b"")]}
                   for m in sorted(answer.members, key=lambda m: str(m.member_id))]
        described: dict[str, Any] = {
            "group": group, "state": state,
            # a group of protocol type "consumer" or, with offsets committed without members, none
            "protocol_type": "consumer" if consumer else "",
            "assignor": str(answer.protocol_data),
            "coordinator": int(coordinator.node_id),
            "coordinator_address": f"{coordinator.host}:{int(coordinator.port)}",
            "members": members}
        if topics is None:
            return described
        owner = {(a["topic"], a["partition"]): m["member_id"] for m in members for a in m["assignment"]}
        committed = self.committed(group)
        partitions = sorted(set(committed) | set(owner))
        ends = self.list_offsets([tp for tp in partitions if tp[0] in topics], OffsetSpec.latest())
        rows = []
        for tp in partitions:
            current, end = committed.get(tp), ends.get(tp)  # end None: the topic was deleted
            rows.append({"topic": tp[0], "partition": tp[1], "committed": current, "log_end": end,
                         # negative, as in Kafka's tool, when the log was truncated below it
                         "lag": None if current is None or end is None else end - current,
                         "member_id": owner.get(tp)})
        described["offsets"] = rows
        return described

    def delete(self, group: str) -> None:
        """DeleteGroups: the coordinator refuses a group with members (NON_EMPTY_GROUP) and an
        unknown one (GROUP_ID_NOT_FOUND)."""
        [result] = self.delete_many([group])
        if "error" in result:
            raise AdminError(result["error"])

    def delete_many(self, groups: list[str]) -> list[dict[str, Any]]:
        """DeleteGroups for every group in one request; per group ``{"group", "deleted": True}``
        or ``{"group", "deleted": False, "error"}``: each group is deleted or refused on its own,
        so the caller must report every outcome, not stop at the first refusal."""
        self.topics()
        groups = list(dict.fromkeys(groups))
        futures = self.client.delete_consumer_groups(groups, request_timeout=self.timeout)
        out: list[dict[str, Any]] = []
        for group in groups:
            try:
                self._wait(futures[group], f"cannot delete consumer group {group!r}")
            except AdminError as exc:
                out.append({"group": group, "deleted": False, "error": str(exc)})
            else:
                out.append({"group": group, "deleted": True})
        return out

    def delete_offsets(self, group: str, topics: list[tuple[str, list[int] | None]]) -> list[dict[str, Any]]:
        """OffsetDelete (KIP-496) of the partitions ``--topic T[:P,...]`` names: per partition
        ``{"topic", "partition", "error"}``, error None where the offset is gone (or there was
        none) and the Kafka error name where the coordinator refused, GROUP_SUBSCRIBED_TO_TOPIC
        while a member of the group consumes the topic. A refusal of the whole request
        (GROUP_ID_NOT_FOUND, NON_EMPTY_GROUP for a group that is not a consumer group) is an
        AdminError."""
        partitions = self.partitions(topics)
        by_topic: dict[str, list[int]] = {}
        for topic, partition in partitions:
            by_topic.setdefault(topic, []).append(partition)
        body = {"group_id": group, "topics": [{"name": t, "partitions": [{"partition_index": p} for p in ps]}
                                              for t, ps in by_topic.items()]}
        response, _ = self._to_coordinator(group, OFFSET_DELETE, 0, body,
                                           f"cannot delete offsets of group {group!r}")
        errors = {(t.name, int(p.partition_index)): int(p.error_code) for t in response.topics for p in t.partitions}
        return [{"topic": t, "partition": p,
                 "error": None if errors.get((t, p), 0) == 0 else error_name(errors[(t, p)])} for t, p in partitions]

    def _to_coordinator(self, group: str, api_key: int, version: int, body: dict[str, Any], what: str,
                        error_of: Callable[[Any], int] = lambda response: int(response.error_code)) -> Any:
        """A raw request to ``group``'s coordinator (FindCoordinator first), sent again while
        the coordinator moves or loads (COORDINATOR_RETRIABLE) until --timeout-s: (the answer,
        the FindCoordinator answer that named the coordinator); AdminError for any other error
        ``error_of`` reads from the answer (its top-level error code by default).

        The group commands send these themselves rather than through librdkafka's admin calls,
        which crash the process while a coordinator moves (librdkafka 2.16:
        list_consumer_group_offsets on NOT_COORDINATOR, its issue #5040; describe_consumer_groups
        timing out while it looks the coordinator up, #4605)."""
        deadline = time.monotonic() + self.timeout
        servers = self.bootstrap.split(",")
        while True:
            found = request_first(servers, self.bootstrap, FIND_COORDINATOR, 3, {"key": group, "key_type": 0},
                                  self.timeout)
            error = int(found.error_code)
            if error == 0:
                address = f"{found.host}:{int(found.port)}"
                try:
                    response = send_request(address, api_key, version, body, self.timeout)
                except (OSError, ValueError):
                    error = int(ErrorCode.COORDINATOR_NOT_AVAILABLE)
                else:
                    error = error_of(response)
                    if error == 0:
                        return response, found
            if error not in COORDINATOR_RETRIABLE or time.monotonic() > deadline:
                raise AdminError(f"{what}: {_code_name(error)}")
            time.sleep(0.2)

    # -- offsets -------------------------------------------------------------------------------

    def committed(self, group: str) -> dict[Partition, int]:
        """The group's committed offsets (OffsetFetch for all its partitions).

        Sent as our own request rather than through confluent-kafka's
        list_consumer_group_offsets: librdkafka 2.16 crashes the process (SIGSEGV, its issue
        #5040) when that call is answered NOT_COORDINATOR, as it is while the group's
        coordinator moves, e.g. for a minute after a broker failure."""
        response, _ = self._to_coordinator(group, OFFSET_FETCH, 6, {"group_id": group, "topics": None},
                                           f"OffsetFetch {group!r}")
        out: dict[Partition, int] = {}
        for topic in response.topics:
            for p in topic.partitions:
                if int(p.error_code) != 0:
                    raise AdminError(f"OffsetFetch {group!r} of {topic.name}-{int(p.partition_index)}: "
                                     f"{_code_name(int(p.error_code))}")
                if p.committed_offset >= 0:
                    out[(str(topic.name), int(p.partition_index))] = int(p.committed_offset)
        return out

    def list_offsets(self, partitions: list[Partition], spec: OffsetSpec) -> dict[Partition, int]:
        """ListOffsets of each partition (-1 where a timestamp has no record at or after it)."""
        if not partitions:
            return {}
        futures = self.client.list_offsets({TopicPartition(t, p): spec for t, p in partitions},
                                           request_timeout=self.timeout)
        return {(tp.topic, tp.partition): self._wait(f, f"ListOffsets {tp.topic}-{tp.partition}").offset
                for tp, f in futures.items()}

    def partitions(self, topics: list[tuple[str, list[int] | None]]) -> list[Partition]:
        """The partitions `--topic T` or `--topic T:0,1` names, checked against the metadata."""
        known = self.topics()
        out: set[Partition] = set()
        for topic, wanted in topics:
            if topic not in known:
                raise AdminError(f"topic {topic!r} does not exist")
            existing = set(known[topic].partitions)
            missing = sorted(set(wanted or ()) - existing)
            if missing:
                raise AdminError(f"topic {topic!r} has no partition {missing[0]} (it has {len(existing)})")
            out.update((topic, p) for p in (wanted or existing))
        return sorted(out)

    def plan_reset(self, group: str, topics: list[tuple[str, list[int] | None]] | None,
                   target: ResetTarget) -> list[dict[str, Any]]:
        """Kafka's prepareOffsetsToReset: per partition the committed offset and the new one.
        ``topics`` None: every partition the group has a committed offset for (--all-topics);
        --from-file's partitions are its rows (``topics`` is not looked at). New offsets
        are clamped into [log start, log end] as Kafka's checkOffsetsRange does, except
        --to-current's, which keeps what is committed (the log end where nothing is, as Kafka).
        Refused while the group has members, as Kafka's tool refuses (a dry run too)."""
        committed: dict[Partition, int] | None = None
        if target.kind == "file":
            wanted_rows = {(t, p): o for t, p, o in target.offsets}
            if not wanted_rows:
                raise AdminError(f"the file names no partition to reset for group {group!r}")
            by_topic: dict[str, list[int]] = {}
            for t, p in sorted(wanted_rows):
                by_topic.setdefault(t, []).append(p)
            partitions = self.partitions(list(by_topic.items()))
        elif topics is None:
            committed = self.committed(group)
            known = self.topics()
            partitions = sorted(tp for tp in committed if tp[0] in known)
            if not partitions:
                raise AdminError(f"consumer group {group!r} has no committed offsets of existing topics "
                                 f"(--all-topics resets those; name partitions with --topic)")
        else:
            partitions = self.partitions(topics)
        state, _ = self.state(group)
        if state not in INACTIVE:
            raise AdminError(f"consumer group {group!r} is {state}: offsets can only be reset while it "
                             f"has no members (stop its consumers first)")
        if committed is None:
            committed = self.committed(group)
        starts = self.list_offsets(partitions, OffsetSpec.earliest())
        ends = self.list_offsets(partitions, OffsetSpec.latest())
        if target.kind == "earliest":
            wanted = starts
        elif target.kind == "latest":
            wanted = ends
        elif target.kind == "offset":
            wanted = dict.fromkeys(partitions, target.value)
        elif target.kind == "shift":
            missing = [tp for tp in partitions if tp not in committed]
            if missing:
                raise AdminError(f"cannot shift the offset of {missing[0][0]}-{missing[0][1]}: group "
                                 f"{group!r} has no committed offset for it")
            wanted = {tp: committed[tp] + target.value for tp in partitions}
        elif target.kind in ("datetime", "duration"):
            # the first offset whose timestamp is at or after the time; the log end where none is.
            # --by-duration counts back from now, as Kafka's Instant.now().minus(duration)
            ts = target.value if target.kind == "datetime" else int(time.time() * 1000) - target.value
            found = self.list_offsets(partitions, OffsetSpec.for_timestamp(ts))
            wanted = {tp: ends[tp] if found[tp] < 0 else found[tp] for tp in partitions}
        elif target.kind == "current":
            return [{"topic": t, "partition": p, "current": committed.get((t, p)),
                     "new": committed.get((t, p), ends[(t, p)])} for t, p in partitions]
        elif target.kind == "file":
            wanted = wanted_rows
        else:
            raise ValueError(target.kind)
        return [{"topic": t, "partition": p, "current": committed.get((t, p)),
                 "new": min(max(wanted[(t, p)], starts[(t, p)]), ends[(t, p)])} for t, p in partitions]

    def execute_reset(self, group: str, plan: list[dict[str, Any]]) -> None:
        """Commits the plan's new offsets (AlterConsumerGroupOffsets: OffsetCommit without member)."""
        request = [ConsumerGroupTopicPartitions(group, [TopicPartition(r["topic"], r["partition"], r["new"])
                                                        for r in plan])]
        what = f"cannot commit the new offsets of group {group!r}"
        result = self._wait(self.client.alter_consumer_group_offsets(request, request_timeout=self.timeout)[group],
                            what)
        failed = [tp for tp in result.topic_partitions or [] if tp.error is not None]
        if failed:
            tp = failed[0]
            more = f" and {len(failed) - 1} more partitions" if len(failed) > 1 else ""
            raise AdminError(f"{what} ({tp.topic}-{tp.partition}{more}): {error_name_text(tp.error)}")


# -- output ------------------------------------------------------------------------------------

#: What the whole-request refusals of OffsetDelete mean to an operator.
_MEANINGS: dict[int, str] = {
    ErrorCode.GROUP_ID_NOT_FOUND: "the group does not exist",
    ErrorCode.NON_EMPTY_GROUP: "the group has members and is not a consumer group",
    ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC: "a member of the group consumes the topic",
}


def _describe_error(response: Any) -> int:
    """A DescribeGroups answer's error for its one group; GROUP_ID_NOT_FOUND (a newer broker's
    answer for a group it does not know) is no error: the group is Dead, as ours answers."""
    code = int(response.groups[0].error_code)
    return 0 if code == ErrorCode.GROUP_ID_NOT_FOUND else code


def _assigned(assignment: bytes) -> list[Partition]:
    """The (topic, partition)s of a member's ConsumerProtocolAssignment, sorted; none where it
    cannot be read (a client's own encoding of a newer version is still readable: every
    version begins with v0's fields)."""
    try:
        return sorted((tp.topic, tp.partition) for tp in decode_assignment(assignment))
    except SchemaError:
        return []


def _code_name(code: int) -> str:
    """_error_name with what it means where that is not plain from the name."""
    meaning = _MEANINGS.get(code)
    return f"{error_name(code)} ({meaning})" if meaning else error_name(code)


def table(header: tuple[str, ...], rows: list[tuple[Any, ...]]) -> str:
    """Aligned columns (admin_client.format_table); None or "" is shown as "-"."""
    return format_table([header] + [tuple("-" if c is None or c == "" else str(c) for c in r) for r in rows])


def format_list(groups: list[dict[str, str]]) -> str:
    if not groups:
        return "no consumer groups"
    return table(("Group", "State", "ProtocolType"), [(g["group"], g["state"], g["protocol_type"]) for g in groups])


def ordered_section(topics: list[str], answer: ordered_api.OrderedGroupDescription | None,
                    now_ms: int) -> dict[str, Any]:
    """describe's "ordered" entry of a group reading ordered ``topics``: its generation and
    every blocked partition (member, what it waits on, the barrier offset or read_to_end, the
    group's position there, since when and for how long), or an "error" in Kafka's words
    when the coordinator did not say (``answer`` None: it does not speak DescribeOrderedGroups)."""
    if answer is None:
        return {"topics": topics, "generation": None, "blocked": [],
                "error": "the group's coordinator does not answer DescribeOrderedGroups (an older broker)"}
    if answer.error_code != 0:
        return {"topics": topics, "generation": None, "blocked": [], "error": _code_name(answer.error_code)}
    blocked = [{"topic": tp.topic, "partition": tp.partition, "member_id": b.member_id, "waits_on": b.waits_on,
                "read_to_end": b.barrier_offset == ordered_api.READ_TO_END,
                "barrier_offset": None if b.barrier_offset == ordered_api.READ_TO_END else b.barrier_offset,
                "group_position": None if b.group_position < 0 else b.group_position,
                "blocked_since_ms": b.blocked_since_ms,
                # the member's clock against this one: clocks apart never make an age negative
                "blocked_s": max(0, now_ms - b.blocked_since_ms) / 1000}
               for tp, b in sorted(answer.blocked.items())]
    return {"topics": topics, "generation": answer.generation_id, "blocked": blocked, "error": None}


def block_text(b: dict[str, Any]) -> str:
    """One blocked partition in an operator's words (describe's and the dashboard's)."""
    at = ("group position not reported yet" if b["group_position"] is None
          else f"group at offset {b['group_position']}")
    until = (f"until the group reads it to its end ({at})" if b["read_to_end"]
             else f"until the group reaches offset {b['barrier_offset']} ({at})")
    return (f"{b['topic']}-{b['partition']} (member {b['member_id']}) waits on partition {b['waits_on']} "
            f"{until}, blocked for {duration(b['blocked_s'])}")


def format_ordered(section: dict[str, Any]) -> list[str]:
    """The "Blocked on KIP-253 barriers" lines of a group reading ordered topics."""
    lines = [f"Blocked on KIP-253 barriers (ordered {'topic' if len(section['topics']) == 1 else 'topics'} "
             f"{', '.join(section['topics'])}):"]
    if section["error"] is not None:
        lines.append(f"  not known: {section['error']}")
    elif not section["blocked"]:
        lines.append("  no partition is blocked")
    else:
        lines += [f"  {block_text(b)}" for b in section["blocked"]]
    return lines


def format_describe(d: dict[str, Any]) -> str:
    """A header line, the members, then one row per partition (Kafka's --describe layout)."""
    lines = [f"group {d['group']}: {d['state']}, {plural(len(d['members']), 'member')}, assignor "
             f"{d['assignor'] or '-'}, coordinator {'-' if d['coordinator'] is None else d['coordinator']}", ""]
    if d["members"]:
        lines += [table(("MemberId", "ClientId", "Host", "Assignment"), [
            (m["member_id"], m["client_id"], m["host"],
             ",".join(f"{a['topic']}-{a['partition']}" for a in m["assignment"])) for m in d["members"]]), ""]
    if not d["offsets"]:
        lines.append(f"consumer group {d['group']} has no committed offsets")
    else:
        lines.append(table(("Topic", "Partition", "Committed", "LogEnd", "Lag", "MemberId"), [
            (o["topic"], o["partition"], o["committed"], o["log_end"], o["lag"], o["member_id"])
            for o in d["offsets"]]))
    if "ordered" in d:
        lines += ["", *format_ordered(d["ordered"])]
    return "\n".join(lines)


def format_describe_many(described: list[dict[str, Any]]) -> str:
    """format_describe of each described group, a blank line between groups; the groups that
    could not be described are left to the caller's error line."""
    blocks = [format_describe(d) for d in described if "error" not in d]
    return "\n\n".join(blocks)


def _assignment(assignment: list[dict[str, Any]]) -> str:
    """Kafka's --members --verbose ASSIGNMENT: topic(0,1,2) per topic."""
    by_topic: dict[str, list[int]] = {}
    for a in assignment:
        by_topic.setdefault(a["topic"], []).append(a["partition"])
    return ",".join(f"{t}({','.join(map(str, ps))})" for t, ps in by_topic.items())


def format_members(described: list[dict[str, Any]], verbose: bool = False) -> str:
    """Kafka's --describe --members: one row per member of every group (with ``verbose`` its
    assignment), and a line for each group without members."""
    header: tuple[str, ...] = ("Group", "MemberId", "ClientId", "Host", "Partitions")
    rows = [(d["group"], m["member_id"], m["client_id"], m["host"], len(m["assignment"]))
            + ((_assignment(m["assignment"]),) if verbose else ())
            for d in described if "error" not in d for m in d["members"]]
    lines = [table(header + (("Assignment",) if verbose else ()), rows)] if rows else []
    lines += [f"consumer group {d['group']} has no active members"
              for d in described if "error" not in d and not d["members"]]
    return "\n".join(lines)


def format_state(described: list[dict[str, Any]]) -> str:
    """Kafka's --describe --state: coordinator, assignment strategy, state and member count."""
    rows = [(d["group"], None if d["coordinator"] is None else f"{d['coordinator_address']} ({d['coordinator']})",
             d["assignor"], d["state"], len(d["members"])) for d in described if "error" not in d]
    return table(("Group", "Coordinator", "AssignmentStrategy", "State", "Members"), rows) if rows else ""


def format_plan(plan: list[dict[str, Any]]) -> str:
    return table(("Topic", "Partition", "Current", "New"),
                 [(r["topic"], r["partition"], r["current"], r["new"]) for r in plan])


def format_plan_csv(plan: list[dict[str, Any]]) -> str:
    """The plan as kafka-consumer-groups.sh --export writes it, topic,partition,offset (the
    new offset), which --from-file reads back."""
    return "\n".join(f"{r['topic']},{r['partition']},{r['new']}" for r in plan)


def format_offset_deletion(results: list[dict[str, Any]]) -> str:
    """delete-offsets' outcome per partition, as Kafka's tool prints it (TOPIC PARTITION STATUS)."""
    return table(("Topic", "Partition", "Status"),
                 [(r["topic"], r["partition"], "deleted" if r["error"] is None else r["error"]) for r in results])
