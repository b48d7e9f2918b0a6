"""The security of the broker's HTTP endpoint (http_endpoints.py: /metrics and /state-change-log):
on a secured cluster it is served over TLS and only to the cluster's own users, since its answers
name every topic, consumer group and controller decision.

    metrics.ssl.enabled=true       HTTPS; default: true when any listener uses SSL or SASL_SSL
    metrics.authentication=basic   HTTP Basic logins of the cluster's SCRAM users (or none);
                                   default: basic when any listener uses SASL

TLS: a server context of its own, made from the settings of the inter-broker listener (its
keystore, protocols and cipher suites; the first TLS listener's when the inter-broker one has no
TLS) with ssl.client.auth=none, as a scraper has no client certificate. A keystore renewed in place
reaches it with that listener's (Broker._reload_keystores).

Basic: the user and password of the Authorization header are checked against the user's SCRAM
credential in the broker's credential cache (SCRAM-SHA-512, else SCRAM-SHA-256, whichever the user
has): the password's stored key compared with the credential's in constant time
(scram.password_matches). A check that succeeded is remembered for a minute, per user and password
digest (an HMAC under a key of this process's own, so no password is kept) together with the
credential it matched, so a scrape every few seconds costs one PBKDF2 a minute and a credential
changed or deleted ends it at once. Failures are not remembered. An unknown user costs the same
PBKDF2 as a known one (a made-up credential), so the time of a refusal does not tell who has an
account. With an authorizer, the user must then be allowed DESCRIBE on the cluster (super users
are), the question DescribeCluster's authorized operations answer; the ACLs are asked on every
request, so a change applies at once. 401 (with ``WWW-Authenticate: Basic realm="odradek"``) for a
missing, malformed or wrong login, 403 for a user without the permission.
"""
from __future__ import annotations

import base64
import binascii
import secrets
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass

from odradek.broker.config import METRICS_AUTHENTICATION_MODES, BrokerConfig
from odradek.broker.listener_config import Listener, Listeners, listener_settings
from odradek.common.login_cache import LoginCache
from odradek.security import ssl_factory
from odradek.security.acl import CLUSTER_NAME, AclOperation, ResourceType
from odradek.security.acl_authorizer import AclAuthorizer
from odradek.security.sasl import SCRAM_SHA_256, SCRAM_SHA_512
from odradek.security.scram import DEFAULT_ITERATIONS, ScramCredential, digest_size, password_matches

METRICS_SSL_ENABLED = "metrics.ssl.enabled"
METRICS_AUTHENTICATION = "metrics.authentication"
BASIC = "basic"
NONE = "none"
AUTHENTICATION_MODES = METRICS_AUTHENTICATION_MODES  # (BASIC, NONE)

#: how long a login that was checked is taken without checking its password again
CACHE_TTL_S = 60.0
#: logins remembered at most (the oldest is dropped beyond)
CACHE_MAX = 1024
#: the longest Authorization header read (a login is a few dozen bytes)
MAX_HEADER = 4096
#: the mechanisms whose credential a Basic login is checked against, in this order
MECHANISMS = (SCRAM_SHA_512, SCRAM_SHA_256)

OK, UNAUTHORIZED, FORBIDDEN = 200, 401, 403

#: (mechanism, user) -> the user's credential, None without one (CredentialCache.lookup)
CredentialLookup = Callable[[str, str], "ScramCredential | None"]

#: checked in place of an unknown user's credential, so that a refusal takes as long either way
_NOBODY = ScramCredential(secrets.token_bytes(24), secrets.token_bytes(digest_size(SCRAM_SHA_512)),
                          secrets.token_bytes(digest_size(SCRAM_SHA_512)), DEFAULT_ITERATIONS)


def check_authentication_mode(value: str) -> str:
    """metrics.authentication's value, lower case; ValueError naming the key otherwise."""
    mode = value.strip().lower()
    if mode not in AUTHENTICATION_MODES:
        raise ValueError(f"{METRICS_AUTHENTICATION}={value}: one of {', '.join(AUTHENTICATION_MODES)} is expected")
    return mode


def parse_basic(header: str | None) -> tuple[str, str] | None:
    """(user, password) of an ``Authorization: Basic <base64 of user:password>`` header (RFC 7617,
    UTF-8); None for anything else: no header, another scheme, bad base64, not UTF-8, no colon,
    an empty user, a control character."""
    if not header or len(header) > MAX_HEADER:
        return None
    scheme, _, token = header.strip().partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        text = base64.b64decode(token.strip(), validate=True).decode("utf-8")
    except (binascii.Error, ValueError):
        return None
    user, sep, password = text.partition(":")
    if not sep or not user or any(ord(c) < 0x20 or ord(c) == 0x7F for c in text):
        return None
    return user, password


