"""DescribeClientQuotas and AlterClientQuotas (broker/client_quota_apis.py) through their
handlers, on encoded requests, against a real ZooKeeper: the znodes in Kafka's format (nested
users/<user>/clients/<id> ones with their parents, <default>, sanitized names), a user's SCRAM
credential kept, one multi per request, a concurrent change read again rather than lost,
Kafka's filters and error codes for each way a request can be wrong, validate_only, and the
DynamicConfigManager loading every quota entity, nested ones included, at startup."""
from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest

from odradek.broker import api_keys
from odradek.broker.client_quota_apis import ROUTES, parse_filter
from odradek.broker.client_quota_manager import CLIENT_ID, USER, FilterComponent, MatchType
from odradek.broker.client_quotas import ClientQuotas
from odradek.broker.dynamic_config_manager import DynamicConfigManager
from odradek.protocol import kio_util
from odradek.protocol.errors import ErrorCode
from odradek.zk import admin_zk_client as azk
from odradek.zk.client import KafkaZkClient

DESCRIBE, ALTER = api_keys.DESCRIBE_CLIENT_QUOTAS, api_keys.ALTER_CLIENT_QUOTAS
EXACT, DEFAULT, ANY = 0, 1, 2
SCRAM = "salt=c2FsdA==,stored_key=a2V5,server_key=a2V5,iterations=4096"


@pytest.fixture
def zk(zk_connect: str) -> Iterator[KafkaZkClient]:
    client = KafkaZkClient(zk_connect, session_timeout_s=4.0)
    client.start()
    try:
        yield client
    finally:
        client.close()


def context(zk: Any, allowed: bool = True) -> Any:
    authorizer = None if allowed else SimpleNamespace(authorize=lambda *_args: False)
    return SimpleNamespace(zk=zk, authorizer=authorizer, config=SimpleNamespace(zookeeper_jute_maxbuffer=0xFFFFF))


def call(ctx: Any, api_key: int, body: dict[str, Any], version: int = 1) -> Any:
    frame = kio_util.encode_request(api_key, version, 7, "test", body)
    header, request = kio_util.decode_request(frame[4:])
    response = asyncio.run(ROUTES[api_key](ctx, header, request, version))
    correlation_id, decoded = kio_util.decode_response(api_key, version, response[4:])
    assert correlation_id == 7
    return decoded


def entity(user: str | None | bool = False, client_id: str | None | bool = False) -> list[dict[str, Any]]:
    """An entity's components: a name, None for the default, False for not part of it."""
    return [{"entity_type": kind, "entity_name": name} for kind, name in ((USER, user), (CLIENT_ID, client_id))
            if name is not False]


def op(key: str, value: float | None) -> dict[str, Any]:
    return {"key": key, "value": 0.0 if value is None else value, "remove": value is None}


def alter(ctx: Any, *entries: tuple[list[dict[str, Any]], list[dict[str, Any]]], validate_only: bool = False,
          version: int = 1) -> list[tuple[list[tuple[str, str | None]], int, str | None]]:
    response = call(ctx, ALTER, {"entries": [{"entity": e, "ops": ops} for e, ops in entries],
                                 "validate_only": validate_only}, version)
    return [([(c.entity_type, c.entity_name) for c in r.entity], int(r.error_code), r.error_message)
            for r in response.entries]


def describe(ctx: Any, *components: tuple[str, int, str | None], strict: bool = False,
             version: int = 1) -> Any:
    return call(ctx, DESCRIBE, {"components": [{"entity_type": t, "match_type": m, "match": n}
                                               for t, m, n in components], "strict": strict}, version)


def described(response: Any) -> dict[tuple[tuple[str, str | None], ...], dict[str, float]]:
    assert int(response.error_code) == 0, response.error_message
    return {tuple((c.entity_type, c.entity_name) for c in e.entity): {v.key: v.value for v in e.values}
            for e in response.entries}


def node(zk: KafkaZkClient, path: str) -> Any:
    data = zk.kazoo.get(path)[0]
    return json.loads(data) if data else data


def notifications(zk: KafkaZkClient) -> list[str]:
    kz = zk.kazoo
    return [json.loads(kz.get(f"/config/changes/{c}")[0])["entity_path"] for c in sorted(kz.get_children(
        "/config/changes"))]


