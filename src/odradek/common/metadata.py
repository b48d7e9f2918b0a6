"""Value types shared by the controller, ZooKeeper layer and brokers.

They are immutable values (frozen dataclasses, or NamedTuples where a failover makes one per
partition) so the controller core can be driven without I/O and a simulation can compare
states by value.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, NamedTuple

NO_LEADER = -1

#: ``new_tuple(Cls, (field, ...))`` builds a NamedTuple without the Python-level ``__new__``
#: that calling ``Cls(...)`` runs (a third of the time): for the loops of a failover that
#: build one per partition or per replica. Fields are positional and unchecked.
new_tuple = tuple.__new__


class TopicPartition(NamedTuple):
    """A NamedTuple, not a dataclass: it keys every per-partition dict on the hot paths, and a
    tuple hashes and compares in C (a frozen dataclass's __hash__ runs Python code)."""

    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"


#: one partition's leader epoch per partition of the same topic: ((partition, epoch), ...),
#: sorted by partition (a tuple, so a LeaderAndIsr stays hashable and comparable by value)
PartitionEpochs = tuple[tuple[int, int], ...]


class PartitionOrdering(NamedTuple):
    """KIP-253's two maps in a partition state znode of a topic with ordered delivery.

    ``after_creation`` (leaderEpochAfterCreation) is written when the partition is created by
    an ordered expansion: every partition that existed before, with its leader epoch before the
    controller bumped it, so a consumer can turn the parent's epoch into the offset below which
    the parent still holds the keys that moved. ``before_deletion`` (leaderEpochBeforeDeletion)
    is written when the partition is marked for deletion: every undeleted partition with its
    leader epoch before the bump. Empty means absent."""

    after_creation: PartitionEpochs = ()
    before_deletion: PartitionEpochs = ()


class LeaderAndIsr(NamedTuple):
    """Contents of /brokers/topics/T/partitions/P/state plus the znode version it was read at.

    A NamedTuple for the same reason as TopicPartition: a failover builds one per partition.
    ``ordering`` carries KIP-253's maps (None for every partition of a topic without ordered
    delivery): it is part of the znode's contents, so every rewrite of the state must keep it,
    which ``new_leader`` does."""

    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    controller_epoch: int
    zk_version: int = 0
    ordering: PartitionOrdering | None = None

    def new_leader(self, leader: int, isr: tuple[int, ...], controller_epoch: int) -> "LeaderAndIsr":
        """The next state after an election: the leader epoch always moves forward."""
        return new_tuple(LeaderAndIsr, (leader, self.leader_epoch + 1, isr, controller_epoch,
                                        self.zk_version, self.ordering))


#: Kafka's SecurityProtocol ids, as UpdateMetadata carries them
SECURITY_PROTOCOL_IDS = {"PLAINTEXT": 0, "SSL": 1, "SASL_PLAINTEXT": 2, "SASL_SSL": 3}


class EndPoint(NamedTuple):
    """One listener of a broker as registered and sent in UpdateMetadata (kafka.cluster.EndPoint):
    its name ("PLAINTEXT", "INTERNAL"), advertised address and security protocol."""

    listener: str
    host: str
    port: int
    security_protocol: str


@dataclass(frozen=True, slots=True)
class BrokerInfo:
    """A live broker as registered under /brokers/ids/N.

    epoch is the czxid of the registration znode: it changes each time the broker registers
    again, so requests meant for an older incarnation can be told apart (Kafka's broker epoch).
    """

    id: int
    host: str  # host and port: the inter-broker listener's (Kafka's brokerEndPoint(interBrokerListenerName))
    port: int
    epoch: int = 0
    rack: str | None = None
    endpoints: tuple[EndPoint, ...] = ()  # every advertised listener; () for a broker known by one address

    def __post_init__(self) -> None:
        # one PLAINTEXT listener at host:port is the broker known by one address: one form for
        # both, so a broker decoded from a registration equals the one it registered
        if self.endpoints == (EndPoint("PLAINTEXT", self.host, self.port, "PLAINTEXT"),):
            object.__setattr__(self, "endpoints", ())

    def address(self, listener: str) -> tuple[str, int] | None:
        """Where a client that came in on ``listener`` reaches this broker (Kafka's
        Broker.endPoint(listenerName)); None when the broker has no such listener, as Kafka's
        MetadataCache leaves such a broker out of the answer."""
        if not self.endpoints:
            return self.host, self.port
        for endpoint in self.endpoints:
            if endpoint.listener == listener:
                return endpoint.host, endpoint.port
        return None


class PartitionState(NamedTuple):
    """One partition's entry in a LeaderAndIsr or UpdateMetadata request (a NamedTuple: a
    failover builds and encodes tens of thousands)."""

    tp: TopicPartition
    controller_epoch: int
    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    zk_version: int
    replicas: tuple[int, ...]
    is_new: bool = False
    offline_replicas: tuple[int, ...] = ()


class ReplicaAssignment(NamedTuple):
    """One partition's full replica set, and while it is being reassigned the replicas it is
    adding and removing (Kafka 2.4's ReplicaAssignment, stored in the topic znode since
    KIP-455).

    In Kafka's notation, during a reassignment from ORS (the original replica set) to TRS
    (the target) ``replicas`` is RS, TRS followed by the rest of ORS; ``adding`` is AR,
    TRS - ORS; ``removing`` is RR, ORS - TRS. Kept in ZooKeeper, the three lists are what lets
    a new controller finish a reassignment the old one started: ORS and TRS both follow from
    them."""

    replicas: tuple[int, ...]
    adding: tuple[int, ...] = ()
    removing: tuple[int, ...] = ()

    @property
    def is_being_reassigned(self) -> bool:
        return bool(self.adding or self.removing)

    @property
    def target_replicas(self) -> tuple[int, ...]:
        """TRS: the replicas the partition has once the reassignment completes."""
        return tuple(r for r in self.replicas if r not in self.removing)

    @property
    def original_replicas(self) -> tuple[int, ...]:
        """ORS: the replicas the partition had before the reassignment began."""
        return tuple(r for r in self.replicas if r not in self.adding)

    def reassign_to(self, target: tuple[int, ...]) -> "ReplicaAssignment":
        """The assignment while moving to ``target`` (Kafka's ReplicaAssignment.reassignTo).

        A reassignment that replaces one in progress starts from the original replicas, so
        replicas the earlier one was adding and this one does not want are removed too; a
        target equal to the original replicas is a cancellation. As in Kafka, a cancellation
        restores the original replicas but not necessarily their order (the first, preferred,
        replica may differ): the full list keeps TRS's order, which a completed move needs."""
        original = self.original_replicas
        full = tuple(dict.fromkeys(target + original))
        return ReplicaAssignment(full, tuple(r for r in target if r not in original),
                                 tuple(r for r in original if r not in target))


@dataclass(frozen=True, slots=True)
class TopicAssignment:
    """Contents of /brokers/topics/T: partition -> replica list, plus the topic id.

    ``initial_partition_count`` is KIP-253's: the partition count the topic was created with,
    kept when partitions are added (the base of the linear hashing that ordered expansion
    needs). None when the znode does not say (written before it existed); the controller then
    writes the current count (KafkaController's failover backfill)."""

    name: str
    topic_id: str  # 22-char URL-safe base64 of a 16-byte UUID, as Kafka writes it
    partitions: dict[int, tuple[int, ...]] = field(default_factory=dict)
    initial_partition_count: int | None = None
    #: partitions being reassigned (KIP-455): partition -> replicas being added / removed
    adding_replicas: dict[int, tuple[int, ...]] = field(default_factory=dict)
    removing_replicas: dict[int, tuple[int, ...]] = field(default_factory=dict)
    #: KIP-253's undeleted_partition_count: partitions 0..count-1 take new records; those at
    #: or past it are marked for deletion. None: every partition is undeleted.
    undeleted_partition_count: int | None = None
    #: partition number -> the highest leader epoch a partition under that number had when a
    #: KIP-253 deletion removed it. A partition created again under the number starts its
    #: epochs above it: clients cache the highest epoch they saw per partition number and
    #: ignore metadata below it (KIP-320; librdkafka's "ignoring outdated metadata update"),
    #: so one that restarted at 0 would never be seen led by anyone.
    removed_leader_epochs: dict[int, int] = field(default_factory=dict)


def raised_leader_epochs(removed: Mapping[int, int], last: Mapping[int, int]) -> dict[int, int]:
    """``removed`` (TopicAssignment.removed_leader_epochs) once partitions whose last leader
    epochs are ``last`` are removed: each number keeps the highest epoch it ever had."""
    out = dict(removed)
    for partition, epoch in last.items():
        out[partition] = max(epoch, out.get(partition, -1))
    return out
