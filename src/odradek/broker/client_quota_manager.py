"""Kafka's client quotas without I/O: kafka.server.ClientQuotaManager (byte rates, KIP-13; per
user, KIP-55), ClientRequestQuotaManager (request percentage, KIP-124), the quota bookkeeping of
ClientQuotaManager.DefaultQuotaCallback, QuotaUtils' throttle time, and Kafka's Rate. The broker
wiring (ZooKeeper's /config/users and /config/clients, DescribeClientQuotas and
AlterClientQuotas, muting a throttled connection) sits above this module and calls in with the
time, so everything here runs on virtual time in tests.

What a quota is: an upper bound per (user, client-id) on the rate of one quota type,
producer_byte_rate (bytes/s of Produce requests), consumer_byte_rate (bytes/s of Fetch
responses) or request_percentage (percent of one thread's time spent on the client's requests,
network and I/O threads together). controller_mutation_rate (KIP-599) is parsed, stored and
described, but nothing here enforces it: no manager meters topic mutations.

Which quota applies: Kafka's eight levels, most specific first; the first level that sets the
quota type wins (DefaultQuotaCallback.quotaLimit, quotaMetricTags):

    /config/users/<user>/clients/<client-id>      meter (user, client-id)
    /config/users/<user>/clients/<default>        meter (user, client-id)
    /config/users/<user>                          meter (user)
    /config/users/<default>/clients/<client-id>   meter (user, client-id)
    /config/users/<default>/clients/<default>     meter (user, client-id)
    /config/users/<default>                       meter (user)
    /config/clients/<client-id>                   meter (client-id)
    /config/clients/<default>                     meter (client-id)

The meter column is the metric tags, which say who shares one meter: a user quota is spent by
all the user's client ids together, a <client-id> quota by that client id under every user,
and a (user, client-id) level by that pair alone. A client that no level sets is metered by its
client id, unbounded.

How it throttles (Kafka's): the request's value is recorded first, then the rate is measured;
above the bound, the throttle time is the delay that brings the rate back to the bound if
nothing more is recorded, (rate - bound) / bound * window (QuotaUtils.throttleTime), where the
window is the span the rate was measured over. Produce and fetch throttle times are unbounded;
request-percentage throttle times are capped at one quota window (ClientRequestQuotaManager).
The rate is Kafka's Rate: the kept samples' sum over the time since the oldest began, but over
no less than num_samples - 1 full windows plus the current one's elapsed part, so a fresh meter
lets a client burst up to ten windows' worth before it is throttled, then holds it to the bound.

The cheap path: a manager with no quota of its type set anywhere records nothing and keeps no
state (Kafka's quotasEnabled, which there stays on until a restart once any quota was set;
here it follows the configs). Once one is set, every client is metered (its byte-rate metric
exists) but only clients a level bounds are ever throttled. Meters unused for an hour are
dropped (Kafka's InactiveSensorExpirationTimeSeconds), checked at most every 30 s as records
come in (Kafka's Metrics.ExpireSensorTask) or when `expire_sensors` is called.

Metrics are returned as data (`QuotaMetric`), named as Kafka names them for JMX:
kafka.server:type=<group>,user=<user>,client-id=<client-id>, attributes byte-rate (groups
Produce and Fetch) or request-time (group Request) and throttle-time; a tag a meter is not kept
by is "". Where odradek differs: the user tag is the principal's name as given (Kafka's is
URL-encoded by its Sanitizer), a meter and its throttle-time average expire together, and quota
changes apply at the next record (the bound is looked up per record, not stored in the meter).
Not thread-safe: one event loop calls it.
"""
from __future__ import annotations

import enum
import logging
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import NamedTuple

from odradek.broker.sampled_stat import SampledStat

log = logging.getLogger("odradek.broker.client_quota_manager")

PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
REQUEST_PERCENTAGE = "request_percentage"
#: parsed, stored and described; not enforced
CONTROLLER_MUTATION_RATE = "controller_mutation_rate"
#: Kafka's QuotaConfigs.userAndClientQuotaConfigs: each key's ConfigDef type
QUOTA_CONFIG_TYPES: dict[str, str] = {
    PRODUCER_BYTE_RATE: "LONG",
    CONSUMER_BYTE_RATE: "LONG",
    REQUEST_PERCENTAGE: "DOUBLE",
    CONTROLLER_MUTATION_RATE: "DOUBLE",
}

