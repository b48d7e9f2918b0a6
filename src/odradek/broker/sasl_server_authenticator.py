"""The SASL exchange in front of a SASL listener's request handler (Kafka's SaslServerAuthenticator).

Before a connection has authenticated, it may send ApiVersions (answered as always), then
SaslHandshake naming a mechanism, then that mechanism's tokens: in SaslAuthenticate requests after
a v1 handshake, or as bare size-prefixed tokens after a v0 one (the form before KIP-152). Any other
request closes the connection, as does a failed exchange after its SASL_AUTHENTICATION_FAILED
answer: a wrong password and an unknown user get the same answer. Once authenticated, every request
goes to KafkaApis as the authenticated principal.

Re-authentication (KIP-368): with connections.max.reauth.ms set, SaslAuthenticate answers the
session's lifetime; the client sends SaslHandshake and SaslAuthenticate again on the same
connection before it ends (librdkafka does), with the same mechanism and as the same principal.
A request after the session has expired closes the connection, as Kafka's KafkaChannel does.
"""
from __future__ import annotations

import datetime
import logging
import struct
import time
from typing import Any

from odradek.broker import api_keys
from odradek.broker.connection import CloseConnection, Handler, KafkaConnection, Response
from odradek.broker.listener_security import ListenerSecurity
from odradek.broker.session import Session
from odradek.protocol import kio_util
from odradek.protocol.errors import ErrorCode
from odradek.security.sasl import SaslAuthenticationError, SaslServer

log = logging.getLogger("odradek.broker.sasl")

# the exchange's states (SaslServerAuthenticator.SaslState)
_INITIAL = "initial"  # ApiVersions or SaslHandshake
_AUTHENTICATE = "authenticate"  # SaslAuthenticate requests
_RAW_TOKENS = "raw-tokens"  # bare tokens, after a v0 handshake
_AUTHENTICATED = "authenticated"


