"""KIP-253 blocks made visible to operators, on a real cluster: a joined group member reports
blocked partitions in its ConsumerGroupPosition requests, as the ordered consumer does every
heartbeat, and the group's coordinator shows them through DescribeOrderedGroups, `odradek groups
describe` (text and --json), its Prometheus endpoint and the dashboard's group reader; a block
the member stops reporting disappears from all of them, and a group on a plain topic gets no
section."""
from __future__ import annotations

import json
import time
import urllib.request
import uuid

import pytest
from clients import create_topic
from polling import wait_until

from cli_helpers import run
from odradek.admin.consumer_group_command import GroupAdmin
from odradek.client.group_membership import GroupMember
from odradek.client.ordered_metadata import OrderedMetadataClient
from odradek.cluster.local_cluster import LocalCluster
from odradek.common.metadata import TopicPartition
from odradek.protocol import ordered_delivery_api as api
from odradek.protocol.errors import ErrorCode
from odradek.ui import model
from odradek.ui.kafka_reader import read_groups

pytestmark = pytest.mark.integration


def addresses(c: LocalCluster) -> list[tuple[str, int]]:
    return [(c.host, c.broker_port(b)) for b in c.broker_ids]


def everything_to_me(subscriptions: dict[str, list[str]], partitions: int) -> dict[str, list[TopicPartition]]:
    [(member, topics)] = subscriptions.items()
    return {member: [TopicPartition(t, p) for t in topics for p in range(partitions)]}


def position_request(member: GroupMember, reported: dict[TopicPartition, int], requested: tuple[TopicPartition, ...],
                     blocked: dict[TopicPartition, api.BlockedPartition]) -> api.ConsumerGroupPositionResponse:
    """One ConsumerGroupPosition to the coordinator, as the ordered consumer's heartbeat sends it."""
    request = api.ConsumerGroupPositionRequest(
        member.group_id, member.generation_id, member.member_id, None,
        {tp: api.ReportedPosition(p) for tp, p in reported.items()}, requested, blocked)
    frame = member.coordinator_request_frame(lambda corr: api.encode_request(request, corr, "test"))
    _, body = api.parse_response_header(frame)
    response = api.decode_response(api.API_CONSUMER_GROUP_POSITION, 0, body)
    assert isinstance(response, api.ConsumerGroupPositionResponse)
    return response


def ordered_samples(url: str, group: str) -> dict[str, float]:
    """The odradek_ordered_group_* samples of ``group`` in one scrape."""
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    out = {}
    for line in text.splitlines():
        if line.startswith("odradek_ordered_group_") and f'group="{group}"' in line:
            name, value = line.split("{")[0], line.rsplit(" ", 1)[1]
            out[name] = float(value)
    return out