NUM_QUOTA_SAMPLES = "quota.window.num"
QUOTA_WINDOW_SIZE_SECONDS = "quota.window.size.seconds"
NUM_QUOTA_SAMPLES_DEFAULT = 11
QUOTA_WINDOW_SIZE_SECONDS_DEFAULT = 1

#: Kafka's ClientQuotaManager.InactiveSensorExpirationTimeSeconds, in ms
INACTIVE_SENSOR_EXPIRATION_MS = 3600 * 1000
#: how often Kafka's Metrics looks for expired sensors (ExpireSensorTask)
EXPIRE_SENSORS_INTERVAL_MS = 30 * 1000
#: the largest throttle_time_ms a response can carry (int32)
MAX_THROTTLE_TIME_MS = 2**31 - 1
#: Kafka's ClientRequestQuotaManager.NanosToPercentagePerSecond: 1 s of thread time is 100 (%)
NANOS_TO_PERCENTAGE = 100.0 / 1e9
#: the broker's metrics.num.samples and metrics.sample.window.ms defaults, the config of the
#: throttle-time average and the exempt request-time rate (sensors without a quota of their own)
METRICS_NUM_SAMPLES = 2
METRICS_SAMPLE_WINDOW_MS = 30 * 1000

#: entity types, as ClientQuotaEntity names them; also the metric tags' names
USER = "user"
CLIENT_ID = "client-id"
THROTTLE_TIME = "throttle-time"
THROTTLE_TIME_DESCRIPTION = "Tracking average throttle-time per user/client-id"


class DefaultEntity(enum.Enum):
    """The <default> user or client id: never a name, so a principal named "<default>" is not
    mistaken for it (ZooKeeper paths hold sanitized names, where it cannot be either)."""

    DEFAULT = "<default>"


DEFAULT = DefaultEntity.DEFAULT

EntityName = str | DefaultEntity


class QuotaEntity(NamedTuple):
    """A quota's owner: a user, a client id, or both (None: not part of it), each a name or
    DEFAULT (Kafka's KafkaQuotaEntity)."""

    user: EntityName | None = None
    client_id: EntityName | None = None

    def __str__(self) -> str:
        parts = []
        for kind, name in ((USER, self.user), (CLIENT_ID, self.client_id)):
            if name is DEFAULT:
                parts.append(f"default {kind}")
            elif name is not None:
                parts.append(f"{kind} {name}")
        return " ".join(parts)


#: whose meter: (user, client id), None where the meter is not kept by it
SensorKey = tuple[str | None, str | None]


@dataclass(frozen=True)
class QuotaType:
    """One kind of client quota: its config key and Kafka's metric group and rate metric."""

    group: str  # Kafka's QuotaType.toString, the metric group
    config: str
    rate_metric: str
    rate_description: str


PRODUCE = QuotaType("Produce", PRODUCER_BYTE_RATE, "byte-rate", "Tracking byte-rate per user/client-id")
FETCH = QuotaType("Fetch", CONSUMER_BYTE_RATE, "byte-rate", "Tracking byte-rate per user/client-id")
REQUEST = QuotaType("Request", REQUEST_PERCENTAGE, "request-time", "Tracking request-time per user/client-id")


@dataclass(frozen=True)
class QuotaMetric:
    """One metric value for the exporter: Kafka's MetricName (name, group, tags) and its value."""

    group: str
    name: str
    description: str
    tags: tuple[tuple[str, str], ...]
    value: float


# -- quota values --------------------------------------------------------------------------

def parse_quota_value(key: str, text: str) -> float:
    """A stored quota value (ZooKeeper's strings), as Kafka's QuotaConfigHandler reads it:
    byte rates are longs, the others doubles. ValueError for an unknown key or a bad number."""
    kind = QUOTA_CONFIG_TYPES.get(key)
    if kind is None:
        raise ValueError(f"Invalid configuration key {key}")
    return float(int(text)) if kind == "LONG" else float(text)


