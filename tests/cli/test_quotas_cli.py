"""`odradek quotas` without a cluster (cli/quotas.py, admin/client_quota_command.py): the values
the command accepts, how the entity is named, the request it sends, and the describe table."""
from __future__ import annotations

import argparse
from typing import Any

import pytest

from odradek.admin import client_quota_command
from odradek.admin.client_quota_command import ANY, DEFAULT, ClientQuotaAdmin, format_describe
from odradek.broker.client_quota_manager import QUOTA_CONFIG_TYPES
from odradek.cli import quotas
from odradek.cli.args import UserError


def test_the_keys_are_kafkas() -> None:
    assert set(quotas.QUOTA_KEYS) == set(client_quota_command.QUOTA_KEYS) == set(QUOTA_CONFIG_TYPES)
    assert client_quota_command.LONG_KEYS == {k for k, kind in QUOTA_CONFIG_TYPES.items() if kind == "LONG"}


def test_configs_are_parsed_and_checked() -> None:
    assert quotas.quota_configs_arg("producer_byte_rate=1048576, request_percentage=12.5") == [
        ("producer_byte_rate", 1048576.0), ("request_percentage", 12.5)]
    assert quotas.quota_configs_arg("consumer_byte_rate=0") == [("consumer_byte_rate", 0.0)]
    for bad, words in (("producer_bytes_rate=1", "unknown quota"), ("producer_byte_rate", "KEY=VALUE"),
                       ("producer_byte_rate=x", "expected a number"), ("request_percentage=-1", ">= 0"),
                       ("request_percentage=nan", ">= 0"), ("producer_byte_rate=1.5", "whole bytes")):
        with pytest.raises(argparse.ArgumentTypeError, match=words):
            quotas.quota_configs_arg(bad)
    assert quotas.quota_keys_arg("consumer_byte_rate,request_percentage") == ["consumer_byte_rate",
                                                                            "request_percentage"]
    with pytest.raises(argparse.ArgumentTypeError, match="unknown quota 'SCRAM-SHA-256'"):
        quotas.quota_keys_arg("SCRAM-SHA-256")


def args(**given: Any) -> argparse.Namespace:
    return argparse.Namespace(**{"user": None, "user_default": False, "client_id": None, "client_default": False,
                                 **given})


def test_the_entity_is_named_by_a_name_the_default_or_describing_any() -> None:
    assert quotas._selectors(args(user="alice"), describing=False) == ("alice", None)
    assert quotas._selectors(args(user_default=True, client_id="app"), describing=False) == (DEFAULT, "app")
    assert quotas._selectors(args(user="", client_default=True), describing=True) == (ANY, DEFAULT)
    with pytest.raises(UserError, match="the client id is empty"):
        quotas._selectors(args(client_id=""), describing=False)


class Sent:
    def __init__(self, response: Any) -> None:
        self.response = response
        self.requests: list[tuple[int, dict[str, Any]]] = []

    def __call__(self, api_key: int, body: dict[str, Any]) -> Any:
        self.requests.append((api_key, body))
        return self.response


def ns(**fields: Any) -> Any:
    return argparse.Namespace(**fields)


def test_the_requests_are_kafkas(monkeypatch: pytest.MonkeyPatch) -> None:
    admin = ClientQuotaAdmin("127.0.0.1:1", 1.0)
    sent = Sent(ns(entries=[ns(error_code=0, error_message=None)]))
    monkeypatch.setattr(admin, "_send", sent)
    admin.alter(DEFAULT, "app", {"producer_byte_rate": 1024}, ["request_percentage"], validate_only=True)
    assert sent.requests == [(49, {"entries": [{
        "entity": [{"entity_type": "user", "entity_name": None}, {"entity_type": "client-id", "entity_name": "app"}],
        "ops": [{"key": "producer_byte_rate", "value": 1024.0, "remove": False},
                {"key": "request_percentage", "value": 0.0, "remove": True}]}], "validate_only": True})]
    sent.response = ns(entries=[ns(error_code=42, error_message="Invalid configuration key x")])
    with pytest.raises(Exception, match="^cannot alter the quotas of user <default>, client-id app: "
                                        "INVALID_REQUEST: Invalid configuration key x$"):
        admin.alter(DEFAULT, "app", {"x": 1}, [])

    sent.response = ns(error_code=0, error_message=None, entries=[
        ns(entity=[ns(entity_type="client-id", entity_name=None)], values=[ns(key="producer_byte_rate", value=5.0)]),
        ns(entity=[ns(entity_type="user", entity_name="bob")], values=[ns(key="request_percentage", value=5.0)]),
        ns(entity=[ns(entity_type="user", entity_name="bob"), ns(entity_type="client-id", entity_name="x")],
           values=[ns(key="consumer_byte_rate", value=7.0)]),
        ns(entity=[ns(entity_type="user", entity_name=None)], values=[ns(key="producer_byte_rate", value=1.0)]),
        ns(entity=[ns(entity_type="user", entity_name="alice")], values=[ns(key="producer_byte_rate", value=2.0)])])
    sent.requests.clear()
    rows = admin.describe(ANY, "x")
    assert sent.requests == [(48, {"components": [{"entity_type": "user", "match_type": 2, "match": None},
                                                  {"entity_type": "client-id", "match_type": 0, "match": "x"}],
                                   "strict": True})]
    assert [r["entity"] for r in rows] == [{"user": "alice"}, {"user": "bob"}, {"user": "bob", "client-id": "x"},
                                           {"user": None}, {"client-id": None}]
    sent.requests.clear()
    admin.describe()
    assert sent.requests == [(48, {"components": [], "strict": False})]
    assert format_describe(rows) == (
        "User       Client-Id  Quotas\n"
        "alice                 producer_byte_rate=2\n"
        "bob                   request_percentage=5.0\n"
        "bob        x          consumer_byte_rate=7\n"
        "<default>             producer_byte_rate=1\n"
        "           <default>  producer_byte_rate=5")
    assert format_describe([]) == "no client quotas"
