"""Named listeners as Kafka configures them (broker/listener_config.py): several listeners with
their security protocols, the inter-broker one, advertised addresses, and per-listener keys."""
from __future__ import annotations

from odradek.broker.config import parse_properties
from odradek.broker.listener_config import listener_settings, parse_listeners
from odradek.common.metadata import EndPoint

TWO = ("listeners=INTERNAL://10.0.0.5:9093,EXTERNAL://0.0.0.0:9094\n"
       "advertised.listeners=EXTERNAL://broker1.example.com:19094\n"
       "listener.security.protocol.map=INTERNAL:SASL_SSL,EXTERNAL:SSL\n"
       "inter.broker.listener.name=internal\n"
       "ssl.keystore.location=/etc/all.pem\n"
       "listener.name.external.ssl.keystore.location=/etc/external.pem\n"
       "listener.name.internal.scram-sha-512.sasl.jaas.config=x\n")


def test_named_listeners_bind_register_and_choose_the_inter_broker_one() -> None:
    values, unknown = parse_properties(TWO)
    assert unknown == []
    # the inter-broker listener's address is the broker's host and port
    assert (values["host"], values["port"]) == ("10.0.0.5", 9093) and "advertised_host" not in values
    security = values["security"]
    assert isinstance(security, dict)
    listeners = parse_listeners(security)
    assert listeners.inter_broker.name == "INTERNAL"
    external = listeners.named("external")
    assert external is not None and external.uses_ssl and not external.uses_sasl
    # a wildcard listener binds its advertised host, on its own port
    assert (external.host, external.port) == ("broker1.example.com", 9094)
    assert [listener.endpoint for listener in listeners.listeners] == [
        EndPoint("INTERNAL", "10.0.0.5", 9093, "SASL_SSL"), EndPoint("EXTERNAL", "broker1.example.com", 19094, "SSL")]


def test_a_listener_prefixed_key_overrides_the_key_for_that_listener_only() -> None:
    security = parse_properties(TWO)[0]["security"]
    assert isinstance(security, dict)
    assert listener_settings(security, "EXTERNAL")["ssl.keystore.location"] == "/etc/external.pem"
    internal = listener_settings(security, "INTERNAL")
    assert internal["ssl.keystore.location"] == "/etc/all.pem"
    assert internal["scram-sha-512.sasl.jaas.config"] == "x"
    assert not any(k.startswith("listener.name.") for k in internal)


def test_one_listener_of_any_protocol_is_the_inter_broker_listener() -> None:
    listeners = parse_listeners({"listeners": "SASL_SSL://h:9092"})
    assert listeners.inter_broker.security_protocol == "SASL_SSL"


def test_without_listeners_the_listen_flag_is_one_plaintext_listener() -> None:
    listeners = parse_listeners({}, "127.0.0.1", 9092, "proxy", 19092)
    assert [listener.endpoint for listener in listeners.listeners] == [EndPoint("PLAINTEXT", "proxy", 19092, "PLAINTEXT")]