def quota_config_string(key: str, value: float) -> str:
    """The string AlterClientQuotas stores for `value` (Kafka's ZkAdminManager.alterClientQuotas):
    a long key takes a whole number (to within 1e-6), a double key any number. ValueError with
    Kafka's message otherwise."""
    kind = QUOTA_CONFIG_TYPES.get(key)
    if kind is None:
        raise ValueError(f"Invalid configuration key {key}")
    if not math.isfinite(value):
        raise ValueError(f"Configuration {key} must be a {kind} value")
    if kind == "DOUBLE":
        return repr(float(value))
    whole = int(value + 1e-6)  # truncated, as Java's toLong
    if abs(whole - value) > 1e-6:
        raise ValueError(f"Configuration {key} must be a {kind} value")
    return str(whole)


# -- the overrides and their precedence ----------------------------------------------------

class MatchType(enum.IntEnum):
    """DescribeClientQuotasRequest's match_type."""

    EXACT = 0  # the entity named
    DEFAULT = 1  # the <default> entity
    ANY = 2  # any entity of the type, <default> included


class FilterComponent(NamedTuple):
    match_type: MatchType
    name: str | None = None  # for EXACT


def entity_matches(entity: QuotaEntity, components: Mapping[str, FilterComponent], strict: bool) -> bool:
    """Whether DescribeClientQuotas' filter (components keyed by entity type USER / CLIENT_ID)
    selects `entity` (ZkAdminManager.handleDescribeClientQuotas' `matches`): each component must
    match the entity's part of its type; a type without a component matches anything, or, when
    `strict`, only entities without that part."""
    for kind, name in ((USER, entity.user), (CLIENT_ID, entity.client_id)):
        component = components.get(kind)
        if component is None:
            if strict and name is not None:
                return False
        elif name is None:
            return False
        elif component.match_type == MatchType.EXACT and name != component.name:
            return False
        elif component.match_type == MatchType.DEFAULT and name is not DEFAULT:
            return False
    return True


def _levels(user: str, client_id: str) -> Iterator[tuple[QuotaEntity, SensorKey]]:
    """Kafka's eight levels for a client, most specific first, each with the meter it shares
    (DefaultQuotaCallback.quotaMetricTags)."""
    both: SensorKey = (user, client_id)
    user_only: SensorKey = (user, None)
    client_only: SensorKey = (None, client_id)
    yield QuotaEntity(user, client_id), both
    yield QuotaEntity(user, DEFAULT), both
    yield QuotaEntity(user, None), user_only
    yield QuotaEntity(DEFAULT, client_id), both
    yield QuotaEntity(DEFAULT, DEFAULT), both
    yield QuotaEntity(DEFAULT, None), user_only
    yield QuotaEntity(None, client_id), client_only
    yield QuotaEntity(None, DEFAULT), client_only


