"""The ordered workload's clients (`python -m odradek.faults --workload ordered`): KIP-253's
OrderedProducers writing keys with per-key sequence numbers to a topic with
enable.ordered.delivery=true, a group of OrderedConsumer members in processes of their own, and
the topic's partition count changed under them (expansions, deletions) as nemesis faults.

The producers live in the run's process, each in a thread with an OrderedProducer of its own,
as the default workload's producers do: they must survive every fault without being re-made.
The members are processes (faults/ordered_member.py) because killing one with kill -9 is a
fault, and because a member's death must be the nemesis's or an anomaly.
"""
from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions

from odradek.admin.admin_client import metadata_request, send_request
from odradek.client.ordered_metadata import OrderedMetadataClient, OrderedMetadataError, parse_bootstrap
from odradek.client.ordered_producer import OrderedProducer
from odradek.faults.workload import LOGGER, KeyedProducer, decode_value

LIST_OFFSETS, LIST_OFFSETS_VERSION = 2, 4

#: how long the drainer leaves a marked partition's records after first seeing it marked: the
#: time producers refused by the marking take to look for their in-doubt records in it (their
#: in-flight requests answered or timed out, then at most WRITTEN_SETTLE_S of reading)
DRAIN_AFTER_S = 30.0
DELETE_RECORDS, DELETE_RECORDS_VERSION = 21, 1

#: (key, seq): the producer is part of the key ("p1-k3"), so every key has one producer
OrderedValue = tuple[str, int]


class OrderedKeyedProducer(KeyedProducer):
    """KeyedProducer's loop over one OrderedProducer; `acked` is keyed by (key, seq), as the
    ordered checker reads it."""

    name = "ordered-producer"

    def _make_producer(self, config: dict[str, Any]) -> Any:
        return OrderedProducer(config)

    def _value_of(self, raw: bytes) -> OrderedValue:
        _, key, seq = decode_value(raw)
        return key, seq

    def stop(self, flush_timeout_s: float) -> int:
        try:
            return super().stop(flush_timeout_s)
        finally:
            self._producer.close()


class MemberGroup:
    """The group's member processes: slot i runs ``command(i)`` (here `python -m
    odradek.faults.ordered_member`; the groups workload's GroupMembers runs others) appending to
    deliveries-i.txt (its stderr to member-i.log), restarted into the same files."""

    def __init__(self, bootstrap: str, topic: str, group: str, data_dir: Path, members: int) -> None:
        self.bootstrap, self.topic, self.group, self.data_dir = bootstrap, topic, group, data_dir
        self.slots = list(range(members))
        self.procs: dict[int, subprocess.Popen[bytes]] = {}
        self.starts = 0

    def deliveries_file(self, slot: int) -> Path:
        return self.data_dir / f"deliveries-{slot}.txt"

    def log_file(self, slot: int) -> Path:
        return self.data_dir / f"member-{slot}.log"

    def command(self, slot: int) -> list[str]:
        """The member process's command line."""
        return [sys.executable, "-m", "odradek.faults.ordered_member", self.bootstrap, self.group, self.topic,
                f"member-{slot}", str(self.deliveries_file(slot))]

    def start(self, slot: int) -> None:
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
        with open(self.log_file(slot), "ab") as log:
            self.procs[slot] = subprocess.Popen(self.command(slot), stdout=log, stderr=subprocess.STDOUT, env=env,
                                                start_new_session=True)
        self.starts += 1

    def start_all(self) -> None:
        for slot in self.slots:
            self.start(slot)

    def kill(self, slot: int) -> None:
        proc = self.procs[slot]
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait(30)

    def exited(self) -> dict[int, int]:
        """slot -> exit status of the members that ended by themselves (the nemesis restarts
        those it kills before anyone asks)."""
        return {slot: rc for slot, proc in self.procs.items() if (rc := proc.poll()) is not None}

    def dump_stacks(self) -> None:
        """Every running member writes all its threads' stacks (SIGUSR1) and its gates' state
        (SIGUSR2) to its log."""
        for proc in self.procs.values():
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGUSR1)
                os.kill(proc.pid, signal.SIGUSR2)  # and what its gates wait on

    def stop(self, timeout_s: float = 30.0) -> dict[int, int | None]:
        """SIGTERM to every member (a clean close); slot -> exit status (None: had to be killed)."""
        for proc in self.procs.values():
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGTERM)
        out: dict[int, int | None] = {}
        for slot, proc in self.procs.items():
            try:
                out[slot] = proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait(30)
                out[slot] = None
        return out

    def files(self) -> list[Path]:
        return [self.deliveries_file(slot) for slot in self.slots]


@dataclass
class TopicChangeLog:
    expanded: int = 0
    shrunk: int = 0
    refused_while_draining: int = 0   # INVALID_PARTITIONS while an earlier deletion drained: "not now"
    not_now: int = 0                  # nothing asked (at the initial count, at the cap, no counts read)
    records_deleted: int = 0          # DeleteRecords of drained marked partitions
    failures: list[str] = field(default_factory=list)   # anything else: an anomaly


