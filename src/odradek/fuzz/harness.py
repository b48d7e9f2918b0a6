"""A real broker's request path, in-process, without ZooKeeper or other brokers.

The broker is wired by ``broker.server.Broker`` itself (its ReplicaManager over a real data
directory, its MetadataCache, its controller-request routing and producer-id allocation), with
three stand-ins at the edges a single process cannot have: ZooKeeper (an in-memory store that
records the topics CreateTopics would create), the controller (a broker that is not controller
answers NotControllerError at once, as the real inactive core does) and follower fetchers (a
LeaderAndIsr that makes this broker follow someone records it instead of connecting to the
address the request names). The controller's own requests make it host the fuzzing topology
(templates.Topology), and real produce requests write its data.
"""
from __future__ import annotations

import asyncio
import hashlib
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

from odradek.broker.config import BrokerConfig
from odradek.broker.context import BrokerContext
from odradek.broker.controller_apis import ControllerApis
from odradek.broker.fetcher import ReplicaFetcherManager
from odradek.broker.kafka_apis import KafkaApis
from odradek.broker.producer_id_manager import ProducerIdManager
from odradek.broker.server import Broker
from odradek.common.clock import VirtualClock
from odradek.common.metadata import BrokerInfo, TopicAssignment, TopicPartition
from odradek.controller.events import NotControllerError
from odradek.fuzz import templates
from odradek.fuzz.clock import new_loop
from odradek.protocol import kio_util
from odradek.zk import paths
from odradek.zk.errors import TopicExistsError

BROKER_ID = 1
OTHER = BrokerInfo(2, "127.0.0.1", 1)  # never connected to: fetchers are stand-ins
CONTROLLER_EPOCH = 7
BROKER_EPOCH = 100
FUZZ_TOPIC_ID = "ZnV6ei10b3BpYy1pZC0wMA"
TOPOLOGY = templates.Topology(BROKER_ID, "127.0.0.1", 1, CONTROLLER_EPOCH, BROKER_EPOCH, other=OTHER)


class MemoryZooKeeper:
    """The KafkaZkClient calls request handlers make, against memory. Topic data goes through
    the real znode encoders, so what a request would have written is still checked."""

    def __init__(self) -> None:
        self.topics: dict[str, bytes] = {}
        self.entity_configs: dict[tuple[str, str], dict[str, str]] = {}
        self._next_producer_id = 0
        self.deletions: set[str] = set()
        self.grown: dict[str, TopicAssignment] = {}

    def create_topic(self, assignment: TopicAssignment, config: Mapping[str, str]) -> None:
        data = paths.encode_topic_config(config) + paths.encode_topic_assignment(assignment)
        if assignment.name in self.topics:
            raise TopicExistsError(f"topic {assignment.name!r} already exists")
        self.topics[assignment.name] = data

    def get_topic_configs(self, topics: Any) -> dict[str, dict[str, str]]:
        return {t: self.entity_configs.get(("topics", t), {}) for t in topics}

    def get_all_topics(self) -> set[str]:
        return set(self.topics)

    def get_entity_configs(self, entity_type: str, names: Any) -> dict[str, dict[str, str]]:
        return {n: self.entity_configs.get((entity_type, n), {}) for n in names}

    def get_entity_names(self, entity_type: str) -> list[str]:
        return sorted(name for kind, name in self.entity_configs if kind == entity_type)

    def change_entity_configs(self, changes: dict[tuple[str, str], dict[str, str]],
                              validate_only: bool = False) -> list[str]:
        unknown = [name for kind, name in changes if kind == "topics" and name not in self.topics]
        if not validate_only:
            self.entity_configs.update((k, dict(c)) for k, c in changes.items() if k[1] not in unknown)
        return unknown

    def allocate_producer_id_block(self, broker_id: int, size: int = 1000) -> paths.ProducerIdBlock:
        block = paths.ProducerIdBlock(broker_id, self._next_producer_id, self._next_producer_id + size - 1)
        self._next_producer_id += size
        return block

    # topic ids (LeaderAndIsr), DeleteTopics and CreatePartitions: every topic a request names
    # exists with one id, as the harness's guarded topics do; markers and growths are recorded
    def get_topic_assignments(self, topics: Any) -> dict[str, TopicAssignment]:
        return {t: self._assignment(t) for t in topics}

    def _assignment(self, topic: str) -> TopicAssignment:
        grown = self.grown.get(topic)
        return grown if grown is not None else TopicAssignment(topic, FUZZ_TOPIC_ID, {0: (BROKER_ID,)})

    def topic_exists(self, topic: str) -> bool:
        return True

    def mark_topics_for_deletion(self, topics: Any) -> None:
        self.deletions.update(topics)

    def get_topic_deletions(self) -> set[str]:
        return set(self.deletions)

    def get_topic_assignments_and_versions(self, topics: Any) -> dict[str, tuple[TopicAssignment, int]]:
        return {t: (self._assignment(t), 0) for t in topics}

    def set_topic_assignments(self, assignments: Any) -> dict[str, Exception | None]:
        for assignment, _ in assignments:
            paths.encode_topic_assignment(assignment)
            self.grown[assignment.name] = assignment
        return {assignment.name: None for assignment, _ in assignments}


