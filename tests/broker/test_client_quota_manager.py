"""Client quotas without a broker (broker/client_quota_manager.py): Kafka's Rate and throttle
time against hand-computed values, the eight levels of precedence and who shares a meter,
request-percentage throttling, sensor expiry, the no-quota path, the stored configs and
DescribeClientQuotas' filters. Time is passed in as ms; nothing here sleeps."""
from __future__ import annotations

import logging
import math

import pytest

from odradek.broker.client_quota_manager import (
    CONSUMER_BYTE_RATE,
    CONTROLLER_MUTATION_RATE,
    DEFAULT,
    INACTIVE_SENSOR_EXPIRATION_MS,
    MAX_THROTTLE_TIME_MS,
    PRODUCER_BYTE_RATE,
    REQUEST_PERCENTAGE,
    ClientQuotaManagers,
    FilterComponent,
    MatchType,
    QuotaEntity,
    Rate,
    bounded_throttle_time_ms,
    quota_config_string,
    throttle_time_ms,
)

KIB = 1024
MIB = 1024 * KIB


def test_a_young_rate_is_padded_to_num_samples_minus_one_windows() -> None:
    rate = Rate(num_samples=11, window=1000)
    rate.record(5000, 0)
    assert rate.window_size_ms(0) == 10_000  # 0 ms elapsed, padded to 10 windows
    assert rate.measure(0) == 500.0
    rate.record(5000, 2500)  # a new sample: the first is one window old
    assert rate.window_size_ms(2500) == 2500 + 8 * 1000  # 2 full windows, 8 more assumed
    assert rate.measure(2500) == pytest.approx(10_000 / 10.5)
    # the padding stops at 10 full windows, so the divisor drops by a window there
    assert rate.window_size_ms(9999) == 10_999
    assert rate.window_size_ms(10_000) == 10_000


def test_a_full_rate_covers_the_kept_samples_and_forgets_old_ones() -> None:
    rate = Rate(num_samples=11, window=1000)
    for second in range(20):
        rate.record(100, second * 1000)
    # samples 9000..19000 kept (8000's last record is 11.5 s old), oldest began 10.5 s ago
    assert rate.measure(19_500) == pytest.approx(1100 / 10.5)
    # 9000's is 11 s old at 20000: 10 samples of 100 over exactly 10 windows
    assert rate.measure(20_000) == pytest.approx(100.0)
    assert rate.measure(19_000 + 11_000) == 0.0


def test_throttle_time_is_kafkas_formula_rounded_half_up() -> None:
    # (value - bound) / bound * window
    assert throttle_time_ms(110, 100, 10_000) == 1000
    assert throttle_time_ms(102.5, 100, 100) == 3  # 2.5 rounds up, as Java's Math.round
    assert throttle_time_ms(1e30, 1, 10_000) == MAX_THROTTLE_TIME_MS
    assert throttle_time_ms(1, 0, 10_000) == MAX_THROTTLE_TIME_MS
    assert bounded_throttle_time_ms(110, 100, 10_000, 500) == 500


def _producer_quotas(bound: float) -> ClientQuotaManagers:
    quotas = ClientQuotaManagers()
    quotas.configs.update_quota(QuotaEntity(client_id="p"), PRODUCER_BYTE_RATE, bound)
    return quotas


def test_the_first_record_over_the_quota_is_throttled_over_the_padded_window() -> None:
    quotas = _producer_quotas(1000)
    produce = quotas.produce
    assert produce.maybe_record_and_get_throttle_time_ms("u", "p", 10_000, 0) == 0  # 1000/s: at the bound
    # 12000 B over 10 s is 1200/s: 20% over for 10 s is 2 s
    assert produce.maybe_record_and_get_throttle_time_ms("u", "p", 2000, 0) == 2000
    assert produce.max_value_in_quota_window("u", "p") == 10_000
    assert produce.max_value_in_quota_window("u", "other") == math.inf  # no level bounds it


def _produce_for(quotas: ClientQuotaManagers, bound: float, batch: int, seconds: int) -> float:
    """A producer that could send 10x its quota, sending `batch` bytes as soon as its last
    throttle time has passed; the rate it achieved over `seconds`."""
    interval_ms = batch / (10 * bound) * 1000
    now, sent = 0.0, 0
    while now < seconds * 1000:
        throttle = quotas.produce.maybe_record_and_get_throttle_time_ms("u", "p", batch, int(now))
        sent += batch
        now += interval_ms + throttle
    return sent / seconds


