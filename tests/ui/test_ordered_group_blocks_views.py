"""How a group's KIP-253 blocks reach operators from what the coordinator answers: the
`groups describe` section (text and --json shape), the dashboard's groups view (model.group_blocks)
and the broker's Prometheus series, each from the same DescribeOrderedGroups answer."""
from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from odradek.admin.consumer_group_command import format_describe, ordered_section
from odradek.broker.metrics import BrokerMetrics
from odradek.common.metadata import TopicPartition
from odradek.protocol import ordered_delivery_api as api
from odradek.protocol.errors import ErrorCode
from odradek.ui import model

NOW_MS = 1_700_000_100_000
ANSWER = api.OrderedGroupDescription(ErrorCode.NONE, 4, {
    TopicPartition("t", 4): api.OrderedGroupBlock("m-1", 0, 120, 57, NOW_MS - 12_000),
    TopicPartition("t", 5): api.OrderedGroupBlock("m-2", 1, api.READ_TO_END, api.UNKNOWN, NOW_MS - 90_000),
})


def described(section: dict[str, object]) -> dict[str, object]:
    return {"group": "g", "state": "Stable", "members": [], "assignor": "odradek-ordered", "coordinator": 2,
            "offsets": [], "ordered": section}


def test_describe_names_each_block_its_barrier_and_how_long() -> None:
    section = ordered_section(["t"], ANSWER, NOW_MS)
    assert section["generation"] == 4 and section["error"] is None
    assert section["blocked"][0] == {
        "topic": "t", "partition": 4, "member_id": "m-1", "waits_on": 0, "read_to_end": False,
        "barrier_offset": 120, "group_position": 57, "blocked_since_ms": NOW_MS - 12_000, "blocked_s": 12.0}
    assert section["blocked"][1]["read_to_end"] and section["blocked"][1]["barrier_offset"] is None
    assert section["blocked"][1]["group_position"] is None
    text = format_describe(described(section)).splitlines()
    at = text.index("Blocked on KIP-253 barriers (ordered topic t):")
    assert text[at + 1:] == [
        "  t-4 (member m-1) waits on partition 0 until the group reaches offset 120 (group at offset 57), "
        "blocked for 12 s",
        "  t-5 (member m-2) waits on partition 1 until the group reads it to its end (group position not "
        "reported yet), blocked for 90 s"]


def test_describe_says_when_nothing_is_blocked_and_when_the_coordinator_did_not_answer() -> None:
    empty = format_describe(described(ordered_section(["t", "u"], api.OrderedGroupDescription(0, 2), NOW_MS)))
    assert empty.splitlines()[-2:] == ["Blocked on KIP-253 barriers (ordered topics t, u):", "  no partition is blocked"]
    refused = ordered_section(["t"], api.OrderedGroupDescription(ErrorCode.NOT_COORDINATOR), NOW_MS)
    assert refused["error"] == "NOT_COORDINATOR"
    assert format_describe(described(refused)).splitlines()[-1] == "  not known: NOT_COORDINATOR"
    assert "None" not in format_describe(described(ordered_section(["t"], None, NOW_MS)))


def test_the_dashboard_shows_the_longest_block_first_aged_at_the_page_time() -> None:
    section = ordered_section(["t"], ANSWER, NOW_MS)
    blocks = model.group_blocks(section, NOW_MS + 3_000)
    assert blocks is not None and blocks["error"] is None and blocks["oldest_s"] == 93.0
    assert [(b["partition"], b["waits_on"], b["until"], b["group_position"], b["blocked_s"])
            for b in blocks["blocked"]] == [("t-5", "t-1", "read to its end", None, 93.0),
                                            ("t-4", "t-0", "offset 120", 57, 15.0)]
    assert blocks["blocked"][1]["text"].endswith("blocked for 15 s")
    assert model.group_blocks(None, NOW_MS) is None  # a group reading no ordered topic
    assert model.group_blocks(ordered_section(["t"], api.OrderedGroupDescription(0, 1), NOW_MS), NOW_MS) == {
        "topics": ["t"], "error": None, "blocked": [], "oldest_s": None}


def samples(metrics: BrokerMetrics) -> dict[tuple[str, str], float]:
    out = {}
    for family in text_string_to_metric_families(metrics.exposition().decode()):
        for s in family.samples:
            if s.name.startswith("odradek_ordered_group"):
                out[(s.name, s.labels["group"])] = s.value
    return out


def test_prometheus_has_a_series_per_blocked_group_only_while_it_is_blocked() -> None:
    metrics = BrokerMetrics()
    blocked = [("g", 2, 90.0), ("h", 1, 3.5)]
    metrics.export_ordered_groups(lambda: list(blocked))
    metrics.export_ordered_groups(lambda: [("other", 9, 9.0)])  # the first source stays: no double series
    assert samples(metrics) == {
        ("odradek_ordered_group_blocked_partitions", "g"): 2, ("odradek_ordered_group_oldest_block_seconds", "g"): 90.0,
        ("odradek_ordered_group_blocked_partitions", "h"): 1, ("odradek_ordered_group_oldest_block_seconds", "h"): 3.5}
    blocked.pop()
    assert set(samples(metrics)) == {("odradek_ordered_group_blocked_partitions", "g"),
                                     ("odradek_ordered_group_oldest_block_seconds", "g")}