def test_quotas_are_stored_as_kafka_stores_them_and_described(zk: KafkaZkClient) -> None:
    zk.change_entity_configs({(azk.USERS, "alice"): {"SCRAM-SHA-256": SCRAM}})  # a SCRAM user first
    before = len(notifications(zk))
    ctx = context(zk)
    bob = "CN=bob,O=x y*"
    assert alter(ctx, (entity("alice", "app"), [op("producer_byte_rate", 1048576), op("request_percentage", 200)]),
                 (entity("alice"), [op("consumer_byte_rate", 2e6)]),
                 (entity(None), [op("producer_byte_rate", 512)]),
                 (entity(None, None), [op("request_percentage", 12.5)]),
                 (entity(client_id="app/1"), [op("consumer_byte_rate", 3000)]),
                 (entity(client_id=None), [op("controller_mutation_rate", 7)]),
                 (entity(bob, "app"), [op("producer_byte_rate", 99)])) == [
        ([("user", "alice"), ("client-id", "app")], 0, None), ([("user", "alice")], 0, None),
        ([("user", None)], 0, None), ([("user", None), ("client-id", None)], 0, None),
        ([("client-id", "app/1")], 0, None), ([("client-id", None)], 0, None),
        ([("user", bob), ("client-id", "app")], 0, None)]
    # Kafka's znodes: sanitized names, <default>, byte rates as longs, percentages as doubles
    assert node(zk, "/config/users/alice/clients/app") == {
        "version": 1, "config": {"producer_byte_rate": "1048576", "request_percentage": "200.0"}}
    assert node(zk, "/config/users/alice") == {"version": 1, "config": {"SCRAM-SHA-256": SCRAM,
                                                                        "consumer_byte_rate": "2000000"}}
    assert node(zk, "/config/users/<default>") == {"version": 1, "config": {"producer_byte_rate": "512"}}
    assert node(zk, "/config/users/<default>/clients/<default>") == {
        "version": 1, "config": {"request_percentage": "12.5"}}
    assert node(zk, "/config/clients/app%2F1") == {"version": 1, "config": {"consumer_byte_rate": "3000"}}
    assert node(zk, "/config/clients/<default>") == {"version": 1, "config": {"controller_mutation_rate": "7.0"}}
    # a nested entity's parents, created as Kafka's createRecursive would leave them readable
    assert node(zk, "/config/users/CN%3Dbob%2CO%3Dx%20y%2A") == {"version": 1, "config": {}}
    assert node(zk, "/config/users/CN%3Dbob%2CO%3Dx%20y%2A/clients") == b""
    assert node(zk, "/config/users/CN%3Dbob%2CO%3Dx%20y%2A/clients/app") == {
        "version": 1, "config": {"producer_byte_rate": "99"}}
    assert sorted(notifications(zk)[before:]) == sorted([
        "users/alice/clients/app", "users/alice", "users/<default>", "users/<default>/clients/<default>",
        "clients/app%2F1", "clients/<default>", "users/CN%3Dbob%2CO%3Dx%20y%2A/clients/app"])

    everything = described(describe(ctx))
    assert everything == {
        (("user", "alice"),): {"consumer_byte_rate": 2e6},  # the SCRAM key is no quota
        (("user", "alice"), ("client-id", "app")): {"producer_byte_rate": 1048576, "request_percentage": 200},
        (("user", bob), ("client-id", "app")): {"producer_byte_rate": 99},
        (("user", None),): {"producer_byte_rate": 512},
        (("user", None), ("client-id", None)): {"request_percentage": 12.5},
        (("client-id", "app/1"),): {"consumer_byte_rate": 3000},
        (("client-id", None),): {"controller_mutation_rate": 7},
    }
    assert described(describe(ctx, version=0)) == everything
    assert set(described(describe(ctx, (USER, EXACT, "alice")))) == {
        (("user", "alice"),), (("user", "alice"), ("client-id", "app"))}
    assert set(described(describe(ctx, (USER, EXACT, "alice"), strict=True))) == {(("user", "alice"),)}
    assert set(described(describe(ctx, (USER, DEFAULT, None)))) == {
        (("user", None),), (("user", None), ("client-id", None))}
    assert set(described(describe(ctx, (USER, ANY, None), strict=True))) == {(("user", "alice"),), (("user", None),)}
    assert set(described(describe(ctx, (CLIENT_ID, EXACT, "app")))) == {
        (("user", "alice"), ("client-id", "app")), (("user", bob), ("client-id", "app"))}
    assert set(described(describe(ctx, (USER, ANY, None), (CLIENT_ID, DEFAULT, None), strict=True))) == {
        (("user", None), ("client-id", None))}
    assert set(described(describe(ctx, (CLIENT_ID, ANY, None), strict=True))) == {
        (("client-id", "app/1"),), (("client-id", None),)}
    assert described(describe(ctx, (USER, EXACT, "nobody"))) == {}
    assert described(describe(ctx, strict=True)) == {}
    assert described(describe(ctx, ("ip", ANY, None))) == {}  # odradek keeps no IP quotas

    # removing keys keeps the others; the SCRAM credential stays through every change
    assert alter(ctx, (entity("alice"), [op("consumer_byte_rate", None), op("producer_byte_rate", 10)]),
                 (entity("alice", "app"), [op("request_percentage", None)])) == [
        ([("user", "alice")], 0, None), ([("user", "alice"), ("client-id", "app")], 0, None)]
    assert node(zk, "/config/users/alice") == {"version": 1, "config": {"SCRAM-SHA-256": SCRAM,
                                                                        "producer_byte_rate": "10"}}
    assert node(zk, "/config/users/alice/clients/app") == {"version": 1, "config": {"producer_byte_rate": "1048576"}}
    # a change of nothing writes nothing
    before = len(notifications(zk))
    assert alter(ctx, (entity("nobody"), [op("producer_byte_rate", None)])) == [([("user", "nobody")], 0, None)]
    assert len(notifications(zk)) == before and zk.kazoo.exists("/config/users/nobody") is None


