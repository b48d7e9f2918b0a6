"""Kafka's ConsumerGroupCommand (kafka-consumer-groups.sh) behind `odradek groups ...`: list,
describe with lag, reset-offsets (KIP-122) and delete.

Only the Kafka protocol, through confluent-kafka's AdminClient: ListGroups, DescribeGroups,
OffsetFetch and DeleteGroups (KIP-222), OffsetCommit as AlterConsumerGroupOffsets and
ListOffsets (KIP-396), so it works unchanged against Apache Kafka. Like Kafka's tool, offsets
are only reset while the group has no members (Empty, or Dead: never seen, where the commit
creates it); the coordinator itself refuses a commit without a member id to any other group
(UNKNOWN_MEMBER_ID), so a consumer joining between the check and the commit is not overwritten.
"""
from __future__ import annotations

import concurrent.futures
from dataclasses import dataclass
from typing import Any

from confluent_kafka import ConsumerGroupState, ConsumerGroupTopicPartitions, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from odradek.admin.admin_client import format_table, kafka_error_text, quiet_logger
from odradek.admin.errors import AdminError
from odradek.cli.output import duration

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


@dataclass(frozen=True)
class ResetTarget:
    """Where reset-offsets moves each partition (Kafka's --to-earliest, --to-latest,
    --to-offset, --shift-by, --to-datetime); ``value`` is the offset, the shift or the
    timestamp in ms."""
    kind: str  # "earliest" | "latest" | "offset" | "shift" | "datetime"
    value: int = 0


class GroupAdmin:
    """The requests of one `odradek groups` command, each bounded by ``timeout`` seconds.
    ``client``: a long-lived AdminClient to reuse (the dashboard's, ui/kafka_reader.py), else
    one of its own."""

    def __init__(self, bootstrap: str, timeout: float, client: AdminClient | None = None) -> None:
        self.bootstrap = bootstrap
        self.timeout = timeout
        # confluent_kafka types conf values as str/int/float/bool; its "logger" setting takes a Logger
        self.client = client or AdminClient(
            {"bootstrap.servers": bootstrap, "logger": quiet_logger()})  # type: ignore[dict-item]
        self._topics: dict[str, Any] | None = None

    def _wait(self, future: concurrent.futures.Future[Any], what: str) -> Any:
        try:
            return future.result(timeout=self.timeout + 5)
        except KafkaException as exc:
            raise AdminError(f"{what}: {kafka_error_text(exc)}") from None
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
                                 f"({kafka_error_text(exc)})") from None
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
            raise AdminError(f"ListGroups: {kafka_error_text(result.errors[0])}")
        return sorted(({"group": g.group_id, "state": STATE_NAMES.get(g.state, str(g.state)),
                        "protocol_type": "" if g.is_simple_consumer_group else "consumer"}
                       for g in result.valid), key=lambda g: g["group"])

    def state(self, group: str) -> tuple[str, Any]:
        """(Kafka's state name, librdkafka's ConsumerGroupDescription) of one group; an
        unknown group is Dead (what DescribeGroups answers for it)."""
        future = self.client.describe_consumer_groups([group], request_timeout=self.timeout)[group]
        try:
            description = future.result(timeout=self.timeout + 5)
        except KafkaException as exc:
            if exc.args and isinstance(exc.args[0], KafkaError) and exc.args[0].code() == KafkaError.GROUP_ID_NOT_FOUND:
                return "Dead", None
            raise AdminError(f"DescribeGroups {group!r}: {kafka_error_text(exc)}") from None
        except concurrent.futures.TimeoutError:
            raise AdminError(f"DescribeGroups {group!r}: no answer within {duration(self.timeout)}") from None
        return STATE_NAMES.get(description.state, str(description.state)), description

    def describe(self, group: str) -> dict[str, Any]:
        """State, members with their assignments, and per partition the committed offset, the
        log end offset (high watermark) and the lag: Kafka's `--describe --members --offsets`."""
        topics = self.topics()
        state, description = self.state(group)
        if state == "Dead":
            raise AdminError(f"consumer group {group!r} does not exist")
        members = [{"member_id": m.member_id, "client_id": m.client_id, "host": m.host,
                    "group_instance_id": m.group_instance_id,
                    "assignment": [{"topic": t, "partition": p} for t, p in
                                   sorted((tp.topic, tp.partition) for tp in m.assignment.topic_partitions)]}
                   for m in sorted(description.members, key=lambda m: m.member_id)]
        owner = {(a["topic"], a["partition"]): m["member_id"] for m in members for a in m["assignment"]}
        committed = self.committed(group)
        partitions = sorted(set(committed) | set(owner))
        ends = self.list_offsets([tp for tp in partitions if tp[0] in topics], OffsetSpec.latest())
        offsets = []
        for tp in partitions:
            current, end = committed.get(tp), ends.get(tp)  # end None: the topic was deleted
            offsets.append({"topic": tp[0], "partition": tp[1], "committed": current, "log_end": end,
                            # negative, as in Kafka's tool, when the log was truncated below it
                            "lag": None if current is None or end is None else end - current,
                            "member_id": owner.get(tp)})
        return {"group": group, "state": state, "protocol_type": "" if description.is_simple_consumer_group
                else "consumer", "assignor": description.partition_assignor,
                "coordinator": description.coordinator.id if description.coordinator else None,
                "members": members, "offsets": offsets}

    def delete(self, group: str) -> None:
        """DeleteGroups: the coordinator refuses a group with members (NON_EMPTY_GROUP) and an
        unknown one (GROUP_ID_NOT_FOUND)."""
        self.topics()
        self._wait(self.client.delete_consumer_groups([group], request_timeout=self.timeout)[group],
                   f"cannot delete consumer group {group!r}")

    # -- offsets -------------------------------------------------------------------------------

    def committed(self, group: str) -> dict[Partition, int]:
        """The group's committed offsets (OffsetFetch for all its partitions)."""
        request = [ConsumerGroupTopicPartitions(group)]
        result = self._wait(self.client.list_consumer_group_offsets(request, request_timeout=self.timeout)[group],
                            f"OffsetFetch {group!r}")
        return {(tp.topic, tp.partition): tp.offset for tp in result.topic_partitions or [] if tp.offset >= 0}

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

    def plan_reset(self, group: str, topics: list[tuple[str, list[int] | None]],
                   target: ResetTarget) -> list[dict[str, Any]]:
        """Kafka's prepareOffsetsToReset: per partition the committed offset and the new one,
        clamped into [log start, log end] as Kafka's checkOffsetsRange does. Refused while the
        group has members, as Kafka's tool refuses (a dry run too)."""
        partitions = self.partitions(topics)
        state, _ = self.state(group)
        if state not in INACTIVE:
            raise AdminError(f"consumer group {group!r} is {state}: offsets can only be reset while it "
                             f"has no members (stop its consumers first)")
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
        elif target.kind == "datetime":
            # the first offset whose timestamp is at or after the time; the log end where none is
            found = self.list_offsets(partitions, OffsetSpec.for_timestamp(target.value))
            wanted = {tp: ends[tp] if found[tp] < 0 else found[tp] for tp in partitions}
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
            raise AdminError(f"{what} ({tp.topic}-{tp.partition}{more}): {kafka_error_text(tp.error)}")