class ClientQuotaConfigs:
    """The quota overrides of /config/users and /config/clients, kept in memory for all quota
    types (Kafka keeps one DefaultQuotaCallback.overriddenQuotas per quota manager); the
    ZooKeeper watcher writes them, the managers read them at each record."""

    def __init__(self) -> None:
        self._quotas: dict[QuotaEntity, dict[str, float]] = {}
        # how many entities set each key: a manager's one test on its cheap path
        self._set_count: dict[str, int] = dict.fromkeys(QUOTA_CONFIG_TYPES, 0)

    def update_quota(self, entity: QuotaEntity, quota_type: str, value: float | None) -> None:
        """Set (or, with None, remove) one quota of one entity."""
        if quota_type not in QUOTA_CONFIG_TYPES:
            raise ValueError(f"Invalid configuration key {quota_type}")
        if entity.user is None and entity.client_id is None:
            raise ValueError("a quota entity names a user, a client id or both")
        values = self._quotas.get(entity, {})
        old = values.get(quota_type)
        if value == old:
            return
        if value is None:
            del values[quota_type]
            self._set_count[quota_type] -= 1
            log.info("Removing %s quota for %s", quota_type, entity)
        else:
            if old is None:
                self._set_count[quota_type] += 1
            values[quota_type] = value
            log.info("Changing %s quota for %s to %s", quota_type, entity, value)
        if values:
            self._quotas[entity] = values
        else:
            self._quotas.pop(entity, None)

    def update_entity(self, entity: QuotaEntity, config: Mapping[str, str]) -> None:
        """An entity's whole stored config (Kafka's QuotaConfigHandler.updateQuotaConfig): each
        quota key it holds is set, each it lacks removed. A value that does not parse (written
        by hand) is left out with a warning: that quota is unset."""
        for key in QUOTA_CONFIG_TYPES:
            text = config.get(key)
            value = None
            if text is not None:
                try:
                    value = parse_quota_value(key, text)
                except ValueError:
                    log.warning("ignoring %s=%r of %s: not a %s", key, text, entity, QUOTA_CONFIG_TYPES[key])
            self.update_quota(entity, key, value)

    def get(self, entity: QuotaEntity, quota_type: str) -> float | None:
        values = self._quotas.get(entity)
        return None if values is None else values.get(quota_type)

    def any_set(self, quota_type: str) -> bool:
        return self._set_count[quota_type] > 0

    def resolve(self, quota_type: str, user: str, client_id: str) -> tuple[SensorKey, float | None]:
        """The meter a client's records go to and its bound (None: unbounded), from the first
        level that sets `quota_type`."""
        for entity, key in _levels(user, client_id):
            values = self._quotas.get(entity)
            if values is not None and quota_type in values:
                return key, values[quota_type]
        return (None, client_id), None

    def describe(self, components: Mapping[str, FilterComponent],
                 strict: bool) -> dict[QuotaEntity, dict[str, float]]:
        """DescribeClientQuotas' answer: every entity the filter selects, with its quotas."""
        return {entity: dict(values) for entity, values in self._quotas.items()
                if entity_matches(entity, components, strict)}


# -- the meter and the throttle time -------------------------------------------------------

