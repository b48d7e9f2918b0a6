"""A broker's named listeners, as Kafka configures them: ``listeners``, ``advertised.listeners``,
``listener.security.protocol.map``, ``inter.broker.listener.name`` (or the older
``security.inter.broker.protocol``) and the per-listener ``listener.name.<name>.<key>`` settings
that override a key for one listener (KafkaConfig, ListenerName, SecurityProtocol).

    listeners=INTERNAL://10.0.0.5:9093,EXTERNAL://10.0.0.5:9094
    advertised.listeners=INTERNAL://broker1.internal:9093,EXTERNAL://broker1.example.com:9094
    listener.security.protocol.map=INTERNAL:SASL_SSL,EXTERNAL:SASL_SSL
    inter.broker.listener.name=INTERNAL
    listener.name.external.ssl.keystore.location=/etc/odradek/external.pem

Each listener binds its own address and is registered in /brokers/ids/N under its name, and a
client is answered (Metadata, FindCoordinator, DescribeCluster) with the addresses of the listener
it came in on. The broker's own connections to other brokers (replica fetchers, the controller's
requests, transaction markers) use the inter-broker listener, secured like any other.

A listener on a wildcard host (0.0.0.0) binds its advertised host instead: odradek binds the
address clients are given (as the single PLAINTEXT listener always did), so the broker's
outgoing connections leave from an address other brokers know.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from odradek.common.metadata import EndPoint

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
DEFAULT_PROTOCOL_MAP = ",".join(f"{p}:{p}" for p in SECURITY_PROTOCOLS)
_WILDCARD_HOSTS = ("", "0.0.0.0", "::", "[::]")

#: the keys of this module (the rest of the security settings are read per listener)
LISTENER_KEYS = ("listeners", "advertised.listeners", "listener.security.protocol.map",
                 "inter.broker.listener.name", "security.inter.broker.protocol")
#: the prefixes of keys kept whole for the listeners and their security: Kafka's ssl.*, sasl.*,
#: listener.name.*, and the few security keys without such a prefix
SECURITY_KEY_PREFIXES = ("ssl.", "sasl.", "listener.name.")
#: Kafka's JVM system property naming the JAAS file (KafkaServer and Client login modules)
JAAS_FILE_KEY = "java.security.auth.login.config"
SECURITY_KEYS = LISTENER_KEYS + ("connections.max.reauth.ms", "principal.builder.class", JAAS_FILE_KEY)


def is_security_key(key: str) -> bool:
    return key in SECURITY_KEYS or key.startswith(SECURITY_KEY_PREFIXES)


@dataclass(frozen=True, slots=True)
class Listener:
    name: str  # upper case, as Kafka's ListenerName normalises it
    security_protocol: str
    host: str  # bound
    port: int
    advertised_host: str
    advertised_port: int

    @property
    def endpoint(self) -> EndPoint:
        return EndPoint(self.name, self.advertised_host, self.advertised_port, self.security_protocol)

    @property
    def uses_ssl(self) -> bool:
        return self.security_protocol in ("SSL", "SASL_SSL")

    @property
    def uses_sasl(self) -> bool:
        return self.security_protocol in ("SASL_PLAINTEXT", "SASL_SSL")


@dataclass(frozen=True, slots=True)
class Listeners:
    listeners: tuple[Listener, ...]
    inter_broker: Listener

    def named(self, name: str) -> Listener | None:
        return next((listener for listener in self.listeners if listener.name == name.upper()), None)


def parse_addresses(key: str, value: str) -> list[tuple[str, str, int]]:
    """(NAME, host, port) of each NAME://HOST:PORT in ``value``; ValueError naming ``key``."""
    out: list[tuple[str, str, int]] = []
    for item in (v.strip() for v in value.split(",")):
        if not item:
            continue
        name, sep, address = item.partition("://")
        host, colon, port = address.rpartition(":")
        if not sep or not name or not colon:
            raise ValueError(f"{key}: {item!r} is not NAME://HOST:PORT")
        try:
            number = int(port)
        except ValueError:
            raise ValueError(f"{key}: the port {port!r} of {name} is not a number") from None
        if not 0 < number < 65536:
            raise ValueError(f"{key}: listener port {number} is not a port number")
        if name.upper() in (n for n, _, _ in out):
            raise ValueError(f"{key}: the listener name {name} is given twice")
        out.append((name.upper(), host[1:-1] if host.startswith("[") else host, number))
    if not out:
        raise ValueError(f"{key}: no listener given")
    return out