# -- output ------------------------------------------------------------------------------------

def table(header: tuple[str, ...], rows: list[tuple[Any, ...]]) -> str:
    """Aligned columns (admin_client.format_table); None or "" is shown as "-"."""
    return format_table([header] + [tuple("-" if c is None or c == "" else str(c) for c in r) for r in rows])


def format_list(groups: list[dict[str, str]]) -> str:
    return table(("Group", "State", "ProtocolType"), [(g["group"], g["state"], g["protocol_type"]) for g in groups])


def format_describe(d: dict[str, Any]) -> str:
    """A header line, the members, then one row per partition (Kafka's --describe layout)."""
    lines = [f"group {d['group']}: {d['state']}, {len(d['members'])} members, assignor "
             f"{d['assignor'] or '-'}, coordinator {d['coordinator']}", ""]
    if d["members"]:
        lines += [table(("MemberId", "ClientId", "Host", "Assignment"), [
            (m["member_id"], m["client_id"], m["host"],
             ",".join(f"{a['topic']}-{a['partition']}" for a in m["assignment"])) for m in d["members"]]), ""]
    lines.append(table(("Topic", "Partition", "Committed", "LogEnd", "Lag", "MemberId"), [
        (o["topic"], o["partition"], o["committed"], o["log_end"], o["lag"], o["member_id"]) for o in d["offsets"]]))
    return "\n".join(lines)


def format_plan(plan: list[dict[str, Any]]) -> str:
    return table(("Topic", "Partition", "Current", "New"),
                 [(r["topic"], r["partition"], r["current"], r["new"]) for r in plan])
