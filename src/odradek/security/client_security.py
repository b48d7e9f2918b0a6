"""The client side of a secured connection: which security protocol, TLS context and SASL
credentials a client uses, read from the settings a Kafka client takes, and the SASL exchange
it runs right after connecting (Kafka's SaslClientAuthenticator).

The broker's own clients use it (replica fetchers, the controller's channel, transaction
markers, controlled shutdown: the inter-broker listener's settings) and so do odradek's tools
(`--command-config FILE`). The settings may be librdkafka's (what confluent-kafka and kcat
take: ssl.ca.location, ssl.certificate.location, ssl.key.location, sasl.username,
sasl.password) or the Java client's (ssl.truststore.*, ssl.keystore.*, sasl.jaas.config); a
file of either kind works with every odradek command.

The SASL exchange is written as a generator over frames, so the blocking sockets of the
controller's channel and the tools and the asyncio streams of the broker's fetchers run the same
code: it yields each request frame to send and is sent the response frame (without its size
prefix) in return.
"""
from __future__ import annotations

import asyncio
import socket
import ssl
import struct
from collections.abc import Generator, Mapping
from dataclasses import dataclass
from pathlib import Path

from odradek.protocol import kio_util
from odradek.protocol.errors import ErrorCode, error_name
from odradek.security import jaas, ssl_factory
from odradek.security.plain import plain_token
from odradek.security.sasl import MECHANISMS, PLAIN, SaslAuthenticationError
from odradek.security.scram import ScramSaslClient

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_HANDSHAKE, SASL_AUTHENTICATE = 17, 36
#: SaslHandshake v1 (the tokens then travel in SaslAuthenticate), SaslAuthenticate v1 (it
#: answers the session lifetime, KIP-368)
HANDSHAKE_VERSION, AUTHENTICATE_VERSION = 1, 1
#: the largest SASL response frame a client accepts (a SCRAM challenge is a few hundred bytes)
MAX_SASL_FRAME = 1 << 20

#: librdkafka's names of the TLS settings -> the Java client's, as ssl_factory reads them
_LIBRDKAFKA_PEM = {"ssl.ca.location": "ssl.truststore.location",
                   "ssl.certificate.location": "ssl.keystore.certificate.chain",
                   "ssl.key.location": "ssl.keystore.key"}


class SecurityConfigError(ValueError):
    """A client's security settings cannot be used; the message names the setting."""


