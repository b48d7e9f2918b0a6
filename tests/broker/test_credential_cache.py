"""The broker's SCRAM credential cache (broker/credential_cache.py): what a user's config in
/config/users makes of it, the entities it leaves alone, and reads racing updates."""
from __future__ import annotations

import logging
import threading
import time

import pytest

from odradek.broker.credential_cache import CredentialCache
from odradek.security.sasl import SCRAM_SHA_256, SCRAM_SHA_512
from odradek.security.scram import (
    ScramSaslClient,
    ScramSaslServer,
    credential_from_string,
    credential_to_string,
    generate_credential,
)

ALICE_256 = generate_credential(SCRAM_SHA_256, "pw", 4096)
ALICE_512 = generate_credential(SCRAM_SHA_512, "pw", 8192)


def test_a_users_config_sets_and_removes_its_credentials() -> None:
    cache = CredentialCache()
    cache.on_user_config("alice", {SCRAM_SHA_256: credential_to_string(ALICE_256), "producer_byte_rate": "1024"})
    assert cache.lookup(SCRAM_SHA_256, "alice") == ALICE_256
    assert cache.lookup(SCRAM_SHA_512, "alice") is None
    assert cache.lookup("PLAIN", "alice") is None
    cache.on_user_config("alice", {SCRAM_SHA_256: credential_to_string(ALICE_256),
                                   SCRAM_SHA_512: credential_to_string(ALICE_512)})
    assert (cache.lookup(SCRAM_SHA_256, "alice"), cache.lookup(SCRAM_SHA_512, "alice")) == (ALICE_256, ALICE_512)
    cache.on_user_config("alice", {SCRAM_SHA_512: credential_to_string(ALICE_512), "producer_byte_rate": "1"})
    assert cache.lookup(SCRAM_SHA_256, "alice") is None and cache.users(SCRAM_SHA_512) == ["alice"]
    cache.on_user_config("alice", {})  # the node gone, or its credentials deleted
    assert cache.users(SCRAM_SHA_256) == cache.users(SCRAM_SHA_512) == []


def test_names_are_desanitized_and_quota_entities_ignored(caplog: pytest.LogCaptureFixture) -> None:
    cache = CredentialCache()
    stored = {SCRAM_SHA_256: credential_to_string(ALICE_256)}
    cache.on_user_config("CN%3Dalice%2CO%3Dx%20y%2A", stored)
    assert cache.lookup(SCRAM_SHA_256, "CN=alice,O=x y*") == ALICE_256
    cache.on_user_config("<default>", stored)  # the default user's quotas
    cache.on_user_config("bob/clients/app", stored)  # a (user, client-id) quota entity
    with caplog.at_level(logging.WARNING):
        cache.on_user_config("%FF", stored)
    assert "%FF" in caplog.text
    assert cache.users(SCRAM_SHA_256) == ["CN=alice,O=x y*"]


def test_an_unreadable_credential_removes_the_old_one_and_is_not_logged(caplog: pytest.LogCaptureFixture) -> None:
    cache = CredentialCache()
    cache.update_user("alice", {SCRAM_SHA_256: credential_to_string(ALICE_256)})
    broken = credential_to_string(ALICE_256).replace("iterations=4096", "iterations=lots")
    with caplog.at_level(logging.INFO):
        cache.update_user("alice", {SCRAM_SHA_256: broken})
    assert cache.lookup(SCRAM_SHA_256, "alice") is None
    assert "cannot be read" in caplog.text and "stored_key" not in caplog.text and "salt=" not in caplog.text
    assert "now: none" in caplog.text


def test_changes_are_logged_once_without_keys(caplog: pytest.LogCaptureFixture) -> None:
    cache = CredentialCache()
    config = {SCRAM_SHA_512: credential_to_string(ALICE_512)}
    with caplog.at_level(logging.INFO):
        cache.update_user("alice", config)
        cache.update_user("alice", config)  # a notification processed twice: no change
    assert caplog.text.count("SCRAM credentials of user 'alice' now: SCRAM-SHA-512 (8192 iterations)") == 1
    assert "stored_key" not in caplog.text


def test_the_lookup_drives_a_scram_exchange() -> None:
    cache = CredentialCache()
    cache.update_user("alice", {SCRAM_SHA_512: credential_to_string(ALICE_512)})
    server = ScramSaslServer(SCRAM_SHA_512, cache.lookup_for(SCRAM_SHA_512))
    client = ScramSaslClient(SCRAM_SHA_512, "alice", "pw")
    client.evaluate(server.evaluate(client.evaluate(server.evaluate(client.evaluate(b"")))))
    assert client.complete and server.complete and server.authorization_id == "alice"


def test_reads_racing_updates_see_a_whole_credential_or_none() -> None:
    cache = CredentialCache()
    credentials = [credential_to_string(generate_credential(SCRAM_SHA_256, f"pw{i}", 4096)) for i in range(4)]
    valid = {credential_from_string(c) for c in credentials}
    stop, writing = threading.Event(), threading.Event()

    def writer() -> None:
        i = 0
        while not stop.is_set():
            cache.on_user_config("alice", {SCRAM_SHA_256: credentials[i % 4]} if i % 5 else {})
            writing.set()
            i += 1

    thread = threading.Thread(target=writer)
    thread.start()
    seen: set[object] = set()
    try:
        assert writing.wait(10)
        deadline = time.monotonic() + 10
        while len(seen) < 5 and time.monotonic() < deadline:
            seen.add(cache.lookup(SCRAM_SHA_256, "alice"))
    finally:
        stop.set()
        thread.join()
    assert seen == valid | {None}
