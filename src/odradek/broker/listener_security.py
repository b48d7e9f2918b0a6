"""What each listener needs to secure its connections at run time (Kafka's ChannelBuilders for a
listener): the TLS server context, the SASL mechanisms it offers and where their credentials come
from, how a TLS client's certificate becomes a principal, and how long an authenticated session
lasts before the client must re-authenticate (KIP-368). Also the client side the broker uses on
its own inter-broker listener.

Credentials:
    SCRAM-SHA-256/512  the users' salted credentials stored in ZooKeeper under /config/users
                       (broker/credential_cache.py keeps them).
    PLAIN              the users of the listener's PlainLoginModule (user_NAME="password"), from
                       listener.name.<l>.plain.sasl.jaas.config, or the KafkaServer section of the
                       JAAS file named by java.security.auth.login.config.
    inter-broker       the username and password of the login module of
                       sasl.mechanism.inter.broker.protocol, found in the same places.

Where odradek differs from Kafka: sasl.enabled.mechanisms defaults to PLAIN, SCRAM-SHA-256 and
SCRAM-SHA-512 (Kafka's default is GSSAPI, which odradek does not offer), and
sasl.mechanism.inter.broker.protocol to the inter-broker listener's first enabled mechanism.
"""
from __future__ import annotations

import ssl
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from odradek.broker.listener_config import JAAS_FILE_KEY, Listener, Listeners, listener_settings
from odradek.security import jaas, ssl_factory
from odradek.security.client_security import ClientSecurity
from odradek.security.plain import PlainSaslServer
from odradek.security.sasl import MECHANISMS, PLAIN, SaslServer
from odradek.security.scram import ScramCredential, ScramSaslServer
from odradek.security.ssl_factory import SslEngineFactory
from odradek.security.ssl_principal_mapper import SslPrincipalMapper

DEFAULT_MECHANISMS = "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512"
#: Kafka's sasl.server.max.receive.size: the largest frame a client may send before it has
#: authenticated (a SCRAM message is a few hundred bytes; 100 MiB frames are for after)
DEFAULT_MAX_RECEIVE = 524288
_LOGIN_MODULES = {PLAIN: "org.apache.kafka.common.security.plain.PlainLoginModule",
                  "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
                  "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule"}

ScramLookup = Callable[[str, str], "ScramCredential | None"]  # (mechanism, username)


@dataclass
class ListenerSecurity:
    listener: Listener
    ssl_factory: SslEngineFactory | None
    mechanisms: tuple[str, ...]
    plain_users: Mapping[str, str]
    scram_credentials: ScramLookup
    principal_mapper: SslPrincipalMapper
    reauth_ms: int
    max_receive_size: int
    settings: Mapping[str, str]  # the listener's own (listener_settings)
    inter_broker: bool = False
    #: the cluster's key for an unknown SCRAM user's made-up salt, the same on every broker
    #: (set once ZooKeeper is reached; see security/scram.py)
    unknown_user_key: bytes | None = None

    def __post_init__(self) -> None:
        # the context the listener's server was made with, for its whole life: a new keystore is
        # loaded into it (reload_keystore), so new handshakes present the new certificate
        self.ssl_context: ssl.SSLContext | None = self.ssl_factory.context if self.ssl_factory is not None else None

    def replaced_stores(self) -> SslEngineFactory | None:
        """The listener's stores read again when a store file was replaced (certificates renewed
        in place), None when none was; blocking (it reads and checks the files). SslConfigError
        when the new ones are refused: unreadable, another subject or fewer subject alternative
        names (ssl.allow.dn.changes / ssl.allow.san.changes), or, on the inter-broker listener,
        stores that cannot complete a handshake with the old ones."""
        if self.ssl_factory is None:
            return None
        new = ssl_factory.reconfigure(self.ssl_factory, self.settings, verify_with_truststore=self.inter_broker)
        return None if new is self.ssl_factory else new

    def use_stores(self, new: SslEngineFactory) -> None:
        """Present ``new``'s certificate from the next handshake on (on the event loop, which
        makes the handshakes: OpenSSL's context is not changed under one)."""
        assert self.ssl_context is not None
        ssl_factory.update_context(self.ssl_context, new)
        self.ssl_factory = new

    def sasl_server(self, mechanism: str) -> SaslServer:
        if mechanism == PLAIN:
            return PlainSaslServer(self.plain_users.get)
        return ScramSaslServer(mechanism, lambda user: self.scram_credentials(mechanism, user),
                               unknown_user_key=self.unknown_user_key)


def _mechanisms(settings: Mapping[str, str]) -> tuple[str, ...]:
    names = tuple(m.strip().upper() for m in settings.get("sasl.enabled.mechanisms", DEFAULT_MECHANISMS).split(",")
                  if m.strip())
    unsupported = [m for m in names if m not in MECHANISMS]
    if unsupported:
        raise ValueError(f"sasl.enabled.mechanisms: {', '.join(unsupported)} is not supported "
                         f"(odradek offers {', '.join(MECHANISMS)})")
    if not names:
        raise ValueError("sasl.enabled.mechanisms: a SASL listener needs at least one mechanism")
    return names