@dataclass(frozen=True, slots=True)
class _Login:
    mechanism: str
    credential: ScramCredential


class BasicAuthenticator:
    """Decides each request's answer from its Authorization header and client address: OK, or
    UNAUTHORIZED (no valid login) or FORBIDDEN (a valid login without DESCRIBE on the cluster).
    Thread-safe: the HTTP server asks from one thread per request."""

    def __init__(self, credentials: CredentialLookup, authorizer: AclAuthorizer | None, *,
                 ttl_s: float = CACHE_TTL_S, max_entries: int = CACHE_MAX,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._credentials = credentials
        self._authorizer = authorizer
        self._logins: LoginCache[_Login] = LoginCache(ttl_s, max_entries, clock)
        #: passwords checked with PBKDF2 so far (what the cache saves is what this does not count)
        self.checks = 0

    def __call__(self, header: str | None, client_host: str) -> int:
        login = parse_basic(header)
        if login is None or not self.authenticated(*login):
            return UNAUTHORIZED
        if self._authorizer is not None and not self._authorizer.authorize(
                f"User:{login[0]}", client_host, AclOperation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME):
            return FORBIDDEN
        return OK

    def authenticated(self, user: str, password: str) -> bool:
        """Whether ``password`` is ``user``'s (one of the user's SCRAM credentials was made from
        it): from the cache while the login is remembered and the credential it matched is still
        the user's, else checked (PBKDF2) and remembered when it matches."""
        key = self._logins.key(user, password)
        remembered = self._logins.get(key)
        if remembered is not None and self._credentials(remembered.mechanism, user) == remembered.credential:
            return True
        found = [(m, c) for m in MECHANISMS if (c := self._credentials(m, user)) is not None]
        for mechanism, credential in found or [(SCRAM_SHA_512, _NOBODY)]:
            self.checks += 1
            if password_matches(mechanism, credential, password) and found:
                self._logins.put(key, _Login(mechanism, credential))
                return True
        self._logins.forget(key)
        return False


@dataclass(frozen=True)
class MetricsSecurity:
    """How the endpoint is served: over TLS with ``ssl_context`` (made from ``tls_listener``'s
    stores) or plain, and whether a Basic login is asked (``authentication``)."""
    ssl_context: ssl.SSLContext | None
    tls_listener: str | None
    authentication: str

    @property
    def scheme(self) -> str:
        return "https" if self.ssl_context is not None else "http"


def tls_listener(listeners: Listeners) -> Listener:
    """The listener whose stores the endpoint's TLS uses: the inter-broker listener, or the first
    TLS listener when the inter-broker one has no TLS."""
    inter = listeners.inter_broker
    if inter.uses_ssl:
        return inter
    return next((listener for listener in listeners.listeners if listener.uses_ssl), inter)


def metrics_security(config: BrokerConfig, listeners: Listeners) -> MetricsSecurity:
    """The endpoint's security from the broker's settings (metrics.ssl.enabled and
    metrics.authentication, or their defaults from the listeners); ValueError or
    ssl_factory.SslConfigError naming the key at fault."""
    ssl_enabled = config.metrics_ssl_enabled
    if ssl_enabled is None:
        ssl_enabled = any(listener.uses_ssl for listener in listeners.listeners)
    mode = config.metrics_authentication
    authentication = (check_authentication_mode(mode) if mode is not None
                      else BASIC if any(listener.uses_sasl for listener in listeners.listeners) else NONE)
    if not ssl_enabled:
        return MetricsSecurity(None, None, authentication)
    listener = tls_listener(listeners)
    settings = {**listener_settings(config.security, listener.name), ssl_factory.CLIENT_AUTH: "none"}
    try:
        factory = ssl_factory.create_ssl_factory(settings, ssl_factory.SERVER)
    except ssl_factory.SslConfigError as exc:
        raise ssl_factory.SslConfigError(exc.key, f"{exc.reason} ({METRICS_SSL_ENABLED}: the metrics endpoint's "
                                                  f"TLS uses the stores of the listener {listener.name})") from None
    return MetricsSecurity(factory.context, listener.name, authentication)

