"""DescribeUserScramCredentials and AlterUserScramCredentials (broker/scram_credential_apis.py)
through their handlers, on encoded requests, against a ZooKeeper stand-in that records each
write: Kafka's error codes and messages for each way a request can be wrong, what is stored
(Kafka's format, other keys kept), one multi per request, and nothing stored for a refused user."""
from __future__ import annotations

import asyncio
import json
import re
from types import SimpleNamespace
from typing import Any

import pytest

from odradek.broker import api_keys
from odradek.broker.scram_credential_apis import ROUTES, describe_results
from odradek.protocol import kio_util
from odradek.protocol.errors import ErrorCode
from odradek.security.sasl import SCRAM_SHA_256, SCRAM_SHA_512
from odradek.security.scram import (
    ScramSaslClient,
    ScramSaslServer,
    credential_from_string,
    credential_to_string,
    generate_credential,
    new_salt,
    salted_password,
)
from odradek.zk import admin_zk_client as azk
from odradek.zk import paths

SHA256, SHA512 = 1, 2
CREDENTIAL = re.compile(r"salt=[A-Za-z0-9+/]+=*,stored_key=[A-Za-z0-9+/]+=*,server_key=[A-Za-z0-9+/]+=*,"
                        r"iterations=\d+")


class RecordingZk:
    """The KafkaZkClient calls the handlers make, on a dict of entity configs."""

    def __init__(self, configs: dict[str, dict[str, str]] | None = None) -> None:
        self.configs = {(azk.USERS, name): dict(c) for name, c in (configs or {}).items()}
        self.writes: list[dict[tuple[str, str], dict[str, str]]] = []
        self.fail_writes = False

    def get_entity_names(self, entity_type: str) -> list[str]:
        return sorted(name for kind, name in self.configs if kind == entity_type)

    def get_entity_configs(self, entity_type: str, names: Any) -> dict[str, dict[str, str]]:
        return {n: dict(self.configs.get((entity_type, n), {})) for n in names}

    def change_entity_configs(self, changes: dict[tuple[str, str], dict[str, str]],
                              validate_only: bool = False) -> list[str]:
        if self.fail_writes:
            raise ConnectionError("ZooKeeper is gone")
        self.writes.append(changes)
        for key, config in changes.items():  # what the znode would hold, through its encoder
            self.configs[key] = paths.decode_topic_config(paths.encode_topic_config(config))
        return []

    def stored(self, user: str) -> dict[str, str]:
        return self.configs[(azk.USERS, user)]


def context(zk: RecordingZk, *, controller: int = 1, allowed: bool = True, jute_maxbuffer: int = 0xFFFFF) -> Any:
    authorizer = None if allowed else SimpleNamespace(authorize=lambda *_args: False)
    return SimpleNamespace(zk=zk, authorizer=authorizer, metadata=SimpleNamespace(controller_id=controller),
                           config=SimpleNamespace(broker_id=1, zookeeper_jute_maxbuffer=jute_maxbuffer))


def call(ctx: Any, api_key: int, body: dict[str, Any]) -> Any:
    frame = kio_util.encode_request(api_key, 0, 7, "test", body)
    header, request = kio_util.decode_request(frame[4:])
    response = asyncio.run(ROUTES[api_key](ctx, header, request, 0))
    correlation_id, decoded = kio_util.decode_response(api_key, 0, response[4:])
    assert correlation_id == 7
    return decoded


def upsertion(name: str, mechanism: int = SHA256, password: str = "pw", iterations: int = 4096,
              salt: bytes | None = None, salted: bytes | None = None) -> dict[str, Any]:
    salt = new_salt() if salt is None else salt
    name_of = {SHA256: SCRAM_SHA_256, SHA512: SCRAM_SHA_512}.get(mechanism, SCRAM_SHA_256)
    if salted is None:
        salted = salted_password(name_of, password, salt or b"x", max(iterations, 1))
    return {"name": name, "mechanism": mechanism, "iterations": iterations, "salt": salt, "salted_password": salted}


