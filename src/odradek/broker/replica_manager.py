"""The partitions this broker hosts, and the controller's requests that change their roles.

It fences the controller twice, as Kafka does: a request from an older controller epoch is
refused whole, and a partition state with an older leader epoch than the one applied is skipped.
A request addressed to an older incarnation of this broker (broker epoch) is refused as well.
"""
from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path
from typing import Any, Awaitable, Callable, Iterable

from odradek.broker.fetcher import ReplicaFetcherManager
from odradek.broker.partition import Partition
from odradek.broker.topic_admin import TopicError, validate_topic_name
from odradek.common.gc_policy import collection_paused, paused_for
from odradek.common.metadata import BrokerInfo, LeaderAndIsr, PartitionState, TopicAssignment, TopicPartition
from odradek.log.checkpoint import read_offsets, write_offsets
from odradek.log.log import LogConfig
from odradek.log.log_manager import LogManager
from odradek.protocol.controller_api import ControllerResponse, LeaderAndIsrRequest, StopReplicaRequest
from odradek.protocol.errors import ErrorCode

log = logging.getLogger("odradek.broker.replica_manager")

HW_CHECKPOINT = "replication-offset-checkpoint"

TopicConfigLoader = Callable[[list[str]], Awaitable[dict[str, dict[str, str]]]]
#: topic -> its id in ZooKeeper (absent: the topic does not exist there)
TopicIdLoader = Callable[[list[str]], Awaitable[dict[str, str]]]


