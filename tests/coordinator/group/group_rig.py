"""A GroupCoordinator of one `__consumer_offsets` partition over a real log, on virtual time: the
calls a client would make, and a clock that moves only when a test advances it (Kafka's
GroupCoordinatorTest with MockTime and MockTimer). JoinGroup and SyncGroup answer with a future,
done at once or when the rebalance gets there, so a test reads every step in order."""
from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from odradek.broker.partition import Partition
from odradek.common.clock import VirtualClock
from odradek.common.metadata import PartitionState, TopicPartition
from odradek.coordinator.group.group_coordinator import GroupConfig, GroupCoordinator, JoinGroupRequest
from odradek.coordinator.group.group_metadata import GroupMetadata, JoinResult, SyncResult
from odradek.coordinator.group.group_metadata_manager import OFFSETS_TOPIC, GroupMetadataManager
from odradek.coordinator.scheduler import VirtualScheduler
from odradek.log.log import Log, LogConfig
from odradek.protocol.errors import ErrorCode

START_MS = 1_700_000_000_000
SUBSCRIPTION = b"\x00\x01\x00\x00\x00\x01\x00\x01t\xff\xff\xff\xff"  # ConsumerProtocolSubscription v1: topic "t"
TP = TopicPartition("t", 0)
OFFSETS_TP = TopicPartition(OFFSETS_TOPIC, 0)
INITIAL_DELAY_MS = 50
REBALANCE_MS = 1_000
SESSION_MS = 10_000
COMMIT_TIMEOUT_MS = 5_000


class Rig:
    def __init__(self, data_dir: Path, isr: tuple[int, ...] = (0,), **config: Any) -> None:
        """``isr``: the offsets partition's; with a follower in it, writes wait for the commit
        timeout (the follower never fetches)."""
        self.clock = VirtualClock.frozen(START_MS)
        self.scheduler = VirtualScheduler(self.clock)
        self.partition = Partition(OFFSETS_TP, Log.open(data_dir / f"{OFFSETS_TOPIC}-0", LogConfig()), broker_id=0)
        self.partition.apply_state(PartitionState(OFFSETS_TP, 1, 0, 0, isr, 0, isr))
        self.manager = GroupMetadataManager(lambda: 1, lambda tp: self.partition if tp == OFFSETS_TP else None,
                                            COMMIT_TIMEOUT_MS, 1 << 20, self.clock, self.scheduler)
        self.c = GroupCoordinator(self.manager, GroupConfig(**{"initial_rebalance_delay_ms": INITIAL_DELAY_MS,
                                                               "min_session_timeout_ms": 100, **config}),
                                  self.clock, self.scheduler)

    def group(self, group_id: str = "g") -> GroupMetadata:
        group = self.manager.get(group_id)
        assert group is not None, f"no group {group_id}"
        return group

    def advance(self, ms: int) -> None:
        self.scheduler.advance(ms)

    async def load(self, leader_epoch: int = 0) -> None:
        """This broker became the offsets partition's leader: read it back."""
        self.c.on_election(0, leader_epoch)
        await self.scheduler.run_tasks()

    def join(self, member_id: str = "", group: str = "g", instance: str | None = None,
             protocols: list[tuple[str, bytes]] | None = None, protocol_type: str = "consumer",
             session_ms: int = SESSION_MS, rebalance_ms: int = REBALANCE_MS) -> asyncio.Future[JoinResult]:
        return self.c.join_group(JoinGroupRequest(
            group_id=group, member_id=member_id, group_instance_id=instance, protocol_type=protocol_type,
            protocols=tuple(protocols or [("range", SUBSCRIPTION)]), session_timeout_ms=session_ms,
            rebalance_timeout_ms=rebalance_ms, client_id="client", client_host="/127.0.0.1",
            require_known_member_id=True, supports_skip_assignment=False))

    def join_new(self, **kw: Any) -> asyncio.Future[JoinResult]:
        """KIP-394's two steps: MEMBER_ID_REQUIRED, then the join with the given id (static
        members skip the first)."""
        first = self.join(**kw)
        if not first.done() or first.result().error != ErrorCode.MEMBER_ID_REQUIRED:
            return first
        return self.join(member_id=first.result().member_id, **kw)

    def sync(self, member_id: str, generation: int = 1, group: str = "g", instance: str | None = None,
             assignments: dict[str, bytes] | None = None) -> asyncio.Future[SyncResult]:
        return self.c.sync_group(group, generation, member_id, instance, None, None, assignments or {})

    async def stable_member(self, assignment: bytes = b"", **kw: Any) -> str:
        """A lone member of a new group, joined and synced: the group is Stable at generation 1."""
        joining = self.join_new(**kw)
        self.advance(INITIAL_DELAY_MS)
        member_id = (await joining).member_id
        synced = await self.sync(member_id, instance=kw.get("instance"), assignments={member_id: assignment})
        assert synced.error == ErrorCode.NONE
        return member_id

    async def stable_members(self, count: int) -> list[str]:
        """``count`` members of a new group, joined together and synced: the leader first."""
        joining = [self.join_new() for _ in range(count)]
        self.advance(REBALANCE_MS)
        leader = joining[0].result().leader_id
        followers = [j.result().member_id for j in joining if j.result().member_id != leader]
        syncing = [self.sync(f) for f in followers]
        await self.sync(leader, assignments={})
        await asyncio.gather(*syncing)
        return [leader, *followers]


def on_virtual_time(test: Callable[[Rig], Awaitable[None]], tmp_path: Path, **config: Any) -> None:
    """Runs ``test`` against a Rig whose offsets partition is loaded; shuts the coordinator down."""
    async def main() -> None:
        rig = Rig(tmp_path, **config)
        await rig.load()
        try:
            await test(rig)
        finally:
            rig.c.shutdown()
    asyncio.run(main())