def alter(ctx: Any, upsertions: list[dict[str, Any]], deletions: list[tuple[str, int]] = ()) -> dict[str, tuple]:
    response = call(ctx, api_keys.ALTER_USER_SCRAM_CREDENTIALS, {
        "upsertions": upsertions, "deletions": [{"name": n, "mechanism": m} for n, m in deletions]})
    users = [r.user for r in response.results]
    assert len(users) == len(set(users)), "each user answered once"
    return {r.user: (int(r.error_code), r.error_message) for r in response.results}


def describe(ctx: Any, users: list[str] | None) -> Any:
    return call(ctx, api_keys.DESCRIBE_USER_SCRAM_CREDENTIALS,
                {"users": None if users is None else [{"name": u} for u in users]})


def verifies(text: str, mechanism: str, user: str, password: str) -> bool:
    """A SCRAM exchange of ``password`` against the stored credential string."""
    credential = credential_from_string(text)
    server = ScramSaslServer(mechanism, lambda name: credential if name == user else None)
    client = ScramSaslClient(mechanism, user, password)
    try:
        client.evaluate(server.evaluate(client.evaluate(server.evaluate(client.evaluate(b"")))))
    except Exception:  # noqa: BLE001 - any refusal
        return False
    return client.complete and server.complete


def test_credentials_are_stored_as_kafka_stores_them_in_one_multi_keeping_other_keys() -> None:
    zk = RecordingZk({"alice": {"producer_byte_rate": "1024"}})
    ctx = context(zk)
    results = alter(ctx, [upsertion("alice", SHA256, "a-pw"), upsertion("alice", SHA512, "a-pw5", 8192),
                          upsertion("CN=bob,O=x y*", SHA256, "b-pw")])
    assert results == {"alice": (0, None), "CN=bob,O=x y*": (0, None)}
    assert len(zk.writes) == 1 and set(zk.writes[0]) == {(azk.USERS, "alice"), (azk.USERS, "CN%3Dbob%2CO%3Dx%20y%2A")}
    alice = zk.stored("alice")
    assert set(alice) == {"producer_byte_rate", SCRAM_SHA_256, SCRAM_SHA_512}
    assert alice["producer_byte_rate"] == "1024"
    assert CREDENTIAL.fullmatch(alice[SCRAM_SHA_256]) and alice[SCRAM_SHA_256].endswith(",iterations=4096")
    assert alice[SCRAM_SHA_512].endswith(",iterations=8192")
    assert json.loads(paths.encode_topic_config(alice)) == {"version": 1, "config": alice}
    assert verifies(alice[SCRAM_SHA_256], SCRAM_SHA_256, "alice", "a-pw")
    assert verifies(alice[SCRAM_SHA_512], SCRAM_SHA_512, "alice", "a-pw5")
    assert not verifies(alice[SCRAM_SHA_256], SCRAM_SHA_256, "alice", "a-pw5")
    assert verifies(zk.stored("CN%3Dbob%2CO%3Dx%20y%2A")[SCRAM_SHA_256], SCRAM_SHA_256, "CN=bob,O=x y*", "b-pw")

    # a new password replaces the credential; a deletion removes one key and keeps the rest
    assert alter(ctx, [upsertion("alice", SHA256, "new-pw")], [("alice", SHA512)]) == {"alice": (0, None)}
    alice = zk.stored("alice")
    assert set(alice) == {"producer_byte_rate", SCRAM_SHA_256}
    assert verifies(alice[SCRAM_SHA_256], SCRAM_SHA_256, "alice", "new-pw")
    assert alter(ctx, [], [("alice", SHA256)]) == {"alice": (0, None)}
    assert zk.stored("alice") == {"producer_byte_rate": "1024"}