def test_a_producer_at_ten_times_its_quota_is_held_to_it() -> None:
    """Kafka's Rate lets a fresh meter take up to num_samples - 1 windows' worth at once, and
    one again whenever that burst leaves the window (about every 11 s), so a minute's rate runs
    up to 10% over, while the long run converges to the quota."""
    bound = 1 * MIB
    assert _produce_for(_producer_quotas(bound), bound, 16 * KIB, 60) == pytest.approx(bound, rel=0.10)
    assert _produce_for(_producer_quotas(bound), bound, 16 * KIB, 300) == pytest.approx(bound, rel=0.02)


# Kafka's precedence for user alice, client c1: the entity, then the meter it shares
LEVELS: list[tuple[QuotaEntity, tuple[str | None, str | None]]] = [
    (QuotaEntity("alice", "c1"), ("alice", "c1")),
    (QuotaEntity("alice", DEFAULT), ("alice", "c1")),
    (QuotaEntity("alice", None), ("alice", None)),
    (QuotaEntity(DEFAULT, "c1"), ("alice", "c1")),
    (QuotaEntity(DEFAULT, DEFAULT), ("alice", "c1")),
    (QuotaEntity(DEFAULT, None), ("alice", None)),
    (QuotaEntity(None, "c1"), (None, "c1")),
    (QuotaEntity(None, DEFAULT), (None, "c1")),
]


@pytest.mark.parametrize("level", range(len(LEVELS)))
def test_each_level_wins_over_the_levels_below_it(level: int) -> None:
    quotas = ClientQuotaManagers()
    for i, (entity, _) in enumerate(LEVELS[level:], start=level):
        quotas.configs.update_quota(entity, PRODUCER_BYTE_RATE, 1000.0 * (i + 1))
    # other users' and clients' entities, and other quota types, never apply
    for entity in (QuotaEntity("bob", "c1"), QuotaEntity("alice", "c2"), QuotaEntity("bob"), QuotaEntity(None, "c2"),
                   QuotaEntity(DEFAULT, "c2")):
        quotas.configs.update_quota(entity, PRODUCER_BYTE_RATE, 1.0)
    for entity, _ in LEVELS[:level]:
        quotas.configs.update_quota(entity, CONSUMER_BYTE_RATE, 2.0)
    assert quotas.configs.resolve(PRODUCER_BYTE_RATE, "alice", "c1") == (LEVELS[level][1], 1000.0 * (level + 1))
    assert quotas.produce.quota("alice", "c1") == 1000.0 * (level + 1)


def test_no_level_set_meters_by_client_id_unbounded() -> None:
    quotas = _producer_quotas(1000)
    assert quotas.configs.resolve(PRODUCER_BYTE_RATE, "alice", "c1") == ((None, "c1"), None)
    for _ in range(5):
        assert quotas.produce.maybe_record_and_get_throttle_time_ms("alice", "c1", 10 * MIB, 0) == 0
    assert quotas.produce.sensor_keys() == [(None, "c1")]


def test_a_user_quota_is_shared_by_the_users_clients() -> None:
    quotas = ClientQuotaManagers()
    quotas.configs.update_quota(QuotaEntity("alice"), PRODUCER_BYTE_RATE, 1000)
    produce = quotas.produce
    assert produce.maybe_record_and_get_throttle_time_ms("alice", "c1", 8000, 0) == 0  # 800/s
    assert produce.maybe_record_and_get_throttle_time_ms("alice", "c2", 4000, 0) == 2000  # 1200/s together
    assert produce.maybe_record_and_get_throttle_time_ms("bob", "c2", 4000, 0) == 0
    assert sorted(produce.sensor_keys(), key=str) == [("alice", None), (None, "c2")]


def test_a_client_id_at_the_user_client_level_is_not_shared_across_users() -> None:
    quotas = ClientQuotaManagers()
    quotas.configs.update_quota(QuotaEntity(DEFAULT, "c1"), PRODUCER_BYTE_RATE, 1000)
    produce = quotas.produce
    assert produce.maybe_record_and_get_throttle_time_ms("alice", "c1", 8000, 0) == 0
    assert produce.maybe_record_and_get_throttle_time_ms("bob", "c1", 8000, 0) == 0  # a meter of its own
    assert sorted(produce.sensor_keys()) == [("alice", "c1"), ("bob", "c1")]
    # at the <client-id> level, c1 is one meter under every user
    quotas.configs.update_quota(QuotaEntity(DEFAULT, "c1"), PRODUCER_BYTE_RATE, None)
    quotas.configs.update_quota(QuotaEntity(None, "c1"), PRODUCER_BYTE_RATE, 1000)
    assert produce.maybe_record_and_get_throttle_time_ms("alice", "c1", 8000, 0) == 0
    assert produce.maybe_record_and_get_throttle_time_ms("bob", "c1", 8000, 0) == 6000  # 1600/s together