class Rate(SampledStat):
    """Kafka's Rate over a SampledStat, on milliseconds, measured per second."""

    __slots__ = ()

    def window_size_ms(self, now_ms: float) -> float:
        """What the rate divides by (Rate.windowSize): the time since the oldest kept sample
        began, padded to num_samples - 1 full windows while fewer have passed, so that a first
        record is not divided by a few milliseconds; at least 1 ms."""
        elapsed = self.elapsed(now_ms)
        full_windows = int(elapsed // self.window)
        if full_windows < self.num_samples - 1:
            elapsed += (self.num_samples - 1 - full_windows) * self.window
        return max(elapsed, 1.0)

    def measure(self, now_ms: float) -> float:
        return self.total(now_ms) / (self.window_size_ms(now_ms) / 1000.0)


def throttle_time_ms(value: float, bound: float, window_ms: float) -> int:
    """Kafka's QuotaUtils.throttleTime: the delay X that brings the rate `value`, measured over
    `window_ms`, down to `bound` if nothing more is recorded: value * W / (W + X) = bound, so
    X = (value - bound) / bound * W; rounded half up as Java's Math.round. A bound of 0 throttles
    for as long as a response can say."""
    if bound <= 0:
        return MAX_THROTTLE_TIME_MS
    return min(math.floor((value - bound) / bound * window_ms + 0.5), MAX_THROTTLE_TIME_MS)


def bounded_throttle_time_ms(value: float, bound: float, window_ms: float, max_throttle_ms: int) -> int:
    """Kafka's QuotaUtils.boundedThrottleTime: throttleTime, at most `max_throttle_ms`."""
    return min(throttle_time_ms(value, bound, window_ms), max_throttle_ms)


# -- the managers --------------------------------------------------------------------------

class ClientSensors:
    """One meter's state (Kafka's ClientSensors): the quota rate, the average throttle time
    given, and when either was last recorded into (for expiry)."""

    __slots__ = ("rate", "throttle", "last_record_ms")

    def __init__(self, rate: Rate, now_ms: int) -> None:
        self.rate = rate
        self.throttle = SampledStat(METRICS_NUM_SAMPLES, METRICS_SAMPLE_WINDOW_MS)
        self.last_record_ms = now_ms


class ClientQuotaManager:
    """One quota type's meters, keyed by the (user, client-id) their level shares, and the
    throttle times they give (Kafka's ClientQuotaManager)."""

    def __init__(self, configs: ClientQuotaConfigs, quota_type: QuotaType,
                 num_samples: int = NUM_QUOTA_SAMPLES_DEFAULT,
                 window_s: int = QUOTA_WINDOW_SIZE_SECONDS_DEFAULT) -> None:
        if num_samples < 1 or window_s <= 0:
            raise ValueError("client quotas need at least one sample of a positive window")
        self.configs = configs
        self.quota_type = quota_type
        self.num_samples = num_samples
        self.window_ms = window_s * 1000
        self.max_throttle_time_ms = MAX_THROTTLE_TIME_MS
        self._sensors: dict[SensorKey, ClientSensors] = {}
        self._next_expiry_ms: int | None = None

    @property
    def enabled(self) -> bool:
        """Whether any level sets this quota type: if not, nothing is recorded."""
        return self.configs.any_set(self.quota_type.config)

    def quota(self, user: str, client_id: str) -> float | None:
        """The bound that applies to this client, None if none does."""
        return self.configs.resolve(self.quota_type.config, user, client_id)[1]

    def maybe_record_and_get_throttle_time_ms(self, user: str, client_id: str, value: float, now_ms: int) -> int:
        """Record `value` for this client (bytes of a Produce request, bytes of a Fetch response)
        and return how long to throttle it, 0 if its rate is within its bound or no quota of
        this type is set (Kafka's maybeRecordAndGetThrottleTimeMs)."""
        if not self.enabled:
            return 0
        key, bound = self.configs.resolve(self.quota_type.config, user, client_id)
        sensors = self._record(key, value, now_ms)
        if bound is None:
            return 0
        rate = sensors.rate.measure(now_ms)
        if rate <= bound:  # Kafka's Quota.acceptable for an upper bound
            return 0
        window_ms = sensors.rate.window_size_ms(now_ms)
        return bounded_throttle_time_ms(rate, bound, window_ms, self.max_throttle_time_ms)

    def record_no_throttle(self, user: str, client_id: str, value: float, now_ms: int) -> None:
        """Record without asking for a throttle time; the next request's record sees it (Kafka's
        recordNoThrottle)."""
        if self.enabled:
            self._record(self.configs.resolve(self.quota_type.config, user, client_id)[0], value, now_ms)

    def unrecord(self, user: str, client_id: str, value: float, now_ms: int) -> None:
        """Take back a recorded value: a throttled Fetch is answered empty, so its bytes were
        never sent (Kafka's unrecordQuotaSensor)."""
        self.record_no_throttle(user, client_id, -value, now_ms)

    def record_throttle_time(self, user: str, client_id: str, throttle_ms: int, now_ms: int) -> None:
        """The throttle time this manager's quota imposed on a response (the broker applies the
        largest of a request's managers), for the throttle-time metric (Kafka's throttle())."""
        if self.enabled and throttle_ms > 0:
            key = self.configs.resolve(self.quota_type.config, user, client_id)[0]
            sensors = self._sensors_for(key, now_ms)
            sensors.throttle.record(throttle_ms, now_ms)
            sensors.last_record_ms = now_ms

    def max_value_in_quota_window(self, user: str, client_id: str) -> float:
        """The most one record can be without certainly being throttled, even on an idle meter:
        the bound over num_samples - 1 windows (Kafka's getMaxValueInQuotaWindow; a Fetch's
        response size is capped at it)."""
        bound = self.quota(user, client_id) if self.enabled else None
        if bound is None:
            return math.inf
        return bound * (self.num_samples - 1) * self.window_ms / 1000.0

    def expire_sensors(self, now_ms: int) -> int:
        """Drop the meters not recorded into for an hour; how many were dropped."""
        expired = [key for key, sensors in self._sensors.items()
                   if now_ms - sensors.last_record_ms > INACTIVE_SENSOR_EXPIRATION_MS]
        for key in expired:
            del self._sensors[key]
        self._next_expiry_ms = now_ms + EXPIRE_SENSORS_INTERVAL_MS
        return len(expired)

    def sensor_keys(self) -> list[SensorKey]:
        return list(self._sensors)

    def metrics(self, now_ms: int) -> list[QuotaMetric]:
        """Each meter's rate and average throttle time, as Kafka's metrics name them."""
        out = []
        qt = self.quota_type
        for (user, client_id), sensors in self._sensors.items():
            tags = ((USER, user or ""), (CLIENT_ID, client_id or ""))
            out.append(QuotaMetric(qt.group, qt.rate_metric, qt.rate_description, tags,
                                   sensors.rate.measure(now_ms)))
            out.append(QuotaMetric(qt.group, THROTTLE_TIME, THROTTLE_TIME_DESCRIPTION, tags,
                                   sensors.throttle.average(now_ms)))
        return out

    def _record(self, key: SensorKey, value: float, now_ms: int) -> ClientSensors:
        if self._next_expiry_ms is None or now_ms >= self._next_expiry_ms:
            self.expire_sensors(now_ms)
        sensors = self._sensors_for(key, now_ms)
        sensors.rate.record(value, now_ms)
        sensors.last_record_ms = now_ms
        return sensors

    def _sensors_for(self, key: SensorKey, now_ms: int) -> ClientSensors:
        sensors = self._sensors.get(key)
        if sensors is None:
            sensors = self._sensors[key] = ClientSensors(Rate(self.num_samples, self.window_ms), now_ms)
        return sensors


class ClientRequestQuotaManager(ClientQuotaManager):
    """request_percentage (Kafka's ClientRequestQuotaManager): the value recorded is the time a
    request took on the broker's threads, as a percentage of one second, so the rate per second
    is the percent of one thread the client keeps busy. Throttle times are capped at one
    window: a client over its share is slowed, never shut out for long. Requests exempt from the
    quota (inter-broker, ClusterAction) are metered together, untagged and unbounded."""

    def __init__(self, configs: ClientQuotaConfigs, num_samples: int = NUM_QUOTA_SAMPLES_DEFAULT,
                 window_s: int = QUOTA_WINDOW_SIZE_SECONDS_DEFAULT) -> None:
        super().__init__(configs, REQUEST, num_samples, window_s)
        self.max_throttle_time_ms = self.window_ms
        self._exempt = Rate(METRICS_NUM_SAMPLES, METRICS_SAMPLE_WINDOW_MS)

    def record_request_time(self, user: str, client_id: str, thread_time_ns: int, now_ms: int) -> int:
        """Record a request's time on the request handler thread; the throttle time it earns."""
        return self.maybe_record_and_get_throttle_time_ms(user, client_id, thread_time_ns * NANOS_TO_PERCENTAGE,
                                                          now_ms)

    def record_network_time(self, user: str, client_id: str, thread_time_ns: int, now_ms: int) -> None:
        """Record a request's time on the network thread, known only once its response is sent:
        it counts from the next request on (Kafka's recordNetworkThreadTimeCallback)."""
        self.record_no_throttle(user, client_id, thread_time_ns * NANOS_TO_PERCENTAGE, now_ms)

    def record_exempt(self, thread_time_ns: int, now_ms: int) -> None:
        if self.enabled:
            self._exempt.record(thread_time_ns * NANOS_TO_PERCENTAGE, now_ms)

    def metrics(self, now_ms: int) -> list[QuotaMetric]:
        exempt = QuotaMetric(REQUEST.group, "exempt-request-time", "Tracking exempt-request-time utilization percentage",
                             (), self._exempt.measure(now_ms))
        return [*super().metrics(now_ms), exempt]


class ClientQuotaManagers:
    """A broker's three client quota managers over one set of overrides (the client part of
    Kafka's QuotaFactory.QuotaManagers)."""

    def __init__(self, num_samples: int = NUM_QUOTA_SAMPLES_DEFAULT,
                 window_s: int = QUOTA_WINDOW_SIZE_SECONDS_DEFAULT) -> None:
        self.configs = ClientQuotaConfigs()
        self.produce = ClientQuotaManager(self.configs, PRODUCE, num_samples, window_s)
        self.fetch = ClientQuotaManager(self.configs, FETCH, num_samples, window_s)
        self.request = ClientRequestQuotaManager(self.configs, num_samples, window_s)
