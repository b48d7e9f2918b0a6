"""Kafka's ReplicationQuotaManager (KIP-73, Replication Quotas): a cap on the bytes a broker
sends as leader, or fetches as follower, for throttled replicas, so that moving a partition
(`kafka-reassign-partitions --throttle`) or a replica catching up after a long outage cannot
take the bandwidth in-sync replication and clients need.

Which replicas: the topic configs leader.replication.throttled.replicas and
follower.replication.throttled.replicas, lists of `partition:brokerId` ('*': every replica of
the topic). A broker keeps the entries naming itself (Kafka's
TopicConfigHandler.parseThrottledPartitions): as leader it throttles what it sends for those
partitions, as follower what it fetches for them. How fast: the dynamic broker configs
leader.replication.throttled.rate and follower.replication.throttled.rate, bytes/s, per broker
or as the cluster default; unset they are Long.MAX_VALUE, which is never exceeded.

Enforcement is Kafka's. A leader answering a replica's Fetch leaves the records of a throttled
partition out (the partition is answered without records) while its quota is exceeded and the
fetching replica is not in the ISR (ReplicaManager.shouldLeaderThrottle), and counts what it
sends for throttled partitions (KafkaApis.sizeOfThrottledPartitions). A follower leaves a
throttled partition out of its Fetch request while its quota is exceeded and it has not
reached the leader's high watermark (ReplicaFetcherThread.shouldFollowerThrottle), and counts
what it receives for throttled partitions. In-sync replicas are never held back, though their
bytes count; partitions not listed are never held back and never counted. Bytes are counted
once sent or received, so the rate may be overshot by one response (replica.fetch.max.bytes
per partition) before the quota shows exceeded; over the window the rate holds. odradek counts
record bytes only; Kafka also counts each partition's response header (a few dozen bytes).

A fetch whose records the leader held waits its whole fetch wait (replica.fetch.wait.max.ms),
as Kafka's DelayedFetch does, though the quota may recover sooner: waiting only until it
recovers gains nothing measurable (docs/benchmarks-history.md), for the meter makes up for a
pause: while the rate over the window is below the bound, nothing is held. The copy itself runs
at 97-98% of the rate; what a move takes beyond data / rate is mostly before the first byte and
after the last (bench/reassign.py's module doc).

The meter (`SimpleRate`) is Kafka's SimpleRate over a SampledStat (sampled_stat.py) of
replication.quota.window.num samples (11) of replication.quota.window.size.seconds (1 s).
Recording adds to the current sample (O(1), the record batches stay opaque: only their
length counts); the rate is the kept samples' sum over the time since the oldest began, at
least one window. A broker with no throttled replica does no quota work at all: the fetch
paths test `active` (throttled partitions are listed) before anything else.
"""
from __future__ import annotations

import logging
import re
import time
from typing import Callable

from odradek.broker.sampled_stat import SampledStat
from odradek.common.metadata import TopicPartition

log = logging.getLogger("odradek.broker.replication_quota")

LEADER_REPLICAS = "leader.replication.throttled.replicas"
FOLLOWER_REPLICAS = "follower.replication.throttled.replicas"
LEADER_RATE = "leader.replication.throttled.rate"
FOLLOWER_RATE = "follower.replication.throttled.rate"
#: Kafka's QuotaConfig.QUOTA_BYTES_PER_SECOND_DEFAULT: no throttle
UNLIMITED = 2**63 - 1
#: Kafka's Constants.AllReplicas: a topic whose every partition is throttled ('*')
ALL_PARTITIONS: frozenset[int] = frozenset({-1})

_ENTRY = re.compile(r"([0-9]+:[0-9]+)?")


def check_throttled_replicas(name: str, value: str) -> None:
    """Kafka's ThrottledReplicaListValidator: '*', or `partition:brokerId` entries separated
    by commas (empty entries and spaces allowed). A ValueError with Kafka's message otherwise."""
    proposed = [item.strip() for item in value.split(",")]
    if all(_ENTRY.fullmatch(item) for item in proposed) or "".join(proposed) == "*":
        return
    raise ValueError(f"Invalid value {value} for configuration {name}: {name} must be the literal '*' "
                     f"or a list of replicas in the following format: "
                     f"[partitionId]:[brokerId],[partitionId]:[brokerId],...")