def test_a_quota_change_applies_at_the_next_record() -> None:
    quotas = _producer_quotas(1000)
    produce = quotas.produce
    assert produce.maybe_record_and_get_throttle_time_ms("u", "p", 20_000, 0) == 10_000
    quotas.configs.update_quota(QuotaEntity(None, DEFAULT), PRODUCER_BYTE_RATE, 4000)
    quotas.configs.update_quota(QuotaEntity(client_id="p"), PRODUCER_BYTE_RATE, None)
    assert produce.maybe_record_and_get_throttle_time_ms("u", "p", 1, 0) == 0  # 2000/s, under <default>'s 4000
    produce.unrecord("u", "p", 1, 0)
    assert produce.maybe_record_and_get_throttle_time_ms("u", "p", 20_000, 0) == 0  # exactly 4000/s


def test_sensors_expire_after_an_hour_without_records() -> None:
    quotas = _producer_quotas(1000)
    produce = quotas.produce
    produce.maybe_record_and_get_throttle_time_ms("u", "p", 1, 0)
    produce.maybe_record_and_get_throttle_time_ms("u", "q", 1, 1000)
    assert produce.expire_sensors(INACTIVE_SENSOR_EXPIRATION_MS) == 0
    assert produce.expire_sensors(INACTIVE_SENSOR_EXPIRATION_MS + 1) == 1
    assert produce.sensor_keys() == [(None, "q")]
    # records look for expired sensors themselves, 30 s after the last look
    produce.maybe_record_and_get_throttle_time_ms("u", "r", 1, INACTIVE_SENSOR_EXPIRATION_MS + 30_000)
    assert produce.sensor_keys() == [(None, "q"), (None, "r")]
    produce.maybe_record_and_get_throttle_time_ms("u", "r", 1, INACTIVE_SENSOR_EXPIRATION_MS + 30_001)
    assert produce.sensor_keys() == [(None, "r")]


def test_without_a_quota_of_its_type_a_manager_keeps_nothing() -> None:
    quotas = ClientQuotaManagers()
    quotas.configs.update_quota(QuotaEntity(None, DEFAULT), CONSUMER_BYTE_RATE, 1)
    produce = quotas.produce
    assert not produce.enabled and quotas.fetch.enabled
    for now in range(0, 100_000, 100):
        assert produce.maybe_record_and_get_throttle_time_ms("u", "p", 10 * MIB, now) == 0
        produce.record_no_throttle("u", "p", 10 * MIB, now)
        produce.record_throttle_time("u", "p", 100, now)
    quotas.request.record_exempt(10**9, 0)
    assert produce.sensor_keys() == [] and quotas.request.sensor_keys() == []
    assert produce.max_value_in_quota_window("u", "p") == math.inf
    assert quotas.fetch.maybe_record_and_get_throttle_time_ms("u", "p", 100, 0) > 0
    quotas.configs.update_quota(QuotaEntity(None, DEFAULT), CONSUMER_BYTE_RATE, None)
    assert not quotas.fetch.enabled


def test_request_percentage_throttles_a_busy_client_for_at_most_one_window() -> None:
    quotas = ClientQuotaManagers()
    quotas.configs.update_quota(QuotaEntity(DEFAULT), REQUEST_PERCENTAGE, 50)  # each user has a meter
    request = quotas.request
    # 10 s of thread time at once: 100% over the padded 10 s, twice the bound; (100-50)/50 * 10 s, capped at 1 s
    assert request.record_request_time("alice", "c1", 10 * 10**9, 0) == 1000
    # a client using 10% of a thread is never throttled
    for now in range(0, 60_000, 100):
        assert request.record_request_time("bob", "c1", 10 * 10**6, now) == 0
    bob = next(m for m in request.metrics(60_000) if m.tags == (("user", "bob"), ("client-id", "")))
    assert (bob.name, bob.value) == ("request-time", 10.0)  # 11 samples of 10 over 11 s
    # a client using a whole thread is, by at most a window each time
    throttles = [request.record_request_time("carol", "c1", 100 * 10**6, now) for now in range(0, 60_000, 100)]
    assert max(throttles) == 1000 and throttles[0] == 0
    # network thread time is recorded without a throttle time; the next request pays for it
    request.record_network_time("alice", "c1", 10 * 10**9, 0)
    assert request.record_request_time("alice", "c1", 0, 0) == 1000