def _int(settings: Mapping[str, str], key: str, default: int) -> int:
    try:
        value = int(settings.get(key, default))
    except ValueError:
        raise ValueError(f"{key}={settings.get(key)}: an integer is expected") from None
    if value < 0:
        raise ValueError(f"{key}={value}: must not be negative")
    return value


def login_options(settings: Mapping[str, str], mechanism: str, jaas_file: str | None) -> dict[str, str]:
    """The options of ``mechanism``'s login module: from ``<mechanism>.sasl.jaas.config`` (the
    listener-prefixed form), ``sasl.jaas.config``, or the JAAS file's KafkaServer section."""
    for key in (f"{mechanism.lower()}.sasl.jaas.config", "sasl.jaas.config"):
        if settings.get(key):
            try:
                module = jaas.parse_jaas_config_property(settings[key])
            except ValueError as exc:
                raise ValueError(f"{key}: {exc}") from None
            if key != "sasl.jaas.config" or module.class_name == _LOGIN_MODULES[mechanism]:
                return dict(module.options)
    if jaas_file:
        try:
            config = jaas.parse_jaas(Path(jaas_file).read_text())
        except OSError as exc:
            raise ValueError(f"{JAAS_FILE_KEY}={jaas_file}: {exc.strerror or exc}") from None
        except ValueError as exc:
            raise ValueError(f"{JAAS_FILE_KEY}={jaas_file}: {exc}") from None
        for module in config.get("KafkaServer") or ():
            if module.class_name == _LOGIN_MODULES[mechanism]:
                return dict(module.options)
    return {}


def listener_security(listener: Listener, settings: Mapping[str, str], scram: ScramLookup,
                      jaas_file: str | None, inter_broker: bool = False) -> ListenerSecurity:
    """One listener's security from the broker's settings (its own listener.name.<l>.* keys
    applied); ValueError or ssl_factory.SslConfigError naming the key at fault."""
    own = listener_settings(settings, listener.name)
    factory = ssl_factory.create_ssl_factory(own, ssl_factory.SERVER) if listener.uses_ssl else None
    mechanisms = _mechanisms(own) if listener.uses_sasl else ()
    plain_users: dict[str, str] = {}
    if PLAIN in mechanisms:
        options = login_options(own, PLAIN, jaas_file)
        plain_users = jaas.user_passwords(options)
    return ListenerSecurity(listener, factory, mechanisms, plain_users, scram,
                            SslPrincipalMapper(own.get("ssl.principal.mapping.rules")),
                            _int(own, "connections.max.reauth.ms", 0),
                            _int(own, "sasl.server.max.receive.size", DEFAULT_MAX_RECEIVE), own,
                            inter_broker=inter_broker)


def check_listeners(settings: Mapping[str, str], listeners: Listeners, jaas_file: str | None) -> None:
    """Every listener's security and the inter-broker client's built once, so a broker with a
    configuration it cannot serve refuses to start with the key at fault (ValueError, of which
    SslConfigError is one) before it touches its data or ZooKeeper."""
    for listener in listeners.listeners:
        listener_security(listener, settings, lambda _mechanism, _user: None, jaas_file)
    inter_broker_client(listeners, settings, jaas_file)


def inter_broker_client(listeners: Listeners, settings: Mapping[str, str], jaas_file: str | None) -> ClientSecurity:
    """How this broker connects to the others' inter-broker listener: its security protocol, a
    client TLS context from the listener's truststore (and keystore, for ssl.client.auth), and
    the credentials of sasl.mechanism.inter.broker.protocol."""
    listener = listeners.inter_broker
    own = listener_settings(settings, listener.name)
    context = ssl_factory.client_context(own) if listener.uses_ssl else None
    if not listener.uses_sasl:
        return ClientSecurity(listener.security_protocol, context)
    enabled = _mechanisms(own)
    mechanism = own.get("sasl.mechanism.inter.broker.protocol", enabled[0]).strip().upper()
    if mechanism not in enabled:
        raise ValueError(f"sasl.mechanism.inter.broker.protocol={mechanism}: not among the inter-broker listener "
                         f"{listener.name}'s sasl.enabled.mechanisms ({', '.join(enabled)})")
    options = login_options(own, mechanism, jaas_file)
    if not options.get("username") or options.get("password") is None:
        raise ValueError(f"the inter-broker listener {listener.name} uses SASL/{mechanism}: its login module "
                         f"({mechanism.lower()}.sasl.jaas.config, or KafkaServer in {JAAS_FILE_KEY}) "
                         "needs username and password")
    return ClientSecurity(listener.security_protocol, context, mechanism, options["username"], options["password"])