def throttled_partitions(name: str, value: str, broker_id: int) -> frozenset[int]:
    """The partitions a throttled-replicas value lists for `broker_id` (ALL_PARTITIONS for '*').
    A stored value that is not valid (written to ZooKeeper by hand) throttles nothing."""
    value = value.strip()
    if value == "*":
        return ALL_PARTITIONS
    try:
        check_throttled_replicas(name, value)
    except ValueError as exc:
        log.warning("ignoring %s", exc)
        return frozenset()
    pairs = (item.strip().split(":") for item in value.split(",") if item.strip())
    return frozenset(int(p) for p, b in pairs if int(b) == broker_id)


class SimpleRate(SampledStat):
    """Kafka's SimpleRate: bytes per second over the last `num_samples` windows of `window_s`.

    The kept samples' sum (sampled_stat.py says which are kept) over the time since the oldest
    one began, and over no less than one window: a first fetch after a quiet spell is not
    divided by a few milliseconds (Kafka's Rate would assume num_samples - 1 windows instead,
    which lets a fresh meter pass ten windows' worth at once)."""

    __slots__ = ()

    def __init__(self, num_samples: int = 11, window_s: float = 1.0) -> None:
        super().__init__(num_samples, window_s)

    def rate(self, now: float) -> float:
        return self.total(now) / max(self.elapsed(now), self.window)


class ReplicationQuotaManager:
    """One side's quota (leader or follower): its bound, its throttled partitions, its meter."""

    def __init__(self, side: str, num_samples: int = 11, window_s: float = 1.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.side = side
        self.bound = UNLIMITED
        self._rate = SimpleRate(num_samples, window_s)
        self._clock = clock
        # topic -> its throttled partitions on this broker (ALL_PARTITIONS for all of them)
        self._throttled: dict[str, frozenset[int]] = {}
        # whether any partition is throttled: the fetch paths' one test when none is
        self.active = False

    def update_quota(self, bound: int) -> None:
        if bound != self.bound:
            log.info("%s replication throttle: %s", self.side,
                     "none" if bound >= UNLIMITED else f"{bound} bytes/s")
        self.bound = bound

    def mark_throttled(self, topic: str, partitions: frozenset[int]) -> None:
        """Throttle these partitions of `topic` from now on, in place of any before."""
        if not partitions:
            self.remove_throttle(topic)
            return
        if self._throttled.get(topic) != partitions:
            log.info("%s replication throttle on %s: %s", self.side, topic,
                     "all partitions" if partitions is ALL_PARTITIONS else sorted(partitions))
        self._throttled[topic] = partitions
        self.active = True

    def remove_throttle(self, topic: str) -> None:
        if self._throttled.pop(topic, None) is not None:
            log.info("%s replication throttle on %s removed", self.side, topic)
        self.active = bool(self._throttled)

    def is_throttled(self, tp: TopicPartition) -> bool:
        partitions = self._throttled.get(tp.topic)
        return partitions is not None and (partitions is ALL_PARTITIONS or tp.partition in partitions)

    def is_quota_exceeded(self) -> bool:
        return self.bound < UNLIMITED and self._rate.rate(self._clock()) > self.bound

    def record(self, nbytes: int) -> None:
        """Count bytes sent or received for throttled partitions, whether or not over the quota."""
        self._rate.record(nbytes, self._clock())

    def rate(self) -> float:
        """Bytes/s over the window, as measured now."""
        return self._rate.rate(self._clock())


class ReplicationQuotas:
    """The leader and follower quotas of one broker (Kafka's QuotaManagers.leader/.follower),
    and how configs reach them (Kafka's TopicConfigHandler.updateThrottledList and
    BrokerConfigHandler)."""

    def __init__(self, broker_id: int, num_samples: int = 11, window_s: float = 1.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.broker_id = broker_id
        self.leader = ReplicationQuotaManager("leader", num_samples, window_s, clock)
        self.follower = ReplicationQuotaManager("follower", num_samples, window_s, clock)

    def update_rates(self, value: Callable[[str], str]) -> None:
        """Take the two rates from the broker's layered config (`DynamicBrokerConfig.value`)."""
        self.leader.update_quota(_bound(value(LEADER_RATE)))
        self.follower.update_quota(_bound(value(FOLLOWER_RATE)))

    def update_topic(self, topic: str, config: dict[str, str]) -> None:
        """A topic's whole config, as stored: its throttled-replica lists replace the old ones."""
        for name, quota in ((LEADER_REPLICAS, self.leader), (FOLLOWER_REPLICAS, self.follower)):
            value = config.get(name, "")
            if value.strip():
                quota.mark_throttled(topic, throttled_partitions(name, value, self.broker_id))
            else:
                quota.remove_throttle(topic)


def _bound(value: str) -> int:
    try:
        return max(int(value), 0)
    except ValueError:  # validated when written; one written by hand throttles nothing
        return UNLIMITED
