"""The broker's client quotas at work, without a broker (broker/client_quotas.py, the muting of
broker/connection.py, the quota metrics of broker/metrics.py): ZooKeeper's entity names, what
each request records and when (a Produce's size at arrival, a consumer Fetch's response,
followers exempt, the request's time on the event loop and not its waits), the throttle time a
handler puts in its response, a throttled connection reading nothing until its time is over,
and the metrics' names. Time is a fake clock where the quotas measure it."""
from __future__ import annotations

import asyncio
import struct
import threading
import time
from typing import Any

import pytest

from odradek.broker import api_keys, client_quotas
from odradek.broker.client_quota_manager import (
    CONSUMER_BYTE_RATE,
    DEFAULT,
    PRODUCER_BYTE_RATE,
    REQUEST_PERCENTAGE,
    QuotaEntity,
)
from odradek.broker.client_quotas import (
    ClientQuotas,
    entity_of_znode,
    metered,
    record_fetch_response,
    throttle_time_ms,
    user_of,
    znode_of,
)
from odradek.broker.connection import KafkaConnection
from odradek.broker.metrics import ClientQuotaCollector
from odradek.broker.session import Session
from odradek.protocol import controller_api, kio_util

ALICE = Session("User:alice", "10.0.0.7")
ANONYMOUS = Session("User:ANONYMOUS", "10.0.0.8")


class Clock:
    def __init__(self) -> None:
        self.ms = 1_000_000

    def __call__(self) -> int:
        return self.ms