def test_one_multi_per_request_and_a_concurrent_change_is_read_again(zk: KafkaZkClient) -> None:
    calls: list[int] = []
    real = zk.update_entity_configs

    def update_entity_configs(keys: list[tuple[str, str]], update: Any, validate_only: bool = False) -> Any:
        calls.append(len(keys))

        def racing(current: dict[tuple[str, str], dict[str, str]]) -> dict[tuple[str, str], dict[str, str]]:
            if len(calls) == 1 and not getattr(racing, "raced", False):
                racing.raced = True  # type: ignore[attr-defined]
                # a SCRAM credential set on another broker between our read and our write
                zk.change_entity_configs({(azk.USERS, "carol"): {"SCRAM-SHA-512": SCRAM}})
            return update(current)

        return real(keys, racing, validate_only)

    ctx = context(SimpleNamespace(update_entity_configs=update_entity_configs))
    assert [code for _, code, _ in alter(ctx, (entity("carol"), [op("producer_byte_rate", 5)]),
                                         (entity(client_id="x"), [op("producer_byte_rate", 6)]))] == [0, 0]
    assert calls == [2]  # one call, one multi, for both entities
    assert node(zk, "/config/users/carol") == {"version": 1, "config": {"SCRAM-SHA-512": SCRAM,
                                                                        "producer_byte_rate": "5"}}
    assert node(zk, "/config/clients/x") == {"version": 1, "config": {"producer_byte_rate": "6"}}


INVALID = ErrorCode.INVALID_REQUEST


@pytest.mark.parametrize(("entry", "error", "words"), [
    ((entity(), [op("producer_byte_rate", 1)]), INVALID, "Invalid empty client quota entity"),
    (([{"entity_type": "group", "entity_name": "g"}], [op("producer_byte_rate", 1)]), INVALID,
     "Unhandled client quota entity type: group"),
    ((entity("") , [op("producer_byte_rate", 1)]), INVALID, "Empty user not supported"),
    ((entity("a") + entity("b"), [op("producer_byte_rate", 1)]), INVALID, "named twice"),
    (([{"entity_type": "ip", "entity_name": "10.0.0.1"}], [op("connection_creation_rate", 1)]), INVALID,
     "IP quotas"),
    (([{"entity_type": "ip", "entity_name": "10.0.0.1"}, *entity("a")], [op("producer_byte_rate", 1)]), INVALID,
     "IP entity should not be used with user/client ID entity"),
    ((entity("a"), [op("producer_bytes_rate", 1)]), INVALID, "Invalid configuration key producer_bytes_rate"),
    ((entity("a"), [op("SCRAM-SHA-256", None)]), INVALID, "Invalid configuration key SCRAM-SHA-256"),
    ((entity("a"), [op("producer_byte_rate", -1)]), INVALID, "must not be negative"),
    ((entity("a"), [op("request_percentage", float("nan"))]), INVALID, "must be a DOUBLE value"),
    ((entity("a"), [op("consumer_byte_rate", 1.5)]), INVALID, "Configuration consumer_byte_rate must be a LONG value"),
    ((entity("a"), [op("producer_byte_rate", 1), op("producer_byte_rate", None)]), INVALID,
     "Duplicate quota key producer_byte_rate"),
])
def test_an_entity_kafka_refuses_is_refused_and_the_others_altered(
        zk: KafkaZkClient, entry: tuple[list[dict[str, Any]], list[dict[str, Any]]], error: int, words: str) -> None:
    ctx = context(zk)
    results = alter(ctx, entry, (entity("good"), [op("producer_byte_rate", 1)]))
    assert [code for _, code, _ in results] == [error, 0]
    assert words in (results[0][2] or "")
    assert zk.kazoo.get_children("/config/users") == ["good"] and zk.kazoo.get_children("/config/clients") == []