class InactiveController:
    """A broker's controller service when another broker is controller."""

    async def ask(self, make: Callable[[Callable[[object], None]], object], timeout_s: float = 0.0) -> object:
        """ControllerService.ask on a broker that is not the controller."""
        return NotControllerError(f"broker {BROKER_ID} is not the controller")

    def stop(self) -> None:
        pass


class IdleFetcher:
    """A follower fetcher that records its partitions and never connects."""

    def __init__(self, leader: BrokerInfo) -> None:
        self.leader = leader
        self.partitions: set[TopicPartition] = set()

    def start(self) -> None:
        pass

    def add(self, partition: Any) -> None:
        self.partitions.add(partition.tp)

    def next_epoch(self, partition: Any) -> bool:
        return partition.tp in self.partitions

    def remove(self, tp: TopicPartition) -> None:
        self.partitions.discard(tp)

    def __len__(self) -> int:
        return len(self.partitions)

    async def close(self) -> None:
        self.partitions.clear()


class RecordingTransport:
    """The asyncio transport under a KafkaConnection: keeps what the broker wrote."""

    def __init__(self) -> None:
        self.out = bytearray()
        self.closed = False

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("127.0.0.1", 50000) if name == "peername" else default

    def write(self, data: bytes) -> None:
        self.out += data

    def writelines(self, parts: list[bytes | memoryview]) -> None:
        for part in parts:
            self.out += part

    def close(self) -> None:
        self.closed = True

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def is_closing(self) -> bool:
        return self.closed


@dataclass(frozen=True)
class PartitionSnapshot:
    leader: int
    leader_epoch: int
    zk_version: int
    isr: frozenset[int]
    replicas: tuple[int, ...]
    log_start: int
    log_end: int
    high_watermark: int


@dataclass(frozen=True)
class Snapshot:
    """What requests must not change (stored data and the controller's decisions)."""

    partitions: Mapping[TopicPartition, PartitionSnapshot]
    metadata: tuple[Any, ...]
    fence: tuple[int, int]

    def differences(self, other: "Snapshot") -> list[str]:
        out = []
        for tp in sorted(set(self.partitions) | set(other.partitions)):
            a, b = self.partitions.get(tp), other.partitions.get(tp)
            if a != b:
                out.append(f"{tp.topic}-{tp.partition}: {a} -> {b}")
        if self.metadata != other.metadata:
            out.append("metadata cache changed")
        if self.fence != other.fence:
            out.append(f"controller/broker epoch {self.fence} -> {other.fence}")
        return out