class TopicChanger:
    """Changes the ordered topic's partition count for the nemesis, and (a thread of its own)
    empties the partitions a deletion marked once the group has committed their ends.

    The cluster removes a marked partition once it is empty; retention would take days, so the
    drainer issues DeleteRecords up to the partition's high watermark once the group's committed
    offset reached it (no record is written to a marked partition, and no record is deleted
    that the group has not committed). Without it the first deletion would refuse every later
    change of the count.

    It waits DRAIN_AFTER_S after it first sees a partition marked, as docs/architecture.md asks
    of operators: a producer refused by the marking reads the partition to learn which refused
    records were written after all (client/producer_writes.py), and a record deleted before it
    is read is sent again. Measured without the wait (seed 1): DeleteRecords 1.5 s after the
    marking, 0.01 s before the producers' checks, and the 8 records at offsets 56-63, in doubt for
    three producers, written twice."""

    def __init__(self, bootstrap: str, topic: str, group: str, initial: int, max_partitions: int) -> None:
        self.topic, self.group, self.initial, self.max_partitions = topic, group, initial, max_partitions
        self.bootstrap = bootstrap
        # confluent_kafka types conf values as str/int/float/bool; its "logger" setting takes a Logger
        self.admin = AdminClient({"bootstrap.servers": bootstrap, "logger": LOGGER})  # type: ignore[dict-item]
        self._metadata = OrderedMetadataClient(parse_bootstrap(bootstrap), "faults-topic-changer")
        self._lock = threading.Lock()   # the metadata connection is one socket
        self.log = TopicChangeLog()
        self._stop = threading.Event()
        self._drainer = threading.Thread(target=self._drain_forever, name="drainer", daemon=True)
        self._deleted_to: dict[int, int] = {}
        self._marked_since: dict[int, float] = {}  # partition -> when the drainer first saw it marked
        # the group's committed offsets through a consumer of the group that never joins it:
        # under faults, librdkafka 2.16's AdminClient.list_consumer_group_offsets crashed the
        # process (SIGSEGV in rd_kafka_cgrp_op, reached from rd_kafka_handle_OffsetFetch on the
        # admin client's thread: an admin client has no consumer group)
        self._offsets = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                                  "logger": LOGGER})
        self._offsets_open = True

    def counts(self) -> tuple[int, int] | None:
        """(undeleted_partition_count, partition count) as a broker's metadata holds them."""
        with self._lock:
            try:
                c = self._metadata.counts([self.topic])[self.topic]
            except (OrderedMetadataError, OSError):
                return None
        if c.error_code or not c.ordered:
            return None
        return c.undeleted_partition_count, c.partition_count

    # -- the nemesis's faults ----------------------------------------------------------------------

    def expand(self, rng: random.Random) -> str:
        counts = self.counts()
        if counts is None:
            self.log.not_now += 1
            return "not now: no broker answered the counts"
        undeleted, total = counts
        target = min(undeleted + rng.randint(1, 4), self.max_partitions)
        if target <= undeleted:
            self.log.not_now += 1
            return f"not now: at the cap of {self.max_partitions} partitions"
        return self._change(undeleted, total, target)

    def shrink(self, rng: random.Random) -> str:
        counts = self.counts()
        if counts is None:
            self.log.not_now += 1
            return "not now: no broker answered the counts"
        undeleted, total = counts
        if undeleted <= self.initial:
            self.log.not_now += 1
            return f"not now: at the initial count {self.initial}"
        return self._change(undeleted, total, rng.randint(self.initial, undeleted - 1))

    def _change(self, undeleted: int, total: int, target: int) -> str:
        """CreatePartitions to `target`, retried through controller moves; INVALID_PARTITIONS
        while the counts showed a deletion draining is the broker's "not now"."""
        deadline = time.monotonic() + 60
        what = f"{undeleted} -> {target}"
        while True:
            try:
                self.admin.create_partitions([NewPartitions(self.topic, target)],
                                             operation_timeout=10, request_timeout=20)[self.topic].result(40)
                break
            except KafkaException as exc:
                err = exc.args[0]
                if err.code() == KafkaError.INVALID_PARTITIONS:
                    # the counts may not show the drain: partitions being removed leave every
                    # broker's Metadata before the topic's assignment (TopicDeletionManager's
                    # LeaderDuringDelete), and only the refusal names them then
                    if total > undeleted or "marked for deletion" in (err.str() or ""):
                        self.log.refused_while_draining += 1
                        return f"{what} refused while partitions {undeleted}-{total - 1} drain (not now)"
                    if self._became(target):
                        break  # an earlier attempt whose answer was lost did it
                    self.log.failures.append(f"{what}: refused with no deletion draining: {err}")
                    return f"{what} refused: {err}"
                if time.monotonic() > deadline:
                    self.log.failures.append(f"{what}: {err}")
                    return f"{what} failed: {err}"
                time.sleep(1.0)
        if target > undeleted:
            self.log.expanded += 1
        else:
            self.log.shrunk += 1
        return what

    def _became(self, target: int, wait_s: float = 5.0) -> bool:
        """Whether the undeleted count is ``target`` now, asked again for ``wait_s``: the broker
        answering may not have heard of the change an earlier attempt made yet."""
        deadline = time.monotonic() + wait_s
        while True:
            now = self.counts()
            if now is not None and now[0] == target:
                return True
            if time.monotonic() > deadline:
                return False
            time.sleep(0.2)

    # -- the drainer -------------------------------------------------------------------------------

    def start(self) -> None:
        self._drainer.start()

    def stop(self) -> None:
        self._stop.set()
        self._drainer.join(60)
        self._metadata.close()
        if self._offsets_open and not self._drainer.is_alive():
            self._offsets_open = False
            self._offsets.close()

    def _drain_forever(self) -> None:
        while not self._stop.wait(1.0):
            try:
                self.drain_once()
            except Exception as exc:  # noqa: BLE001 - a fault in force: the next round tries again
                LOGGER.info("drainer: %r", exc)

    def drain_once(self) -> None:
        counts = self.counts()
        if counts is None:
            return
        now = time.monotonic()  # a number marked again after its removal starts a new wait
        self._marked_since = {p: self._marked_since.get(p, now) for p in range(counts[0], counts[1])}
        marked = [TopicPartition(self.topic, p) for p, since in self._marked_since.items()
                  if now - since >= DRAIN_AFTER_S]
        if not marked:
            return
        committed = {tp.partition: tp.offset for tp in self._offsets.committed(marked, timeout=10)
                     if tp.error is None}
        ends = self._high_watermarks([tp.partition for tp in marked])
        ready = [TopicPartition(self.topic, p, end) for p, end in ends.items()
                 if end > 0 and committed.get(p, -1) >= end and self._deleted_to.get(p) != end]
        if not ready:
            return
        LOGGER.info("drainer: DeleteRecords %s (the group committed their ends)",
                    ", ".join(f"{tp.partition} to {tp.offset}" for tp in ready))
        for partition, offset in self._delete_records({tp.partition: tp.offset for tp in ready}).items():
            self._deleted_to[partition] = offset
            self.log.records_deleted += 1

    def _leaders(self, partitions: list[int]) -> dict[str, list[int]]:
        """leader address -> the partitions it leads, from a broker's Metadata."""
        metadata = metadata_request(self.bootstrap, [self.topic], 10)
        brokers = {b.node_id: f"{b.host}:{b.port}" for b in metadata.brokers}
        out: dict[str, list[int]] = {}
        for t in metadata.topics:
            for p in t.partitions:
                if p.partition_index in partitions and p.leader_id in brokers:
                    out.setdefault(brokers[p.leader_id], []).append(p.partition_index)
        return out

    def _delete_records(self, offsets: dict[int, int]) -> dict[int, int]:
        """DeleteRecords up to each offset, asked of each partition's leader (raw requests, for
        the reason _high_watermarks gives: the admin client's delete_records failed the same way
        for partitions created after it started); the partitions that answered without error."""
        done: dict[int, int] = {}
        for leader, asked in self._leaders(list(offsets)).items():
            body = {"topics": [{"name": self.topic, "partitions": [
                {"partition_index": p, "offset": offsets[p]} for p in asked]}], "timeout": 10000}
            try:
                response = send_request(leader, DELETE_RECORDS, DELETE_RECORDS_VERSION, body, 20)
            except (OSError, ValueError) as exc:
                LOGGER.info("drainer: DeleteRecords at %s: %r", leader, exc)
                continue
            for t in response.topics:
                for p in t.partitions:
                    if p.error_code == 0:
                        done[p.partition_index] = offsets[p.partition_index]
                    else:
                        LOGGER.info("drainer: DeleteRecords of partition %d: error %s", p.partition_index,
                                    p.error_code)
        return done

    def _high_watermarks(self, partitions: list[int]) -> dict[int, int]:
        """ListOffsets (latest) of each partition, asked of its leader: with raw requests, since
        neither librdkafka client here could: a consumer's metadata does not follow partitions
        created after it started for a topic it is not assigned (_UNKNOWN_PARTITION), and the
        admin client's list_offsets answered "No leaders found" for minutes for partitions
        whose leaders every broker's Metadata named. A partition whose leader does not answer
        is left out (the next round asks again)."""
        out: dict[int, int] = {}
        for leader, asked in self._leaders(partitions).items():
            body = {"replica_id": -1, "isolation_level": 0, "topics": [{"name": self.topic, "partitions": [
                {"partition_index": p, "current_leader_epoch": -1, "timestamp": -1} for p in asked]}]}
            try:
                response = send_request(leader, LIST_OFFSETS, LIST_OFFSETS_VERSION, body, 10)
            except (OSError, ValueError):
                continue
            out.update({p.partition_index: p.offset for t in response.topics for p in t.partitions
                        if p.error_code == 0 and p.offset >= 0})
        return out