class ReplicaManager:
    def __init__(self, broker_id: int, data_dir: Path, log_manager: LogManager, default_log_config: LogConfig,
                 default_min_isr: int, fetchers: ReplicaFetcherManager, load_topic_configs: TopicConfigLoader,
                 zk: Any, replica_lag_time_max_ms: int, live_broker_ids: Callable[[], set[int]]) -> None:
        self.broker_id = broker_id
        self._live_broker_ids = live_broker_ids
        self.zk = zk  # odradek.zk.client.KafkaZkClient, used only for the leader's ISR writes
        self.replica_lag_time_max_s = replica_lag_time_max_ms / 1000
        self._next_shrink_check = 0.0
        self.broker_epoch = -1
        self.controller_epoch = -1
        self.data_dir = data_dir
        self.log_manager = log_manager
        self.default_log_config = default_log_config
        self.default_min_isr = default_min_isr
        self.fetchers = fetchers
        self._load_topic_configs = load_topic_configs
        self._partitions: dict[TopicPartition, Partition] = {}
        self._may_expand: set[TopicPartition] = set()  # a follower fetched caught up (Partition)
        self._checkpointed_hw = _read_hw_checkpoint(data_dir / HW_CHECKPOINT)
        # Kafka's onLeadershipChange: told (partitions now led, partitions no longer led) after
        # each LeaderAndIsr and StopReplica; the group coordinator follows __consumer_offsets
        self.on_leadership_change: Callable[[list[Partition], list[Partition]], None] | None = None
        self.isr_shrinks = self.isr_expands = 0  # ISR changes this broker made (its metrics)
        #: reads topic ids for partitions new to this broker (Kafka 2.8+ gets them in the
        #: LeaderAndIsr itself): a log on disk under another id is of a deleted incarnation
        self.load_topic_ids: TopicIdLoader | None = None
        #: KIP-253: whether a topic has ordered delivery (the controller named its count); the
        #: state znodes of such a topic carry the ordering maps, which an ISR write must keep
        self.is_ordered_topic: Callable[[str], bool] = lambda topic: False

    def get(self, tp: TopicPartition) -> Partition | None:
        return self._partitions.get(tp)

    def partitions(self) -> list[Partition]:
        return list(self._partitions.values())

    def fence(self, controller_epoch: int, broker_epoch: int) -> ErrorCode | None:
        """The error for a controller request we must ignore, or None (and remember the epoch)."""
        if controller_epoch < self.controller_epoch:
            return ErrorCode.STALE_CONTROLLER_EPOCH
        if broker_epoch != -1 and broker_epoch < self.broker_epoch:
            # only an older incarnation is stale: a newer epoch is our own fresh registration,
            # which the controller may have seen before ZooKeeper's reply reached us (Kafka's rule)
            return ErrorCode.STALE_BROKER_EPOCH
        self.controller_epoch = controller_epoch
        return None

    def become_leader_or_follower(
        self, req: LeaderAndIsrRequest
    ) -> ControllerResponse | Awaitable[ControllerResponse]:
        """The response at once, unless partitions of topics new to this broker need their
        configs read from ZooKeeper first (then an awaitable). Answering in the same loop
        callback matters: a LeaderAndIsr wakes thousands of fetch sessions and fetchers, and a
        response written after their callbacks reaches the controller late (0.3 s)."""
        stale = self.fence(req.controller_epoch, req.broker_epoch)
        if stale is not None:
            log.warning("ignoring LeaderAndIsr from controller %d epoch %d: %s",
                        req.controller_id, req.controller_epoch, stale.name)
            return ControllerResponse(int(stale), {})
        new_topics = sorted({s.tp.topic for s in req.partition_states if s.tp not in self._partitions})
        if not new_topics:
            return self._become_leader_or_follower(req, {})
        return self._with_configs(req, new_topics)

    async def _with_configs(self, req: LeaderAndIsrRequest, topics: list[str]) -> ControllerResponse:
        if self.load_topic_ids is None:
            configs, ids = await self._load_topic_configs(topics), None
        else:
            configs, ids = await asyncio.gather(self._load_topic_configs(topics),
                                                self.load_topic_ids(topics))
        # a newer controller may have spoken while we read: its epoch fences this request now
        stale = self.fence(req.controller_epoch, req.broker_epoch)
        if stale is not None:
            return ControllerResponse(int(stale), {})
        return self._become_leader_or_follower(req, configs, ids)

    def _become_leader_or_follower(self, req: LeaderAndIsrRequest,
                                   configs: dict[str, dict[str, str]],
                                   topic_ids: dict[str, str] | None = None) -> ControllerResponse:
        started = time.perf_counter()
        errors: dict[TopicPartition, int] = {}
        leaders = {b.id: b for b in req.live_leaders}
        debug = log.isEnabledFor(logging.DEBUG)
        with collection_paused():
            for state in req.partition_states:
                errors[state.tp] = int(self._apply(state, configs.get(state.tp.topic, {}), leaders,
                                                   debug, topic_ids))
        applied = [s for s in req.partition_states if errors[s.tp] == ErrorCode.NONE]
        led = sum(1 for s in applied if s.leader == self.broker_id)
        if self.on_leadership_change is not None:
            self.on_leadership_change([self._partitions[s.tp] for s in applied if s.leader == self.broker_id],
                                      [self._partitions[s.tp] for s in applied if s.leader != self.broker_id])
        log.info("LeaderAndIsr from controller %d (epoch %d): leader of %d, follower of %d, %d skipped "
                 "in %.0f ms", req.controller_id, req.controller_epoch, led, len(applied) - led,
                 len(errors) - len(applied), (time.perf_counter() - started) * 1000)
        return ControllerResponse(int(ErrorCode.NONE), errors)

    def _apply(self, state: PartitionState, topic_config: dict[str, str],
               leaders: dict[int, BrokerInfo], debug: bool = False,
               topic_ids: dict[str, str] | None = None) -> ErrorCode:
        if self.broker_id not in state.replicas:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        partition = self._partitions.get(state.tp)
        if partition is None:
            try:  # the name becomes a directory name: "../x" or a NUL must not reach the filesystem
                validate_topic_name(state.tp.topic)
            except TopicError as exc:
                return exc.code
            topic_id = None if topic_ids is None else topic_ids.get(state.tp.topic)
            if topic_ids is not None and topic_id is None:
                # gone from ZooKeeper: nothing will ask for this partition again
                return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            partition = self._create_partition(state.tp, topic_config, topic_id)
        elif state.leader_epoch <= partition.leader_epoch and (
                state.leader_epoch < partition.leader_epoch
                or state.zk_version <= partition.zk_version):
            return ErrorCode.STALE_CONTROLLER_EPOCH  # Kafka's answer to an old leader epoch
        # The same leader epoch at a newer zk version is applied, where Kafka ignores it: the
        # controller rewrote the state znode without a new epoch (KIP-253's marks and maps), and
        # a leader's conditional ISR writes must name that version (a leader keeps its
        # followers' positions, Partition.apply_state); a follower keeps fetching untouched
        # (ReplicaFetcher.next_epoch), as its log is still a prefix of the same leader's.
        if state.leader == self.broker_id:
            self.fetchers.stop_following(state.tp)
            partition.apply_state(state)
            if debug:
                log.debug("%s: leader at epoch %d, isr %s", state.tp, state.leader_epoch,
                          sorted(state.isr))
        else:
            partition.apply_state(state)
            leader = leaders.get(state.leader)
            if leader is None:
                self.fetchers.stop_following(state.tp)
            else:
                self.fetchers.follow(partition, leader)
            if debug:
                log.debug("%s: follower of %d at epoch %d", state.tp, state.leader,
                          state.leader_epoch)
        return ErrorCode.NONE

    def _create_partition(self, tp: TopicPartition, topic_config: dict[str, str],
                          topic_id: str | None = None) -> Partition:
        config = LogConfig.from_topic_config(topic_config, self.default_log_config)
        stored = None if topic_id is None else self.log_manager.topic_id(tp)
        if topic_id is not None:
            if stored is not None and stored != topic_id:
                log.warning("%s: the log on disk belongs to topic id %s, not %s (deleted and "
                            "created again while we were away): deleting it", tp, stored, topic_id)
                self.drop_log(tp)
        log_ = self.log_manager.get_or_create(tp, config)
        if topic_id is not None and stored != topic_id:
            self.log_manager.write_topic_id(tp, topic_id)
        min_isr = int(topic_config.get("min.insync.replicas", self.default_min_isr))
        partition = Partition(tp, log_, self.broker_id, min_isr, self._checkpointed_hw.get(tp, 0),
                              on_isr_candidate=self._may_expand.add)
        self._partitions[tp] = partition
        return partition

    def stop_replicas(self, req: StopReplicaRequest) -> ControllerResponse:
        stale = self.fence(req.controller_epoch, req.broker_epoch)
        if stale is not None:
            return ControllerResponse(int(stale), {})
        stopped = []
        for tp in req.partitions:
            self.fetchers.stop_following(tp)
            partition = self._partitions.get(tp)
            if partition is None:
                # not hosted since this broker started, but with delete its log may be on disk
                # (a topic deleted while this broker was down): it goes too
                continue
            stopped.append(partition)
            if req.delete_partitions:
                del self._partitions[tp]
                partition.close()
            else:
                partition.leader_id = -1
                partition.close()
        if self.on_leadership_change is not None and stopped:
            self.on_leadership_change([], stopped)
        errors: dict[TopicPartition, int] = {}
        if req.delete_partitions:
            errors = self.drop_logs(req.partitions)
            log.info("StopReplica from controller %d deleted %d partitions (%d failed)",
                     req.controller_id, len(req.partitions), sum(1 for e in errors.values() if e))
        return ControllerResponse(int(ErrorCode.NONE), {tp: errors.get(tp, 0) for tp in req.partitions})

    def drop_logs(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """Delete the logs from disk, all at once (LogManager.delete_many), and forget their
        checkpointed high watermarks, which belonged to those logs and must not be applied to
        new ones. Per partition 0, or KAFKA_STORAGE_ERROR if the filesystem refused (the
        controller then retries the deletion when this broker starts again)."""
        errors: dict[TopicPartition, int] = {}
        for tp, result in self.log_manager.delete_many(tps).items():
            if isinstance(result, OSError):
                log.error("%s: deleting the log failed: %s", tp, result)
                errors[tp] = int(ErrorCode.KAFKA_STORAGE_ERROR)
            else:
                self._checkpointed_hw.pop(tp, None)
                errors[tp] = 0
        return errors

    def remove_stale_logs(self, assignments_of: Callable[[set[str]], dict[str, TopicAssignment]]) -> None:
        """Before the broker registers: delete the logs of topics that no longer exist, or
        exist under another topic id (deleted and created again while this broker was down),
        so nothing of an earlier incarnation is ever loaded or served. Logs without a stored
        id (written before ids were kept) stay: nothing tells them apart.

        Also the stray logs of partitions no longer assigned to this broker: a reassignment
        that removed this replica while the broker was down sent its StopReplica to nobody,
        so the log would stay on disk for good (Kafka 2.x leaves such logs; KRaft brokers
        delete them at startup the same way). The assignment's replicas include the ones a
        reassignment in progress is adding or removing, so a replica still taking part is kept.
        ``assignments_of`` reads the topics' znodes (KafkaZkClient.get_topic_assignments;
        blocking)."""
        on_disk = self.log_manager.partitions()
        if not on_disk:
            return
        with paused_for(len(on_disk)):  # every topic's assignment read at once (common/gc_policy.py)
            existing = assignments_of({tp.topic for tp in on_disk})
            stale = []
            for tp in on_disk:
                why = self._why_stale(tp, existing.get(tp.topic))
                if why is not None:
                    log.info("deleting the log of %s: %s", tp, why)
                    stale.append(tp)
            if stale:
                self.drop_logs(stale)

    def _why_stale(self, tp: TopicPartition, assignment: TopicAssignment | None) -> str | None:
        """Why the log of ``tp`` on disk must go before the broker starts, or None to keep it."""
        if assignment is None:
            return "its topic no longer exists"
        stored = self.log_manager.topic_id(tp)
        if stored is not None and stored != assignment.topic_id:
            return f"its topic is now topic id {assignment.topic_id}, the log's is {stored}"
        if self.broker_id not in assignment.partitions.get(tp.partition, ()):
            return "the partition is no longer assigned to this broker (a stray log)"
        return None

    def drop_log(self, tp: TopicPartition) -> None:
        """``drop_logs`` of one partition; an OSError is raised."""
        self.log_manager.delete(tp)
        self._checkpointed_hw.pop(tp, None)

    async def maintain_isr(self) -> None:
        """Shrink and expand the ISRs this broker leads (Kafka's ReplicaManager.maybeShrinkIsr and
        maybeExpandIsr).

        Each new ISR is written conditionally on the partition state's zkVersion. A conflict
        means the controller (or a newer leader) wrote since: we re-read, and if we are no
        longer the leader at our epoch we stop acting as one; so a zombie leader can never
        shrink the ISR to commit alone. The controller learns of the changes through one
        /isr_change_notification znode per round.
        """
        now = time.monotonic()
        # shrinking is checked every half lag time (Kafka's schedule) on every partition;
        # expansion every round, only where a follower fetched caught up since the last one
        shrink = now >= self._next_shrink_check
        if shrink:
            self._next_shrink_check = now + self.replica_lag_time_max_s / 2
        expanding = list(self._may_expand)  # cleared, not replaced: partitions hold its .add
        self._may_expand.clear()
        candidates = (self._partitions.values() if shrink
                      else [p for tp in expanding if (p := self._partitions.get(tp)) is not None])
        live = self._live_broker_ids()
        wanted = {}
        for p in candidates:
            if not p.is_leader:
                continue
            isr = p.isr_change_wanted(self.replica_lag_time_max_s, now, shrink)
            if isr is not None:
                # only a registered broker may join (KIP-841): a follower whose ZooKeeper session
                # expired still fetches, but the controller counts it dead until it re-registers
                p.drop_isr_candidates({r for r in isr if r not in p.isr and r not in live})
                isr = frozenset(r for r in isr if r in p.isr or r in live)
                if isr != p.isr:
                    wanted[p.tp] = (p, isr)
            if p.has_isr_candidates:
                self._may_expand.add(p.tp)  # not admitted yet (a lost write race): next round
        if not wanted:
            return
        writes = {tp: LeaderAndIsr(p.leader_id, p.leader_epoch, tuple(sorted(isr)), p.controller_epoch, p.zk_version)
                  for tp, (p, isr) in wanted.items()}
        results = await asyncio.to_thread(self._write_isrs, writes)
        with paused_for(len(wanted)):  # a failed-over broker back in 33,000 ISRs at 100,000 partitions
            changed = self._apply_isr_writes(wanted, writes, results)
        if changed:
            shown = ", ".join(f"{tp}: {sorted(wanted[tp][1])}" for tp in changed[:5])
            log.info("ISR changed for %d partitions (%s%s)", len(changed), shown, ", ..." if len(changed) > 5 else "")
            await asyncio.to_thread(self.zk.propagate_isr_changes, changed)

    def _apply_isr_writes(self, wanted: dict[TopicPartition, tuple[Partition, frozenset[int]]],
                          writes: dict[TopicPartition, LeaderAndIsr],
                          results: dict[TopicPartition, int | LeaderAndIsr | None]) -> list[TopicPartition]:
        """The ISRs ZooKeeper took, applied; the partitions whose ISR changed."""
        changed = []
        for tp, (partition, isr) in wanted.items():
            result = results[tp]
            if partition.leader_epoch != writes[tp].leader_epoch:
                continue  # a LeaderAndIsr arrived while we wrote; it wins
            if isinstance(result, int):
                log.debug("%s: ISR %s -> %s", tp, sorted(partition.isr), sorted(isr))
                if len(isr) < len(partition.isr):
                    self.isr_shrinks += 1
                else:
                    self.isr_expands += 1
                partition.apply_isr(isr, result)
                changed.append(tp)
            elif result is None or result.leader != self.broker_id or result.leader_epoch != partition.leader_epoch:
                log.warning("%s: no longer leader at epoch %d (ZooKeeper has %s); stepping down",
                            tp, partition.leader_epoch, result)
                partition.step_down()
            else:
                partition.apply_isr(frozenset(result.isr), result.zk_version)
        return changed

    def _write_isrs(self, writes: dict[TopicPartition, LeaderAndIsr]) -> dict[TopicPartition, int | LeaderAndIsr | None]:
        """New zk_version on success, else the state ZooKeeper holds now (None if gone). On a
        worker thread, as a burst when it is large (common/gc_policy.py)."""
        with paused_for(len(writes)):
            return self._write_isrs_now(writes)

    def _write_isrs_now(self, writes: dict[TopicPartition, LeaderAndIsr]) -> dict[TopicPartition, int | LeaderAndIsr | None]:
        self._keep_orderings(writes)
        out: dict[TopicPartition, int | LeaderAndIsr | None] = dict(
            self.zk.conditional_update_partition_states(writes))
        lost = [tp for tp, version in out.items() if version is None]
        if lost:
            current = self.zk.get_partition_states(lost)
            out.update((tp, current.get(tp)) for tp in lost)
        return out

    def _keep_orderings(self, writes: dict[TopicPartition, LeaderAndIsr]) -> None:
        """KIP-253's maps live in the state znode but not in LeaderAndIsr, so before rewriting
        the ISR of an ordered topic's partition the leader reads them back and keeps them.
        The write stays conditional on the version the leader knows: a map read at another
        version is not used, and that write fails as any stale one does. One extra read per
        ISR change, only for ordered topics (which change ISRs as rarely as any other)."""
        ordered = [tp for tp in writes if self.is_ordered_topic(tp.topic)]
        if not ordered:
            return
        for tp, stored in self.zk.get_partition_states(ordered).items():
            wanted = writes[tp]
            if stored.ordering is not None and stored.zk_version == wanted.zk_version:
                writes[tp] = wanted._replace(ordering=stored.ordering)

    def brokers_registered(self, broker_ids: set[int]) -> None:
        """Brokers that (re-)registered: a follower of ours on one of them that caught up
        before we heard of the registration was dropped as a candidate, and an idle
        partition's fetch session would not visit it again, so make its sessions look."""
        for p in self._partitions.values():
            if p.is_leader and any(r in broker_ids and r not in p.isr for r in p.replicas):
                p.wake_fetchers()

    def checkpoint_high_watermarks(self) -> None:
        """Persist high watermarks so a restarted broker does not expose uncommitted data."""
        hws: dict[tuple[str, int], int] = {p.tp: p.high_watermark for p in self._partitions.values()}
        write_offsets(self.data_dir / HW_CHECKPOINT, hws)


def _read_hw_checkpoint(path: Path) -> dict[TopicPartition, int]:
    return {TopicPartition(t, p): o for (t, p), o in read_offsets(path).items()}