def test_a_members_blocks_show_in_describe_metrics_and_the_dashboard(cluster: LocalCluster) -> None:
    boot = cluster.bootstrap_servers
    topic, plain = f"ord-{uuid.uuid4().hex[:8]}", f"plain-{uuid.uuid4().hex[:8]}"
    group, plain_group = f"g-{uuid.uuid4().hex[:8]}", f"p-{uuid.uuid4().hex[:8]}"
    create_topic(boot, topic, 4, 2, {"enable.ordered.delivery": "true"})
    create_topic(boot, plain, 2, 2)
    t0, t1, t2, t3 = (TopicPartition(topic, p) for p in range(4))
    member = GroupMember(addresses(cluster), group, "blocks-test", lambda s: everything_to_me(s, 4),
                         heartbeat_interval_ms=1000)
    other = GroupMember(addresses(cluster), plain_group, "blocks-test", lambda s: everything_to_me(s, 2),
                        heartbeat_interval_ms=1000)
    metadata = OrderedMetadataClient(addresses(cluster), "blocks-test")
    try:
        assert len(member.join([topic], timeout_s=60).partitions) == 4
        other.join([plain], timeout_s=60)
        other.commit_offsets({TopicPartition(plain, 0): (3, -1)})
        member.commit_offsets({t0: (10, -1)})
        now_ms = int(time.time() * 1000)
        blocked = {t2: api.BlockedPartition(0, 120, now_ms - 30_000),  # split from t0: waits for offset 120
                   t3: api.BlockedPartition(1, api.READ_TO_END, now_ms - 5_000)}  # waits for t1 read to its end
        asked = position_request(member, {}, (t0, t1), blocked)
        assert asked.error_code == ErrorCode.NONE and set(asked.wanted) == {t0, t1}
        assert position_request(member, {t0: 57, t1: 8}, (t0, t1), blocked).error_code == ErrorCode.NONE

        # the API itself, at the coordinator that FindCoordinator names
        described = metadata.describe_groups([group, "no-such-group"])
        assert described is not None
        assert described["no-such-group"].error_code == ErrorCode.GROUP_ID_NOT_FOUND
        mine = described[group]
        assert mine.error_code == ErrorCode.NONE and mine.generation_id == member.generation_id
        assert mine.blocked == {
            t2: api.OrderedGroupBlock(member.member_id, 0, 120, 57, now_ms - 30_000),
            t3: api.OrderedGroupBlock(member.member_id, 1, api.READ_TO_END, 8, now_ms - 5_000)}

        # `odradek groups describe`, text and --json, for both groups at once
        shown = run("groups", "describe", group, plain_group, "--bootstrap-server", boot)
        assert shown.returncode == 0, shown.stderr
        lines = shown.stdout.splitlines()
        at = lines.index(f"Blocked on KIP-253 barriers (ordered topic {topic}):")
        assert lines[at + 1].startswith(f"  {topic}-2 (member {member.member_id}) waits on partition 0 until the "
                                        f"group reaches offset 120 (group at offset 57), blocked for ")
        assert lines[at + 2].startswith(f"  {topic}-3 (member {member.member_id}) waits on partition 1 until the "
                                        f"group reads it to its end (group at offset 8), blocked for ")
        assert sum("Blocked on KIP-253" in line for line in lines) == 1  # none for the plain group
        as_json = run("groups", "describe", group, plain_group, "--json", "--bootstrap-server", boot)
        assert as_json.returncode == 0, as_json.stderr
        by_group = {d["group"]: d for d in json.loads(as_json.stdout)}
        assert "ordered" not in by_group[plain_group]
        section = by_group[group]["ordered"]
        assert section["topics"] == [topic] and section["error"] is None
        assert [(b["partition"], b["waits_on"], b["barrier_offset"], b["read_to_end"], b["group_position"])
                for b in section["blocked"]] == [(2, 0, 120, False, 57), (3, 1, None, True, 8)]
        assert section["blocked"][0]["blocked_s"] >= 30

        # the coordinator's Prometheus series
        coordinator = member.coordinator_id
        assert coordinator is not None
        url = cluster.metrics_url(coordinator)
        assert url is not None
        series = ordered_samples(url, group)
        assert series["odradek_ordered_group_blocked_partitions"] == 2
        assert series["odradek_ordered_group_oldest_block_seconds"] >= 30

        # the dashboard's group reader (its child process runs exactly this) and its model
        rows = {r["group"]: r for r in read_groups(GroupAdmin(boot, 10), time.monotonic() + 60)}
        blocks = model.group_blocks(rows[group]["ordered"], time.time() * 1000)
        assert blocks is not None and [b["partition"] for b in blocks["blocked"]] == [f"{topic}-2", f"{topic}-3"]
        assert rows[plain_group]["ordered"] is None

        # the blocks end: the next request carries an empty set, and every view follows
        position_request(member, {t0: 130}, (t1,), {})
        wait_until(lambda: ordered_samples(url, group) == {}, 30, "the group's block series to go")
        cleared = run("groups", "describe", group, "--bootstrap-server", boot)
        assert cleared.returncode == 0, cleared.stderr
        assert cleared.stdout.splitlines()[-1] == "  no partition is blocked"
    finally:
        metadata.close()
        member.close()
        other.close()