def test_describe_answers_as_kafka_does() -> None:
    zk = RecordingZk({"alice": {SCRAM_SHA_256: credential_to_string(generate_credential(SCRAM_SHA_256, "x")),
                                SCRAM_SHA_512: credential_to_string(generate_credential(SCRAM_SHA_512, "x", 8192))},
                      "%2A": {SCRAM_SHA_512: credential_to_string(generate_credential(SCRAM_SHA_512, "x"))},
                      "quota-only": {"consumer_byte_rate": "5"},
                      "<default>": {"producer_byte_rate": "1"}})
    ctx = context(zk)
    for users in (None, []):  # null or empty: every user with a credential, sorted
        response = describe(ctx, users)
        assert int(response.error_code) == 0
        assert [(r.user, int(r.error_code), [(int(i.mechanism), int(i.iterations)) for i in r.credential_infos])
                for r in response.results] == [("*", 0, [(SHA512, 4096)]), ("alice", 0, [(SHA256, 4096),
                                                                                         (SHA512, 8192)])]
    response = describe(ctx, ["quota-only", "alice", "", "*", "alice", "nobody"])
    assert [(r.user, int(r.error_code), r.error_message) for r in response.results] == [
        ("quota-only", ErrorCode.RESOURCE_NOT_FOUND, "Attempt to describe a user credential that does not exist: "
                                                     "quota-only"),
        ("alice", ErrorCode.DUPLICATE_RESOURCE, "Cannot describe SCRAM credentials for the same user twice in a "
                                                "single request: alice"),
        ("", ErrorCode.RESOURCE_NOT_FOUND, "Username must not be empty"),
        ("*", 0, None),
        ("nobody", ErrorCode.RESOURCE_NOT_FOUND, "Attempt to describe a user credential that does not exist: nobody")]


def test_an_unreadable_stored_credential_is_that_users_error_without_its_text() -> None:
    broken = credential_to_string(generate_credential(SCRAM_SHA_256, "x")).replace("iterations=4096", "iterations=")
    [result] = describe_results(["alice"], {"alice": {SCRAM_SHA_256: broken}})
    assert result["error_code"] == ErrorCode.UNKNOWN_SERVER_ERROR
    assert "salt" not in result["error_message"] and "alice" in result["error_message"]