class SaslServerAuthenticator:
    """One connection's SASL state, as the connection's request handler: it answers the exchange
    itself and hands every other request to ``apis`` once authenticated."""

    def __init__(self, apis: Handler, security: ListenerSecurity, max_frame_bytes: int) -> None:
        self._apis = apis
        self._security = security
        self._max_frame_bytes = max_frame_bytes
        self._state = _INITIAL
        self._server: SaslServer | None = None
        self._mechanism: str | None = None
        self._reauthenticating = False
        self._expires_at: float | None = None  # time.monotonic() when the session ends

    def __call__(self, frame: memoryview, conn: KafkaConnection) -> Response | Any:
        if self._state == _RAW_TOKENS:
            return self._raw_token(bytes(frame), conn)
        if len(frame) < 8:
            raise CloseConnection("request shorter than a request header")
        api_key, version = struct.unpack_from(">hh", frame, 0)
        if self._state == _AUTHENTICATED:
            return self._authenticated(frame, conn, api_key)
        if api_key == api_keys.API_VERSIONS and self._state == _INITIAL:
            return self._apis(frame, conn)
        if api_key == api_keys.SASL_HANDSHAKE and self._state == _INITIAL:
            return self._handshake(frame, conn)
        if api_key == api_keys.SASL_AUTHENTICATE and self._state == _AUTHENTICATE:
            return self._authenticate(frame, conn)
        raise CloseConnection(f"unexpected request (API key {api_key} v{version}) before SASL authentication "
                              f"({self._state})")

    def _authenticated(self, frame: memoryview, conn: KafkaConnection, api_key: int) -> Response | Any:
        expired = self._expires_at is not None and time.monotonic() >= self._expires_at
        if api_key == api_keys.SASL_HANDSHAKE and self._security.reauth_ms > 0:
            self._state, self._reauthenticating = _INITIAL, True
            return self._handshake(frame, conn)
        if expired:
            raise CloseConnection(f"the SASL session of {conn.session.principal} expired and was not "
                                  "re-authenticated (connections.max.reauth.ms)")
        if api_key in (api_keys.SASL_HANDSHAKE, api_keys.SASL_AUTHENTICATE):
            return self._illegal_state(frame)
        return self._apis(frame, conn)

    # -- the exchange ----------------------------------------------------------------------------

    def _decode(self, frame: memoryview) -> tuple[Any, Any]:
        api_key, version = struct.unpack_from(">hh", frame, 0)
        if not api_keys.supported(api_key, version):
            raise CloseConnection(f"unsupported SASL request (API key {api_key} v{version})")
        try:
            return kio_util.decode_request(frame)
        except Exception as exc:
            raise CloseConnection(f"malformed SASL request (API key {api_key} v{version}): {exc!r}") from None

    def _handshake(self, frame: memoryview, conn: KafkaConnection) -> bytes:
        header, request = self._decode(frame)
        version = header.request_api_version
        mechanism = str(request.mechanism).upper()
        offered = list(self._security.mechanisms)
        if mechanism not in offered or (self._reauthenticating and mechanism != self._mechanism):
            why = "was not the session's" if mechanism in offered else "is not enabled"
            log.info("refusing SASL mechanism %s from %s (it %s)", request.mechanism, conn.peer, why)
            conn.close_after_response()
            return kio_util.encode_response(api_keys.SASL_HANDSHAKE, version, header.correlation_id, {
                "error_code": ErrorCode.UNSUPPORTED_SASL_MECHANISM, "mechanisms": offered})
        self._mechanism = mechanism
        self._server = self._security.sasl_server(mechanism)
        self._state = _AUTHENTICATE if version >= 1 else _RAW_TOKENS
        return kio_util.encode_response(api_keys.SASL_HANDSHAKE, version, header.correlation_id,
                                        {"error_code": ErrorCode.NONE, "mechanisms": offered})

    def _authenticate(self, frame: memoryview, conn: KafkaConnection) -> bytes:
        header, request = self._decode(frame)
        version = header.request_api_version
        try:
            challenge = self._evaluate(bytes(request.auth_bytes), conn)
        except SaslAuthenticationError as exc:
            conn.close_after_response()
            return kio_util.encode_response(api_keys.SASL_AUTHENTICATE, version, header.correlation_id, {
                "error_code": ErrorCode.SASL_AUTHENTICATION_FAILED, "error_message": exc.message, "auth_bytes": b""})
        lifetime_ms = self._security.reauth_ms if self._state == _AUTHENTICATED else 0
        return kio_util.encode_response(api_keys.SASL_AUTHENTICATE, version, header.correlation_id, {
            "error_code": ErrorCode.NONE, "error_message": None, "auth_bytes": challenge,
            "session_lifetime": datetime.timedelta(milliseconds=lifetime_ms)})

    def _raw_token(self, token: bytes, conn: KafkaConnection) -> bytes:
        """A bare token after a v0 handshake: a bare, size-prefixed challenge answers it; a
        failure closes the connection without an answer (the v0 exchange has no place for one)."""
        try:
            challenge = self._evaluate(token, conn)
        except SaslAuthenticationError as exc:
            raise CloseConnection(f"SASL authentication failed: {exc.reason}") from None
        return struct.pack(">i", len(challenge)) + challenge

    def _evaluate(self, token: bytes, conn: KafkaConnection) -> bytes:
        """The mechanism's answer to ``token``; once the exchange is complete, the connection's
        session is the authenticated principal's. SaslAuthenticationError on any failure."""
        assert self._server is not None and self._mechanism is not None
        try:
            challenge = self._server.evaluate(token)
        except SaslAuthenticationError as exc:
            log.info("SASL/%s authentication from %s failed: %s", self._mechanism, conn.peer, exc.reason)
            raise
        if not self._server.complete:
            return challenge
        principal = f"User:{self._server.authorization_id}"
        if self._reauthenticating and principal != conn.session.principal:
            log.info("re-authentication from %s as %s refused: the session is %s", conn.peer, principal,
                     conn.session.principal)
            raise SaslAuthenticationError("Cannot change principals during re-authentication from "
                                          f"{conn.session.principal}: {principal}")
        listener = self._security.listener
        conn.session = Session(principal, conn.session.client_host, listener.name, listener.security_protocol)
        conn.set_max_frame_bytes(self._max_frame_bytes)
        reauth_ms = self._security.reauth_ms
        self._expires_at = time.monotonic() + reauth_ms / 1000 if reauth_ms > 0 else None
        self._state, self._reauthenticating = _AUTHENTICATED, False
        return challenge

    def _illegal_state(self, frame: memoryview) -> bytes:
        header, _request = self._decode(frame)
        return illegal_sasl_state(header)


def illegal_sasl_state(header: Any) -> bytes:
    """SaslHandshake or SaslAuthenticate where no exchange is expected (an authenticated
    connection without re-authentication, a listener without SASL): ILLEGAL_SASL_STATE, as
    Kafka's KafkaApis answers them."""
    api_key, version = header.request_api_key, header.request_api_version
    body: dict[str, Any] = {"error_code": ErrorCode.ILLEGAL_SASL_STATE}
    body.update({"mechanisms": []} if api_key == api_keys.SASL_HANDSHAKE else
                {"error_message": "SaslAuthenticate request received after successful authentication or on a "
                                  "listener without SASL", "auth_bytes": b""})
    return kio_util.encode_response(api_key, version, header.correlation_id, body)