def test_metrics_are_named_as_kafkas() -> None:
    quotas = _producer_quotas(1000)
    quotas.configs.update_quota(QuotaEntity("alice"), REQUEST_PERCENTAGE, 50)
    quotas.produce.maybe_record_and_get_throttle_time_ms("alice", "p", 20_000, 0)
    byte_rate, throttle_time = quotas.produce.metrics(0)
    assert (byte_rate.group, byte_rate.name, byte_rate.tags, byte_rate.value) == (
        "Produce", "byte-rate", (("user", ""), ("client-id", "p")), 2000.0)
    assert throttle_time.name == "throttle-time" and math.isnan(throttle_time.value)
    quotas.produce.record_throttle_time("alice", "p", 10_000, 0)
    quotas.produce.record_throttle_time("alice", "p", 2000, 100)
    assert quotas.produce.metrics(100)[1].value == 6000.0
    quotas.request.record_request_time("alice", "c1", 10**9, 0)
    quotas.request.record_exempt(3 * 10**9, 0)
    request_time, _, exempt = quotas.request.metrics(0)
    assert (request_time.group, request_time.name, request_time.tags, request_time.value) == (
        "Request", "request-time", (("user", "alice"), ("client-id", "")), 10.0)
    assert (exempt.name, exempt.tags, exempt.value) == ("exempt-request-time", (), 300.0 / 30)


def test_stored_configs_are_parsed_as_kafkas_types(caplog: pytest.LogCaptureFixture) -> None:
    quotas = ClientQuotaManagers()
    entity = QuotaEntity("alice", DEFAULT)
    with caplog.at_level(logging.WARNING):
        quotas.configs.update_entity(entity, {PRODUCER_BYTE_RATE: "1.5", CONSUMER_BYTE_RATE: "2048",
                                              REQUEST_PERCENTAGE: "12.5", CONTROLLER_MUTATION_RATE: "10",
                                              "SCRAM-SHA-256": "salt=..."})
    assert "producer_byte_rate" in caplog.text  # not a long: left unset
    assert quotas.configs.describe({}, strict=False) == {
        entity: {CONSUMER_BYTE_RATE: 2048.0, REQUEST_PERCENTAGE: 12.5, CONTROLLER_MUTATION_RATE: 10.0}}
    quotas.configs.update_entity(entity, {CONTROLLER_MUTATION_RATE: "10"})
    assert quotas.configs.describe({}, strict=False) == {entity: {CONTROLLER_MUTATION_RATE: 10.0}}
    assert not (quotas.produce.enabled or quotas.fetch.enabled or quotas.request.enabled)
    quotas.configs.update_entity(entity, {})
    assert quotas.configs.describe({}, strict=False) == {}
    with pytest.raises(ValueError, match="Invalid configuration key"):
        quotas.configs.update_quota(entity, "connection_creation_rate", 1)


def test_alter_client_quotas_values_are_checked_as_kafkas() -> None:
    assert quota_config_string(PRODUCER_BYTE_RATE, 1024.0) == "1024"
    assert quota_config_string(PRODUCER_BYTE_RATE, 1024.0000001) == "1024"
    assert quota_config_string(REQUEST_PERCENTAGE, 12.5) == "12.5"
    with pytest.raises(ValueError, match="Configuration consumer_byte_rate must be a LONG value"):
        quota_config_string(CONSUMER_BYTE_RATE, 1.5)
    with pytest.raises(ValueError, match="Invalid configuration key foo"):
        quota_config_string("foo", 1)


def test_describe_filters_match_exact_default_and_any() -> None:
    quotas = ClientQuotaManagers()
    entities = [QuotaEntity("alice"), QuotaEntity(DEFAULT), QuotaEntity("alice", "c1"), QuotaEntity(DEFAULT, DEFAULT),
                QuotaEntity(None, "c1"), QuotaEntity(None, DEFAULT)]
    for entity in entities:
        quotas.configs.update_quota(entity, PRODUCER_BYTE_RATE, 1)

    def described(strict: bool, **components: FilterComponent) -> set[QuotaEntity]:
        by_type = {kind.replace("_", "-"): component for kind, component in components.items()}
        return set(quotas.configs.describe(by_type, strict))

    alice = FilterComponent(MatchType.EXACT, "alice")
    assert described(False, user=alice) == {QuotaEntity("alice"), QuotaEntity("alice", "c1")}
    assert described(True, user=alice) == {QuotaEntity("alice")}
    assert described(False, user=FilterComponent(MatchType.DEFAULT)) == {QuotaEntity(DEFAULT),
                                                                        QuotaEntity(DEFAULT, DEFAULT)}
    assert described(True, user=FilterComponent(MatchType.ANY)) == {QuotaEntity("alice"), QuotaEntity(DEFAULT)}
    assert described(True, user=FilterComponent(MatchType.ANY), client_id=FilterComponent(MatchType.ANY)) == {
        QuotaEntity("alice", "c1"), QuotaEntity(DEFAULT, DEFAULT)}
    assert described(False, client_id=FilterComponent(MatchType.EXACT, "c1")) == {QuotaEntity("alice", "c1"),
                                                                                 QuotaEntity(None, "c1")}
    assert described(False) == set(entities)
    assert described(True) == set()