def test_an_entity_twice_in_one_request_is_refused(zk: KafkaZkClient) -> None:
    ctx = context(zk)
    results = alter(ctx, (entity("a", "c"), [op("producer_byte_rate", 1)]),
                    (entity("a", "c"), [op("consumer_byte_rate", 1)]),
                    ([{"entity_type": "client-id", "entity_name": "d"}, {"entity_type": "user", "entity_name": "b"}],
                     [op("producer_byte_rate", 1)]),
                    (entity("b", "d"), [op("producer_byte_rate", 2)]),
                    (entity("e"), [op("producer_byte_rate", 3)]))
    assert [(components, code) for components, code, _ in results] == [
        ([("user", "a"), ("client-id", "c")], INVALID), ([("client-id", "d"), ("user", "b")], INVALID),
        ([("user", "b"), ("client-id", "d")], INVALID), ([("user", "e")], 0)]
    assert zk.kazoo.get_children("/config/users") == ["e"]


def test_validate_only_checks_and_writes_nothing(zk: KafkaZkClient) -> None:
    ctx = context(zk)
    before = notifications(zk)
    results = alter(ctx, (entity("a"), [op("producer_byte_rate", 1)]), (entity("b"), [op("nope", 1)]),
                    validate_only=True)
    assert [code for _, code, _ in results] == [0, INVALID]
    assert zk.kazoo.get_children("/config/users") == [] and notifications(zk) == before


def test_without_the_cluster_permissions_nothing_is_described_or_altered(zk: KafkaZkClient) -> None:
    ctx = context(zk, allowed=False)
    assert alter(ctx, (entity("a"), [op("producer_byte_rate", 1)]), (entity(client_id="c"), [])) == [
        ([("user", "a")], ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed."),
        ([("client-id", "c")], ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed.")]
    response = describe(ctx)
    assert int(response.error_code) == ErrorCode.CLUSTER_AUTHORIZATION_FAILED and response.entries is None
    assert zk.kazoo.get_children("/config/users") == []


@pytest.mark.parametrize(("components", "error", "words"), [
    ([("", ANY, None)], ErrorCode.INVALID_REQUEST, "Unexpected empty filter component entity type"),
    ([(USER, ANY, None), (USER, EXACT, "a")], ErrorCode.INVALID_REQUEST, "Duplicate user filter component"),
    ([(USER, EXACT, None)], ErrorCode.INVALID_REQUEST, "needs a name"),
    ([(USER, 3, None)], ErrorCode.INVALID_REQUEST, "Unexpected match type: 3"),
    ([("group", ANY, None)], ErrorCode.UNSUPPORTED_VERSION, "Custom entity type 'group' not supported"),
    ([("ip", ANY, None), (CLIENT_ID, ANY, None)], ErrorCode.INVALID_REQUEST, "IP filter component should not"),
])
def test_a_filter_kafka_refuses_is_refused(zk: KafkaZkClient, components: list[tuple[str, int, str | None]],
                                           error: int, words: str) -> None:
    response = describe(context(zk), *components)
    assert int(response.error_code) == error and words in response.error_message
    assert response.entries is None


def test_filters_are_parsed_as_kafkas() -> None:
    assert parse_filter([(USER, EXACT, "a"), (CLIENT_ID, DEFAULT, "ignored")]) == {
        USER: FilterComponent(MatchType.EXACT, "a"), CLIENT_ID: FilterComponent(MatchType.DEFAULT)}
    assert parse_filter([("ip", EXACT, "10.0.0.1")]) is None


def test_startup_loads_every_quota_entity_nested_ones_included(zk: KafkaZkClient) -> None:
    ctx = context(zk)
    assert [code for _, code, _ in alter(ctx, (entity("alice", "app"), [op("producer_byte_rate", 100)]),
                                         (entity(None, "app"), [op("consumer_byte_rate", 200)]),
                                         (entity(client_id="c"), [op("request_percentage", 5)]))] == [0, 0, 0]
    quotas = ClientQuotas()
    config = SimpleNamespace(update=lambda _entity, _config: None)
    dcm = DynamicConfigManager(1, zk, config, SimpleNamespace(partitions=lambda: []), None)  # type: ignore[arg-type]
    dcm._apply_broker_defaults = lambda: None  # type: ignore[method-assign]
    dcm.register(azk.USERS, quotas.on_user_config)
    dcm.register(azk.CLIENTS, quotas.on_client_config)

    async def run() -> None:
        await dcm.startup()
        dcm.shutdown()

    asyncio.run(run())
    configs = quotas.managers.configs
    assert configs.resolve("producer_byte_rate", "alice", "app") == (("alice", "app"), 100.0)
    assert configs.resolve("consumer_byte_rate", "bob", "app") == (("bob", "app"), 200.0)
    assert configs.resolve("request_percentage", "bob", "c") == ((None, "c"), 5.0)