def _fetched(size: int) -> list[tuple[str, list[tuple[int, int, int, int, bytes, int, None]]]]:
    """A Fetch response's topics (fast_paths' shape) carrying ``size`` bytes of records."""
    return [("t", [(0, 0, 0, 0, b"r" * (size // 2), -1, None), (1, 0, 0, 0, b"r" * (size - size // 2), -1, None)])]


def quotas_with(clock: Clock, *settings: tuple[QuotaEntity, str, float]) -> ClientQuotas:
    quotas = ClientQuotas(clock=clock)
    for entity, key, value in settings:
        quotas.managers.configs.update_quota(entity, key, value)
    return quotas


# -- names ----------------------------------------------------------------------------------

@pytest.mark.parametrize(("entity", "znode"), [
    (QuotaEntity("alice", None), ("users", "alice")),
    (QuotaEntity("CN=bob,O=x y*", None), ("users", "CN%3Dbob%2CO%3Dx%20y%2A")),
    (QuotaEntity(DEFAULT, None), ("users", "<default>")),
    (QuotaEntity("alice", "app/1"), ("users", "alice/clients/app%2F1")),
    (QuotaEntity(DEFAULT, DEFAULT), ("users", "<default>/clients/<default>")),
    (QuotaEntity(None, "app"), ("clients", "app")),
    (QuotaEntity(None, DEFAULT), ("clients", "<default>")),
    (QuotaEntity("<default>", None), ("users", "%3Cdefault%3E")),  # a user so named is not the default
])
def test_entities_are_kafkas_znodes(entity: QuotaEntity, znode: tuple[str, str]) -> None:
    assert znode_of(entity) == znode
    assert entity_of_znode(*znode) == entity


@pytest.mark.parametrize("znode", [("users", "alice/clients"), ("users", "alice/groups/x"), ("clients", "a/b"),
                                   ("users", "%E0%A4%A"), ("topics", "t")])
def test_names_no_entity_has_are_none(znode: tuple[str, str]) -> None:
    assert entity_of_znode(*znode) is None


def test_the_user_is_the_principals_name() -> None:
    assert user_of("User:alice") == "alice"
    assert user_of("User:CN=a:b") == "CN=a:b"
    assert user_of("ANONYMOUS") == "ANONYMOUS"


def test_the_stored_configs_reach_the_managers_and_other_keys_are_ignored(caplog: pytest.LogCaptureFixture) -> None:
    quotas = ClientQuotas()
    assert not quotas.enabled
    quotas.on_user_config("alice", {"SCRAM-SHA-256": "salt=...", "producer_byte_rate": "1000"})
    quotas.on_user_config("alice/clients/app", {"request_percentage": "50.5"})
    quotas.on_client_config("<default>", {"consumer_byte_rate": "2000"})
    quotas.on_user_config("alice/oops", {"producer_byte_rate": "1"})
    assert "ignoring /config/users/alice/oops" in caplog.text
    configs = quotas.managers.configs
    assert quotas.enabled
    assert configs.resolve(PRODUCER_BYTE_RATE, "alice", "x") == (("alice", None), 1000.0)
    assert configs.resolve(REQUEST_PERCENTAGE, "alice", "app") == (("alice", "app"), 50.5)
    assert configs.resolve(CONSUMER_BYTE_RATE, "bob", "y") == ((None, "y"), 2000.0)
    quotas.on_user_config("alice", {"SCRAM-SHA-256": "salt=..."})  # the quota removed, the credential stays
    quotas.on_user_config("alice/clients/app", {})
    quotas.on_client_config("<default>", {})
    assert not quotas.enabled


# -- what a request records -----------------------------------------------------------------

def frame(api_key: int, version: int, body: dict[str, Any], client_id: str | None = "app") -> bytes:
    return kio_util.encode_request(api_key, version, 7, client_id, body)[4:]


def produce_frame(size: int, client_id: str = "app") -> bytes:
    body = {"transactional_id": None, "acks": 1, "timeout": 1000,
            "topic_data": [{"name": "t", "partition_data": [{"index": 0, "records": b"x" * size}]}]}
    return frame(api_keys.PRODUCE, 9, body, client_id)


def fetch_frame(version: int, replica_id: int) -> bytes:
    body = {"replica_id": replica_id, "max_wait": 0, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0,
            "session_id": 0, "session_epoch": -1, "topics": [], "forgotten_topics_data": [], "rack_id": ""}
    return frame(api_keys.FETCH, version, body)


def test_without_any_quota_a_request_costs_nothing() -> None:
    quotas = ClientQuotas()
    assert quotas.begin(produce_frame(100), ALICE) is None
    assert throttle_time_ms() == 0 and record_fetch_response(_fetched(100)) == 0


def test_a_produce_is_recorded_at_arrival_and_its_throttle_known_to_the_handler() -> None:
    clock = Clock()
    quotas = quotas_with(clock, (QuotaEntity(None, "app"), PRODUCER_BYTE_RATE, 1000))
    request = produce_frame(9000)
    first = quotas.begin(request, ALICE)
    assert first is not None and first.user == "alice" and first.client_id == "app" and first.produce_ms == 0
    second = quotas.begin(request, ALICE)
    assert second is not None
    # 2 frames over the padded 10 s window: (rate - bound) / bound * 10 s
    rate = 2 * len(request) / 10
    assert second.produce_ms == round((rate - 1000) / 1000 * 10_000)
    token = client_quotas.enter(second)
    try:
        assert throttle_time_ms() == second.produce_ms  # what the Produce handler writes in its response
    finally:
        client_quotas.leave(token)
    assert throttle_time_ms() == 0
    assert quotas.finish(second, b"response") == second.produce_ms  # and the connection is muted as long
    assert quotas.managers.produce.metrics(clock.ms)[1].value == second.produce_ms  # throttle-time
    other = quotas.begin(produce_frame(9000, client_id="other"), ALICE)
    assert other is not None and other.produce_ms == 0  # no level bounds it


def test_a_consumer_fetch_is_recorded_once_and_a_followers_not_at_all() -> None:
    clock = Clock()
    quotas = quotas_with(clock, (QuotaEntity(None, "app"), CONSUMER_BYTE_RATE, 100))
    fetches = quotas.managers.fetch
    for version in (4, 11, 12):
        follower = quotas.begin(fetch_frame(version, replica_id=2), ANONYMOUS)
        assert follower is not None and follower.exempt
        token = client_quotas.enter(follower)
        try:
            assert record_fetch_response(_fetched(10_000)) == 0
        finally:
            client_quotas.leave(token)
        assert quotas.finish(follower, [b"x" * 10_000]) == 0
    assert fetches.sensor_keys() == []
    consumer = quotas.begin(fetch_frame(12, replica_id=-1), ANONYMOUS)
    assert consumer is not None and not consumer.exempt
    token = client_quotas.enter(consumer)
    try:
        throttle = record_fetch_response(_fetched(2000))  # the handler records what it is about to send
        assert throttle == round((2000 / 10 - 100) / 100 * 10_000)
        assert throttle_time_ms() == throttle
    finally:
        client_quotas.leave(token)
    assert quotas.finish(consumer, [b"x" * 2000]) == throttle
    assert fetches.metrics(clock.ms)[0].value == pytest.approx(2000 / 10)  # recorded once, not twice
    # a handler that does not record: the response's size is, as it is sent
    later = quotas.begin(fetch_frame(12, replica_id=-1), ANONYMOUS)
    assert later is not None
    assert quotas.finish(later, [b"head", b"x" * 996]) > throttle
    assert fetches.metrics(clock.ms)[0].value == pytest.approx(3000 / 10)


def test_request_time_is_metered_exempt_between_brokers_and_not_for_acks_0() -> None:
    clock = Clock()
    quotas = quotas_with(clock, (QuotaEntity("alice", None), REQUEST_PERCENTAGE, 1))
    requests = quotas.managers.request
    quota = quotas.begin(frame(api_keys.METADATA, 12, {"topics": None, "allow_auto_topic_creation": False,
                                                          "include_topic_authorized_operations": False}), ALICE)
    assert quota is not None
    quota.busy_ns = 200_000_000  # 200 ms of the loop: 20% of one second, over a 10 s window 2%/s
    # 20 over a window of 10 s is 2/s, twice the bound: throttled a window (capped at one)
    assert quotas.finish(quota, b"answer") == 1000
    acks_0 = quotas.begin(produce_frame(10), ALICE)
    assert acks_0 is not None
    acks_0.busy_ns = 10**9
    assert quotas.finish(acks_0, None) == 0  # no response: no request quota, as Kafka
    for api_key, version in ((api_keys.WRITE_TXN_MARKERS, 1), (api_keys.ADD_PARTITIONS_TO_TXN, 4),
                             *((key, v) for key, v in controller_api.VERSIONS.items())):
        between_brokers = quotas.begin(header_only(api_key, version), ALICE)
        assert between_brokers is not None and between_brokers.exempt, api_key
        between_brokers.busy_ns = 10**9
        assert quotas.finish(between_brokers, b"answer") == 0
    producer_add = quotas.begin(header_only(api_keys.ADD_PARTITIONS_TO_TXN, 3), ALICE)
    assert producer_add is not None and not producer_add.exempt  # from a producer: metered
    exempt = [m for m in requests.metrics(clock.ms) if m.name == "exempt-request-time"]
    # 6 s of 100%/s, over the exempt meter's padded window (metrics.sample.window.ms, 30 s)
    assert exempt[0].value == pytest.approx(600 / 30)


def header_only(api_key: int, version: int) -> bytes:
    """A request header without a body: all the quotas read of anything but a Fetch."""
    return struct.pack(">hhih", api_key, version, 7, 3) + b"app"


def test_a_frame_whose_header_cannot_be_read_is_left_to_the_handler() -> None:
    quotas = quotas_with(Clock(), (QuotaEntity(None, "app"), PRODUCER_BYTE_RATE, 1))
    assert quotas.begin(b"\x00\x00\x00\x09\x00\x00\x00\x01\x00\x40", ALICE) is None


def test_metered_counts_the_steps_not_the_waits() -> None:
    quota = client_quotas.RequestQuota(ClientQuotas(), api_keys.METADATA, "alice", "app", False)

    async def handler() -> str:
        busy_until = time.perf_counter() + 0.02
        while time.perf_counter() < busy_until:
            pass
        await asyncio.sleep(0.2)
        busy_until = time.perf_counter() + 0.02
        while time.perf_counter() < busy_until:
            pass
        return "answer"

    assert asyncio.run(_await(metered(handler(), quota))) == "answer"
    assert 0.04 <= quota.busy_ns / 1e9 < 0.15


async def _await(awaitable: Any) -> Any:
    return await awaitable


def test_metered_passes_cancellation_and_errors_through() -> None:
    quota = client_quotas.RequestQuota(ClientQuotas(), api_keys.METADATA, "alice", "app", False)

    async def failing() -> None:
        await asyncio.sleep(0)
        raise ValueError("handler failed")

    with pytest.raises(ValueError, match="handler failed"):
        asyncio.run(_await(metered(failing(), quota)))
    cleaned = []

    async def slow() -> None:
        try:
            await asyncio.sleep(10)
        finally:
            cleaned.append(True)

    async def cancel() -> None:
        task = asyncio.ensure_future(_await(metered(slow(), quota)))
        await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(cancel())
    assert cleaned == [True]


# -- a throttled connection -----------------------------------------------------------------

async def until(condition: Any, timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "not seen in time"
        await asyncio.sleep(0.005)


class Transport:
    def __init__(self) -> None:
        self.paused = False
        self.pauses = 0
        self.written: list[bytes] = []
        self.closed = False

    def get_extra_info(self, name: str) -> Any:
        return ("127.0.0.1", 5555) if name == "peername" else None

    def pause_reading(self) -> None:
        assert not self.paused
        self.paused = True
        self.pauses += 1

    def resume_reading(self) -> None:
        assert self.paused
        self.paused = False

    def write(self, data: bytes) -> None:
        self.written.append(data)

    def writelines(self, data: list[bytes]) -> None:
        self.written.append(b"".join(data))

    def close(self) -> None:
        self.closed = True


def framed(payload: bytes) -> bytes:
    return len(payload).to_bytes(4, "big") + payload


def test_a_throttled_connection_reads_nothing_until_its_time_is_over() -> None:
    async def run() -> None:
        seen: list[bytes] = []
        conn: KafkaConnection

        def handler(frame: memoryview, _conn: KafkaConnection) -> bytes:
            seen.append(bytes(frame))
            if bytes(frame) == b"slow":
                conn.throttle(100)
            return b"re:" + bytes(frame)

        conn = KafkaConnection(handler, 1 << 20)
        transport = Transport()
        conn.connection_made(transport)  # type: ignore[arg-type]
        started = time.monotonic()
        conn.data_received(framed(b"a") + framed(b"slow") + framed(b"b") + framed(b"c"))
        # the throttled response goes out at once; the requests behind it wait
        assert seen == [b"a", b"slow"] and transport.written == [b"re:a", b"re:slow"]
        assert transport.paused and conn.throttled
        conn.data_received(framed(b"d"))  # what a transport still delivers waits too
        conn.throttle(20)  # a shorter throttle does not cut a longer one short
        await asyncio.sleep(0.05)
        assert seen == [b"a", b"slow"]
        await until(lambda: not conn.throttled)
        assert time.monotonic() - started >= 0.1
        assert seen == [b"a", b"slow", b"b", b"c", b"d"] and not transport.paused
        assert transport.written[-3:] == [b"re:b", b"re:c", b"re:d"]
        conn.throttle(50)
        conn.connection_lost(None)  # the timer goes with the connection
        assert not conn.throttled

    asyncio.run(run())


def test_a_held_request_that_throttles_again_keeps_the_rest_waiting() -> None:
    async def run() -> None:
        seen: list[bytes] = []
        conn: KafkaConnection

        def handler(frame: memoryview, _conn: KafkaConnection) -> bytes:
            seen.append(bytes(frame))
            conn.throttle(30)  # every request over the quota
            return b"ok"

        conn = KafkaConnection(handler, 1 << 20)
        transport = Transport()
        conn.connection_made(transport)  # type: ignore[arg-type]
        conn.data_received(framed(b"1") + framed(b"2") + framed(b"3"))
        assert seen == [b"1"]
        await asyncio.sleep(0.045)
        assert seen == [b"1", b"2"]
        await until(lambda: len(seen) == 3)
        assert transport.pauses == 1 and transport.paused  # never resumed in between

    asyncio.run(run())


# -- metrics --------------------------------------------------------------------------------

def test_quota_metrics_are_exported_with_the_jmx_exporters_names() -> None:
    clock = Clock()
    quotas = quotas_with(clock, (QuotaEntity(None, "app"), PRODUCER_BYTE_RATE, 1000),
                         (QuotaEntity("alice", None), REQUEST_PERCENTAGE, 50))
    for _ in range(2):
        quota = quotas.begin(produce_frame(9000), ALICE)
        assert quota is not None
        quotas.finish(quota, b"ok")

    async def scrape_on_and_off_the_loop() -> tuple[list[Any], list[Any]]:
        collector = ClientQuotaCollector(quotas.metrics, asyncio.get_running_loop())
        on_loop = list(collector.collect())
        result: list[list[Any]] = []
        scraper = threading.Thread(target=lambda: result.append(list(collector.collect())))
        scraper.start()
        await until(lambda: not scraper.is_alive())
        return on_loop, result[0]

    on_loop, off_loop = asyncio.run(scrape_on_and_off_the_loop())
    samples = {(f.name, tuple(sorted(s.labels.items()))): s.value for f in on_loop for s in f.samples}
    assert repr(samples) == repr({(f.name, tuple(sorted(s.labels.items()))): s.value
                                  for f in off_loop for s in f.samples})
    app = (("client_id", "app"), ("user", ""))
    alice = (("client_id", ""), ("user", "alice"))
    assert samples[("kafka_server_produce_byte_rate", app)] == pytest.approx(2 * len(produce_frame(9000)) / 10)
    assert samples[("kafka_server_produce_throttle_time", app)] > 0
    assert ("kafka_server_request_request_time", alice) in samples
    assert ("kafka_server_request_throttle_time", alice) in samples
    assert ("kafka_server_request_exempt_request_time", ()) in samples
    assert not any(name.startswith("kafka_server_fetch") for name, _ in samples)  # no fetch quota: no meter


def test_a_stalled_loop_leaves_the_quota_metrics_out_of_a_scrape() -> None:
    loop = asyncio.new_event_loop()
    try:
        collector = ClientQuotaCollector(lambda: [], loop, timeout_s=0.05)
        assert list(collector.collect()) == []  # the loop never runs: nothing, no exception
    finally:
        loop.close()
