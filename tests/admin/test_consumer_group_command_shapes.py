"""The pure parts of `odradek groups`: --by-duration's ISO 8601 durations as Java's
Duration.parse reads them (what kafka-consumer-groups.sh takes), --from-file's CSV as
kafka-consumer-groups.sh --export writes it, and the text views' wording of empty results."""
from __future__ import annotations

import pytest

from odradek.admin.consumer_group_command import (
    format_describe,
    format_list,
    format_members,
    format_offset_deletion,
    format_plan_csv,
    format_state,
    parse_duration_ms,
    parse_offsets_csv,
)

HOUR = 3_600_000


@pytest.mark.parametrize("text, ms", [
    ("PT1H", HOUR), ("P1D", 24 * HOUR), ("P1DT2H3M4.5S", 26 * HOUR + 3 * 60_000 + 4_500),
    ("PT20.345S", 20_345), ("pt15m", 15 * 60_000), ("-PT6H3M", -(6 * HOUR + 3 * 60_000)),
    ("PT-6H3M", -6 * HOUR + 3 * 60_000), ("PT-0.5S", -500), ("PT0S", 0),
])
def test_durations_as_java_reads_them(text: str, ms: int) -> None:
    assert parse_duration_ms(text) == ms


@pytest.mark.parametrize("text", ["", "P", "PT", "P1DT", "1H", "PT1H30", "P1W", "P1Y", "PT1.5H", "soon"])
def test_not_a_duration(text: str) -> None:
    with pytest.raises(ValueError, match="ISO 8601 duration"):
        parse_duration_ms(text)


def test_offsets_csv_of_one_group_and_of_several() -> None:
    assert parse_offsets_csv("t,1,5\nt,0,3\n\nu,0,0\n", "g") == [("t", 0, 3), ("t", 1, 5), ("u", 0, 0)]
    assert parse_offsets_csv("g,t,0,3\nh,t,0,9\ng, t ,1,4\n", "g") == [("t", 0, 3), ("t", 1, 4)]
    assert parse_offsets_csv("t,0,3\nt,0,4\n", "g") == [("t", 0, 4)]  # the later line wins
    assert parse_offsets_csv("", "g") == []


@pytest.mark.parametrize("text, line", [
    ("t,0\n", 1), ("t,0,3\nt,x,1\n", 2), ("t,0,-1\n", 1), (",0,1\n", 1), ("t,0,1,2,3\n", 1), ("t,0,1.5\n", 1),
])
def test_offsets_csv_names_the_bad_line(text: str, line: int) -> None:
    with pytest.raises(ValueError, match=f"line {line}: expected topic,partition,offset"):
        parse_offsets_csv(text, "g")


def test_plan_csv_is_what_the_csv_parser_reads() -> None:
    plan = [{"topic": "t", "partition": 0, "current": None, "new": 7}, {"topic": "u", "partition": 2,
                                                                         "current": 1, "new": 0}]
    assert parse_offsets_csv(format_plan_csv(plan), "g") == [("t", 0, 7), ("u", 2, 0)]


GROUP = {"group": "g", "state": "Empty", "protocol_type": "consumer", "assignor": "", "coordinator": 2,
         "coordinator_address": "127.0.0.1:9093", "members": [], "offsets": []}
MEMBER = {"member_id": "m-1", "client_id": "c", "host": "/127.0.0.1", "group_instance_id": None,
          "assignment": [{"topic": "t", "partition": 0}, {"topic": "t", "partition": 2}, {"topic": "u", "partition": 0}]}


def test_empty_results_say_so() -> None:
    assert format_list([]) == "no consumer groups"
    assert format_describe(GROUP).splitlines() == [
        "group g: Empty, 0 members, assignor -, coordinator 2", "", "consumer group g has no committed offsets"]
    assert format_members([GROUP]) == "consumer group g has no active members"
    assert format_state([{"group": "x", "error": "consumer group 'x' does not exist"}]) == ""


def test_members_and_state_views() -> None:
    stable = {**GROUP, "state": "Stable", "assignor": "range", "members": [MEMBER]}
    lines = format_members([stable, GROUP], verbose=True).splitlines()
    assert [line.split() for line in lines] == [
        ["Group", "MemberId", "ClientId", "Host", "Partitions", "Assignment"],
        ["g", "m-1", "c", "/127.0.0.1", "3", "t(0,2),u(0)"],
        ["consumer", "group", "g", "has", "no", "active", "members"]]
    assert format_state([stable]).splitlines()[1].split() == ["g", "127.0.0.1:9093", "(2)", "range", "Stable", "1"]
    assert "1 member," in format_describe({**stable, "offsets": []})


def test_offset_deletion_per_partition() -> None:
    rows = format_offset_deletion([{"topic": "t", "partition": 0, "error": None},
                                   {"topic": "t", "partition": 1, "error": "GROUP_SUBSCRIBED_TO_TOPIC"}])
    assert [line.split() for line in rows.splitlines()] == [
        ["Topic", "Partition", "Status"], ["t", "0", "deleted"], ["t", "1", "GROUP_SUBSCRIBED_TO_TOPIC"]]