class InProcessBroker:
    """One broker on ``data_dir``, hosting templates.TOPOLOGY with data in its guarded topic."""

    def __init__(self, data_dir: Path, clock: VirtualClock) -> None:
        self.data_dir = data_dir
        self.clock = clock
        self.loop = new_loop(clock)
        self.zk = MemoryZooKeeper()
        config = BrokerConfig(broker_id=BROKER_ID, host="127.0.0.1", port=1, zookeeper="127.0.0.1:1/unused",
                              data_dir=data_dir, message_max_bytes=64 * 1024,
                              socket_request_max_bytes=1024 * 1024, controlled_shutdown_enable=False)
        data_dir.mkdir(parents=True, exist_ok=True)
        broker = Broker(config)
        broker.controller.stop()  # never started; closes its state-change log
        broker.controller = inactive = InactiveController()  # type: ignore[assignment]
        broker.zk = self.zk  # type: ignore[assignment]
        broker.producer_ids = ProducerIdManager(BROKER_ID, self.zk)
        broker.controller_apis = ControllerApis(broker.replica_manager, broker.metadata,
                                                broker.group_coordinator, inactive.ask)
        self.fetchers = ReplicaFetcherManager(BROKER_ID, IdleFetcher)  # type: ignore[arg-type]
        broker.fetchers = self.fetchers
        rm = broker.replica_manager
        rm.zk = self.zk
        rm.fetchers = self.fetchers
        rm.broker_epoch = BROKER_EPOCH
        self.broker = broker
        self.replica_manager = rm
        self.ctx = BrokerContext(config, "fuzz-cluster", rm, broker.metadata, self.zk, broker.controller_apis,
                                 broker.producer_ids.generate_producer_id, inactive.ask, broker.group_coordinator,
                                 broker.transaction_coordinator, broker.txn_verifier)
        self.apis = KafkaApis(self.ctx)
        with clock.installed():
            self._set_up()
        self.baseline = self.snapshot()
        self.guarded_digest = self.guarded_data_digest()

    def _set_up(self) -> None:
        """The controller's UpdateMetadata and LeaderAndIsr, then data in every led partition,
        then the follower of guarded partition 1 catching up (so its high watermark is the log end)."""
        for frame in templates.controller_updates(TOPOLOGY):
            self.request(frame)
        t = TOPOLOGY
        for p in range(t.guarded_partitions):
            if p != t.follower_partition:
                body = {"transactional_id": None, "acks": 1, "timeout": 1000, "topic_data": [
                    {"name": t.guarded, "partition_data": [{"index": p, "records": templates.batch(3 + p)}]}]}
                self.request(kio_util.encode_request(0, 9, 3, "setup", body))
        guarded_1 = self.replica_manager.get(TopicPartition(t.guarded, 1))
        assert guarded_1 is not None  # made by the LeaderAndIsr above
        body = {"replica_id": OTHER.id, "max_wait": 0, "min_bytes": 0, "topics": [{"topic": t.guarded, "partitions": [
            {"partition": 1, "fetch_offset": guarded_1.log_end_offset,
             "partition_max_bytes": 1024}]}], "forgotten_topics_data": []}
        self.request(kio_util.encode_request(1, 12, 4, "setup", body))
        self.replica_manager.checkpoint_high_watermarks()

    def request(self, frame: bytes) -> bytes:
        """Send one well-formed frame (with size prefix) and return the broker's answer."""
        result = self.apis(memoryview(frame)[4:], None)  # type: ignore[arg-type]
        if result is not None and not isinstance(result, (bytes, list)):
            result = self.loop.run_until_complete(asyncio.wait_for(result, 60))
        return b"".join(result) if isinstance(result, list) else result or b""

    def snapshot(self) -> Snapshot:
        parts = {}
        for p in self.replica_manager.partitions():
            parts[p.tp] = PartitionSnapshot(p.leader_id, p.leader_epoch, p.zk_version, p.isr, p.replicas,
                                            p.log.log_start_offset, p.log.log_end_offset, p.high_watermark)
        md = self.ctx.metadata
        metadata = (md.controller_id, md.controller_epoch, tuple(md.live_brokers),
                    tuple((t, tuple(sorted((md.partitions(t) or {}).items()))) for t in md.topics()))
        return Snapshot(parts, metadata, (self.replica_manager.controller_epoch, self.replica_manager.broker_epoch))

    def bookkeeping_problems(self) -> list[str]:
        """Replication bookkeeping no request may break: a leader's high watermark within its
        log, and no follower credited with offsets past the leader's log end."""
        out = []
        for p in self.replica_manager.partitions():
            leo = p.log.log_end_offset
            if not p.log.log_start_offset <= p.high_watermark <= leo and p.is_leader:
                out.append(f"{p.tp}: high watermark {p.high_watermark} outside the log [{p.log.log_start_offset}, {leo}]")
            for replica, position in p._follower_leo.items():
                if position > leo:
                    out.append(f"{p.tp}: follower {replica} credited with offset {position} past the log end {leo}")
        return out

    def guarded_data_digest(self) -> str:
        """A digest of the guarded topic's segment files (read back from the files: the log
        writes them unbuffered)."""
        digest = hashlib.sha256()
        for part in sorted(self.data_dir.glob(f"{TOPOLOGY.guarded}-*")):
            for f in sorted(part.iterdir()):
                if f.suffix in (".log",):
                    digest.update(f.name.encode())
                    digest.update(f.read_bytes())
        return digest.hexdigest()

    def close(self) -> None:
        for p in self.replica_manager.partitions():
            p.close()
        self.replica_manager.log_manager.close()
        self.broker.release_data_dir()
        self.loop.close()


def fresh(root: Path, clock: VirtualClock, generation: int) -> InProcessBroker:
    """A new broker in a new directory under ``root`` (the previous one's is removed)."""
    old = root / f"broker-{generation - 1}"
    if old.exists():
        shutil.rmtree(old)
    return InProcessBroker(root / f"broker-{generation}", clock)