@dataclass(frozen=True)
class ClientSecurity:
    """How a client connects: PLAINTEXT, SSL (``ssl_context``), SASL_PLAINTEXT or SASL_SSL
    (``mechanism`` with ``username`` and ``password``)."""

    protocol: str = "PLAINTEXT"
    ssl_context: ssl.SSLContext | None = None
    mechanism: str | None = None
    username: str = ""
    password: str = ""

    @property
    def uses_ssl(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def uses_sasl(self) -> bool:
        return self.protocol in ("SASL_PLAINTEXT", "SASL_SSL")

    def librdkafka_settings(self) -> dict[str, str]:
        """Nothing for PLAINTEXT; the keys a librdkafka client needs otherwise, except the TLS
        files (which the caller's settings name; see from_settings)."""
        if self.protocol == "PLAINTEXT":
            return {}
        out = {"security.protocol": self.protocol}
        if self.uses_sasl and self.mechanism:
            out.update({"sasl.mechanism": self.mechanism, "sasl.username": self.username,
                        "sasl.password": self.password})
        return out


PLAINTEXT = ClientSecurity()


def from_settings(settings: Mapping[str, str]) -> ClientSecurity:
    """A client's security from its settings (librdkafka's or the Java client's keys, either
    case of the protocol); SecurityConfigError names the setting at fault."""
    protocol = settings.get("security.protocol", "PLAINTEXT").upper()
    if protocol not in SECURITY_PROTOCOLS:
        raise SecurityConfigError(f"security.protocol={settings.get('security.protocol')}: one of "
                                  f"{', '.join(SECURITY_PROTOCOLS)} is expected")
    context = _ssl_context(settings) if protocol in ("SSL", "SASL_SSL") else None
    if protocol not in ("SASL_PLAINTEXT", "SASL_SSL"):
        return ClientSecurity(protocol, context)
    mechanism = (settings.get("sasl.mechanism") or settings.get("sasl.mechanisms") or "GSSAPI").upper()
    if mechanism not in MECHANISMS:
        raise SecurityConfigError(f"sasl.mechanism={mechanism}: one of {', '.join(MECHANISMS)} is expected")
    username, password = settings.get("sasl.username"), settings.get("sasl.password")
    if username is None and settings.get("sasl.jaas.config"):
        try:
            options = jaas.parse_jaas_config_property(settings["sasl.jaas.config"]).options
        except ValueError as exc:
            raise SecurityConfigError(f"sasl.jaas.config: {exc}") from None
        username, password = options.get("username"), options.get("password")
    if not username or password is None:
        raise SecurityConfigError(f"SASL/{mechanism} needs sasl.username and sasl.password "
                                  "(or sasl.jaas.config with username and password)")
    return ClientSecurity(protocol, context, mechanism, username, password)


def _ssl_context(settings: Mapping[str, str]) -> ssl.SSLContext:
    """The TLS context of librdkafka's or the Java client's ssl.* settings. librdkafka's PEM
    files are read into the Java client's inline PEM keys; its endpoint identification "none"
    is the Java client's empty one."""
    java = {k: v for k, v in settings.items() if k.startswith("ssl.") and k not in _LIBRDKAFKA_PEM}
    for key, java_key in _LIBRDKAFKA_PEM.items():
        if settings.get(key):
            try:
                text = Path(settings[key]).read_text()
            except OSError as exc:
                raise SecurityConfigError(f"{key}={settings[key]}: {exc.strerror or exc}") from None
            if key == "ssl.ca.location":
                java.update({"ssl.truststore.type": "PEM", "ssl.truststore.certificates": text})
                java.pop("ssl.truststore.location", None)
            else:
                java.update({"ssl.keystore.type": "PEM", java_key: text})
    if java.get("ssl.endpoint.identification.algorithm", "").lower() == "none":
        java["ssl.endpoint.identification.algorithm"] = ""
    if "ssl.truststore.location" in java and "ssl.truststore.type" not in java:
        java["ssl.truststore.type"] = "PEM"  # odradek reads no JKS; a PEM file is what a Python shop has
    try:
        return ssl_factory.client_context(java)
    except ssl_factory.SslConfigError as exc:
        raise SecurityConfigError(str(exc)) from None


def sasl_exchange(security: ClientSecurity, client_id: str) -> Generator[bytes, bytes, int]:
    """The SASL exchange of a freshly connected client: SaslHandshake v1, then the mechanism's
    tokens in SaslAuthenticate v1 requests. Yields each request frame (with its size prefix)
    and is sent each response frame (without it); returns the session lifetime the broker
    gave (ms, 0: none). A refusal raises SaslAuthenticationError with the broker's message."""
    mechanism = security.mechanism or PLAIN
    response = yield kio_util.encode_request(SASL_HANDSHAKE, HANDSHAKE_VERSION, 1, client_id,
                                             {"mechanism": mechanism})
    _, handshake = kio_util.decode_response(SASL_HANDSHAKE, HANDSHAKE_VERSION, response)
    if handshake.error_code != ErrorCode.NONE:
        raise SaslAuthenticationError(f"the broker refused SASL/{mechanism} ({error_name(handshake.error_code)}); "
                                      f"it offers {', '.join(handshake.mechanisms) or 'no mechanism'}")
    scram = None if mechanism == PLAIN else ScramSaslClient(mechanism, security.username, security.password)
    token = plain_token(security.username, security.password) if scram is None else scram.evaluate(b"")
    correlation_id = 2
    while True:
        response = yield kio_util.encode_request(SASL_AUTHENTICATE, AUTHENTICATE_VERSION, correlation_id,
                                                 client_id, {"auth_bytes": token})
        _, answer = kio_util.decode_response(SASL_AUTHENTICATE, AUTHENTICATE_VERSION, response)
        if answer.error_code != ErrorCode.NONE:
            raise SaslAuthenticationError(answer.error_message or error_name(answer.error_code))
        if scram is None or scram.complete:
            return _ms(answer.session_lifetime)
        token = scram.evaluate(answer.auth_bytes)
        if scram.complete:
            return _ms(answer.session_lifetime)
        correlation_id += 1


def _ms(lifetime: object) -> int:
    """SaslAuthenticate's session lifetime (kio gives a timedelta) in milliseconds."""
    seconds = getattr(lifetime, "total_seconds", None)
    return int(seconds() * 1000) if seconds is not None else int(lifetime)  # type: ignore[call-overload]


def connect_blocking(host: str, port: int, security: ClientSecurity, timeout: float, client_id: str,
                     source_address: tuple[str, int] | None = None) -> socket.socket:
    """A connected, and as ``security`` asks TLS-wrapped and SASL-authenticated, blocking socket
    (the controller's channel, controlled shutdown, the tools). OSError, ssl.SSLError or
    SaslAuthenticationError when it cannot be had; the socket is closed then."""
    sock = socket.create_connection((host, port), timeout=timeout, source_address=source_address)
    try:
        if security.ssl_context is not None:
            sock = security.ssl_context.wrap_socket(sock, server_hostname=host)
        if security.uses_sasl:
            exchange = sasl_exchange(security, client_id)
            frame = next(exchange)
            while True:
                sock.sendall(frame)
                frame = exchange.send(_read_frame_blocking(sock))
    except StopIteration:
        return sock
    except BaseException:
        sock.close()
        raise
    return sock


def _read_frame_blocking(sock: socket.socket) -> bytes:
    (size,) = struct.unpack(">i", _read_exactly(sock, 4))
    if not 0 <= size <= MAX_SASL_FRAME:
        raise ConnectionError(f"bad frame size {size} in the SASL exchange")
    return _read_exactly(sock, size)


def _read_exactly(sock: socket.socket, n: int) -> bytes:
    chunks, left = [], n
    while left:
        chunk = sock.recv(left)
        if not chunk:
            raise ConnectionError("the broker closed the connection during the SASL exchange")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


async def open_connection(host: str, port: int, security: ClientSecurity, client_id: str,
                          local_addr: tuple[str, int] | None = None
                          ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """asyncio's open_connection, TLS-wrapped and SASL-authenticated as ``security`` asks (the
    broker's replica fetchers and inter-broker requests)."""
    reader, writer = await asyncio.open_connection(
        host, port, local_addr=local_addr, ssl=security.ssl_context,
        server_hostname=host if security.ssl_context is not None else None)
    try:
        if security.uses_sasl:
            exchange = sasl_exchange(security, client_id)
            frame = next(exchange)
            while True:
                writer.write(frame)
                await writer.drain()
                (size,) = struct.unpack(">i", await reader.readexactly(4))
                if not 0 <= size <= MAX_SASL_FRAME:
                    raise ConnectionError(f"bad frame size {size} in the SASL exchange")
                frame = exchange.send(await reader.readexactly(size))
    except StopIteration:
        return reader, writer
    except BaseException:
        writer.close()
        raise
    return reader, writer