def _protocol_map(value: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in (v.strip() for v in value.split(",")):
        if not item:
            continue
        name, sep, protocol = item.partition(":")
        if not sep or protocol.upper() not in SECURITY_PROTOCOLS:
            raise ValueError(f"listener.security.protocol.map: {item!r} is not NAME:PROTOCOL with a protocol "
                             f"of {', '.join(SECURITY_PROTOCOLS)}")
        out[name.strip().upper()] = protocol.upper()
    return out


def parse_listeners(settings: Mapping[str, str], host: str | None = None, port: int | None = None,
                    advertised_host: str | None = None, advertised_port: int | None = None) -> Listeners:
    """The listeners of ``settings`` (the raw keys); without ``listeners`` one PLAINTEXT listener
    on ``host``:``port`` (the --listen flag, or Kafka's older host.name and port). ValueError,
    naming the key, for a configuration Kafka would refuse."""
    protocols = _protocol_map(settings.get("listener.security.protocol.map", DEFAULT_PROTOCOL_MAP))
    if "listeners" in settings:
        bound = parse_addresses("listeners", settings["listeners"])
    elif host is not None and port is not None:
        bound = [("PLAINTEXT", host, port)]
    else:
        raise ValueError("listeners: no listener given")
    if "advertised.listeners" in settings:
        advertised = {n: (h, p) for n, h, p in parse_addresses("advertised.listeners", settings["advertised.listeners"])}
        unknown = sorted(set(advertised) - {n for n, _, _ in bound})
        if unknown:
            raise ValueError(f"advertised.listeners: {', '.join(unknown)} is not one of the listeners")
    elif "listeners" not in settings and advertised_host is not None:
        advertised = {"PLAINTEXT": (advertised_host, advertised_port or bound[0][2])}
    else:
        advertised = {}
    listeners = []
    for name, bind_host, bind_port in bound:
        if name not in protocols:
            raise ValueError(f"listener.security.protocol.map: the listener {name} has no security protocol "
                             "(name it NAME:PROTOCOL)")
        ad_host, ad_port = advertised.get(name, (bind_host, bind_port))
        if bind_host in _WILDCARD_HOSTS:
            bind_host = ad_host
        for shown in (bind_host, ad_host):
            if shown in _WILDCARD_HOSTS:
                raise ValueError(f"listener {name}: host {shown or '(empty)'!r}: odradek registers the address it "
                                 "binds, and clients cannot reach a wildcard: give a host name or address, or "
                                 "advertised.listeners")
        listeners.append(Listener(name, protocols[name], bind_host, bind_port, ad_host, ad_port))
    ports = [(listener.host, listener.port) for listener in listeners]
    if len(set(ports)) != len(ports):
        raise ValueError("listeners: two listeners bind the same address and port")
    result = tuple(listeners)
    return Listeners(result, _inter_broker(settings, result))


def _inter_broker(settings: Mapping[str, str], listeners: tuple[Listener, ...]) -> Listener:
    """inter.broker.listener.name, or the listener named after security.inter.broker.protocol
    (PLAINTEXT by default), as KafkaConfig.interBrokerListenerName chooses."""
    if "inter.broker.listener.name" in settings and "security.inter.broker.protocol" in settings:
        raise ValueError("give only one of inter.broker.listener.name and security.inter.broker.protocol")
    if "inter.broker.listener.name" in settings:
        key, name = "inter.broker.listener.name", settings["inter.broker.listener.name"].strip().upper()
    else:
        key, name = "security.inter.broker.protocol", settings.get("security.inter.broker.protocol",
                                                                   "PLAINTEXT").strip().upper()
    if len(listeners) == 1 and key == "security.inter.broker.protocol" and \
            "security.inter.broker.protocol" not in settings:
        return listeners[0]  # one listener: it is the inter-broker one, whatever its name
    found = next((listener for listener in listeners if listener.name == name), None)
    if found is None:
        raise ValueError(f"{key}={name}: no listener of that name (listeners: "
                         f"{', '.join(listener.name for listener in listeners)})")
    return found


def listener_settings(settings: Mapping[str, str], listener: str) -> dict[str, str]:
    """The settings one listener uses: every key, with ``listener.name.<listener>.<key>`` in
    place of ``<key>`` where given (Kafka's listener-prefixed configs), the prefixed keys
    themselves left out. A mechanism's JAAS config stays under its own prefix:
    ``listener.name.<l>.scram-sha-256.sasl.jaas.config`` becomes ``scram-sha-256.sasl.jaas.config``."""
    prefix = f"listener.name.{listener.lower()}."
    out = {k: v for k, v in settings.items() if not k.startswith("listener.name.")}
    out.update({k[len(prefix):]: v for k, v in settings.items() if k.startswith(prefix)})
    return out
