"""Which LeaderAndIsr changes make a follower start over (truncate by leader epoch)."""
from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace

from odradek.broker.fetcher import ReplicaFetcher, ReplicaFetcherManager
from odradek.broker.partition import Partition
from odradek.common.metadata import BrokerInfo, PartitionState, TopicPartition
from odradek.log.log import Log, LogConfig

TP = TopicPartition("t", 0)
B2, B3 = BrokerInfo(2, "h", 9002), BrokerInfo(3, "h", 9003)


class IdleFetcher(ReplicaFetcher):
    def start(self) -> None:  # no task: these tests only look at the bookkeeping
        pass


def follower(tmp_path: Path) -> tuple[Partition, ReplicaFetcherManager, dict[int, ReplicaFetcher]]:
    made: dict[int, ReplicaFetcher] = {}

    def factory(leader: BrokerInfo) -> ReplicaFetcher:
        made[leader.id] = IdleFetcher(1, leader, 500, 1 << 20)
        return made[leader.id]

    return Partition(TP, Log.open(tmp_path / "t-0", LogConfig()), broker_id=1), \
        ReplicaFetcherManager(1, factory), made


def become(p: Partition, manager: ReplicaFetcherManager, leader: BrokerInfo, epoch: int) -> None:
    p.apply_state(PartitionState(TP, 1, leader.id, epoch, (1, 2, 3), epoch, (1, 2, 3)))
    manager.follow(p, leader)


def test_next_epoch_of_the_same_leader_keeps_fetching_without_truncating(tmp_path: Path) -> None:
    p, manager, made = follower(tmp_path)
    become(p, manager, B2, 4)
    made[2]._truncation_done(TP)
    become(p, manager, B2, 5)  # the controller shrank the ISR: same leader, next epoch
    assert TP not in made[2]._truncating and made[2]._states[TP].leader_epoch == 5
    assert TP in made[2]._dirty  # the fetch session is told the new epoch


def test_a_skipped_epoch_or_a_new_leader_truncates_again(tmp_path: Path) -> None:
    p, manager, made = follower(tmp_path)
    become(p, manager, B2, 4)
    made[2]._truncation_done(TP)
    become(p, manager, B2, 6)  # epoch 5 had another leader: our tail may have diverged
    assert TP in made[2]._truncating
    made[2]._truncation_done(TP)
    become(p, manager, B3, 7)
    assert TP not in made[2]._states and TP in made[3]._truncating


def test_a_partition_the_leader_refuses_rests_and_the_next_leader_and_isr_wakes_it(
        tmp_path: Path) -> None:
    """A follower whose LeaderAndIsr lags the leader's gets NOT_LEADER / FENCED_LEADER_EPOCH:
    it leaves the fetch session for a backoff instead of asking again at once, every round."""
    from types import SimpleNamespace

    from odradek.protocol.errors import ErrorCode

    p, manager, made = follower(tmp_path)
    become(p, manager, B2, 4)
    fetcher = made[2]
    fetcher._truncation_done(TP)
    fetcher._apply(fetcher._states[TP], SimpleNamespace(error_code=ErrorCode.FENCED_LEADER_EPOCH))
    assert TP in fetcher._resting and TP in fetcher._leaving
    become(p, manager, B2, 5)
    assert TP not in fetcher._resting and TP in fetcher._dirty


class SwallowingFetcher(ReplicaFetcher):
    """Each round ends the way Python 3.11's wait_for ends when a cancellation lands just as
    its request completes: the CancelledError is swallowed and the round returns normally."""

    rounds = 0
    swallow = True

    async def _truncate_new_partitions(self) -> None:
        pass

    async def _fetch_once(self) -> None:
        self.rounds += 1
        try:
            await asyncio.sleep(0.01)
        except asyncio.CancelledError:
            if not self.swallow:
                raise


def test_close_stops_the_loop_even_when_a_round_swallows_the_cancellation(tmp_path: Path) -> None:
    async def run() -> bool:
        fetcher = SwallowingFetcher(1, B2, 500, 1 << 20)
        # no leader to reach: the rounds are faked, so is the connection
        fetcher._conn = SimpleNamespace(connected=True, close=lambda: None)  # type: ignore[assignment]
        fetcher.add(Partition(TP, Log.open(tmp_path / "t-0", LogConfig()), broker_id=1))
        fetcher.start()
        await asyncio.sleep(0.05)
        closing = asyncio.get_running_loop().create_task(fetcher.close())
        done, _ = await asyncio.wait({closing}, timeout=2)  # hung forever before close set a flag
        fetcher.swallow = False  # let a broken close finish, so the test fails instead of hanging
        fetcher._task.cancel()  # type: ignore[union-attr]
        await closing
        return closing in done

    assert asyncio.run(run())


def test_a_closed_manager_starts_no_fetcher_for_a_late_leader_and_isr(tmp_path: Path) -> None:
    p, manager, made = follower(tmp_path)
    asyncio.run(manager.close())
    become(p, manager, B2, 4)  # the controller still speaks to a broker that is stopping
    assert made == {}


def test_the_coordinators_partitions_have_a_fetcher_of_their_own_per_leader(tmp_path: Path) -> None:
    """__transaction_state and __consumer_offsets are fetched on a second connection to the
    same leader, never behind a response of bulk records (fetcher.lane_of)."""
    made: list[ReplicaFetcher] = []

    def factory(leader: BrokerInfo) -> ReplicaFetcher:
        made.append(IdleFetcher(1, leader, 500, 1 << 20))
        return made[-1]

    manager = ReplicaFetcherManager(1, factory)
    tps = [TopicPartition("t", 0), TopicPartition("t", 1), TopicPartition("__transaction_state", 3),
           TopicPartition("__consumer_offsets", 7)]
    for tp in tps:
        p = Partition(tp, Log.open(tmp_path / f"{tp.topic}-{tp.partition}", LogConfig()), broker_id=1)
        p.apply_state(PartitionState(tp, 1, 2, 4, (1, 2, 3), 4, (1, 2, 3)))
        manager.follow(p, B2)
    assert len(made) == 2 and all(f.leader == B2 for f in made)
    data, coordinators = made
    assert set(data._states) == set(tps[:2]) and set(coordinators._states) == set(tps[2:])
    manager.stop_following(tps[2])
    assert set(coordinators._states) == {tps[3]} and set(data._states) == set(tps[:2])