def test_bad_entries_refuse_their_user_with_kafkas_errors_and_store_nothing_of_it() -> None:
    zk = RecordingZk({"dora": {SCRAM_SHA_256: credential_to_string(generate_credential(SCRAM_SHA_256, "d"))}})
    before = {k: dict(v) for k, v in zk.configs.items()}
    ctx = context(zk)
    results = alter(ctx, [
        upsertion("", SHA256),
        upsertion("few", SHA256, iterations=4095),
        upsertion("many", SHA512, iterations=16385),
        upsertion("unknown", 3),
        upsertion("zero", 0),
        upsertion("twice", SHA256), upsertion("twice", SHA256),
        upsertion("both", SHA512),
        upsertion("saltless", SHA256, salt=b""),
        upsertion("short", SHA512, salted=b"\x00" * 32),
        upsertion("dora", SHA512),  # refused with the deletion of its missing SCRAM-SHA-256 below
        upsertion("ok", SHA512, "ok-pw"),
    ], [("both", SHA512), ("ghost", SHA256), ("dora", SHA256), ("dora", SHA512), ("bad-delete", 7)])
    assert results == {
        "": (ErrorCode.UNACCEPTABLE_CREDENTIAL, "Username must not be empty"),
        "few": (ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too few iterations"),
        "many": (ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too many iterations"),
        "unknown": (ErrorCode.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism"),
        "zero": (ErrorCode.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism"),
        "bad-delete": (ErrorCode.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism"),
        "twice": (ErrorCode.DUPLICATE_RESOURCE, "A user credential cannot be altered twice in the same request"),
        "both": (ErrorCode.DUPLICATE_RESOURCE, "A user credential cannot be altered twice in the same request"),
        "dora": (ErrorCode.DUPLICATE_RESOURCE, "A user credential cannot be altered twice in the same request"),
        "saltless": (ErrorCode.UNACCEPTABLE_CREDENTIAL, "The salt must not be empty"),
        "short": (ErrorCode.UNACCEPTABLE_CREDENTIAL, "A SCRAM-SHA-512 salted password is 64 bytes, not 32"),
        "ghost": (ErrorCode.RESOURCE_NOT_FOUND, "Attempt to delete a user credential that does not exist"),
        "ok": (0, None),
    }
    # the refused users' nodes untouched; the one good user written, in the one multi
    assert len(zk.writes) == 1 and list(zk.writes[0]) == [(azk.USERS, "ok")]
    assert {k: v for k, v in zk.configs.items() if k != (azk.USERS, "ok")} == before
    assert verifies(zk.stored("ok")[SCRAM_SHA_512], SCRAM_SHA_512, "ok", "ok-pw")


def test_deleting_a_missing_credential_refuses_the_whole_user() -> None:
    zk = RecordingZk({"erin": {SCRAM_SHA_256: credential_to_string(generate_credential(SCRAM_SHA_256, "e"))}})
    before = {k: dict(v) for k, v in zk.configs.items()}
    results = alter(context(zk), [upsertion("erin", SHA256)], [("erin", SHA512)])
    assert results == {"erin": (ErrorCode.RESOURCE_NOT_FOUND, "Attempt to delete a user credential that does not exist")}
    assert zk.writes == [] and zk.configs == before


def test_only_the_controller_alters_and_only_for_the_authorized() -> None:
    zk = RecordingZk()
    request = [upsertion("zed"), upsertion("amy"), upsertion("zed", SHA512)]
    assert alter(context(zk, controller=2), request, [("bo", SHA256)]) == {
        user: (ErrorCode.NOT_CONTROLLER, "This is not the correct controller for this cluster.")
        for user in ("amy", "bo", "zed")}
    assert alter(context(zk, allowed=False), request) == {
        user: (ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed.") for user in ("amy", "zed")}
    assert zk.writes == []
    response = describe(context(zk, allowed=False), ["amy", "amy", "bo"])
    assert int(response.error_code) == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    assert [(r.user, int(r.error_code)) for r in response.results] == [
        ("amy", ErrorCode.CLUSTER_AUTHORIZATION_FAILED), ("bo", ErrorCode.CLUSTER_AUTHORIZATION_FAILED)]


def test_a_request_too_large_for_one_zookeeper_transaction_stores_nothing() -> None:
    zk = RecordingZk()
    results = alter(context(zk, jute_maxbuffer=16 * 1024 + 4000), [upsertion(f"user-{i}") for i in range(20)]
                    + [upsertion("", SHA256)])
    assert results[""][0] == ErrorCode.UNACCEPTABLE_CREDENTIAL
    assert {code for user, (code, _) in results.items() if user} == {ErrorCode.INVALID_REQUEST}
    assert "send fewer per request" in results["user-0"][1]
    assert zk.writes == []
    assert alter(context(zk, jute_maxbuffer=16 * 1024 + 4000), [upsertion("one")]) == {"one": (0, None)}


def test_a_failed_write_fails_the_users_written_and_the_refused_keep_their_errors() -> None:
    zk = RecordingZk()
    zk.fail_writes = True
    results = alter(context(zk), [upsertion("amy"), upsertion("few", iterations=1)])
    assert results == {"few": (ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too few iterations"),
                       "amy": (ErrorCode.UNKNOWN_SERVER_ERROR,
                               "The server experienced an unexpected error when processing the request.")}


@pytest.mark.parametrize("name", [".", "..", "a/b", "<default>"])
def test_names_zookeeper_cannot_hold_as_they_are_are_stored_sanitized(name: str) -> None:
    zk = RecordingZk()
    assert alter(context(zk), [upsertion(name)]) == {name: (0, None)}
    [(key, _config)] = zk.writes[0].items()
    assert "/" not in key[1] and key[1] not in (".", "..", "<default>")
    assert [r.user for r in describe(context(zk), None).results] == [name]
