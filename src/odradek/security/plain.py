"""SASL/PLAIN (RFC 4616) as Kafka's PlainSaslServer checks it: one client token
``[authzid] NUL authcid NUL passwd``, answered with an empty token once the password matches.

The password travels in the clear, so PLAIN belongs on TLS listeners; it exists because every
client speaks it. Passwords come from a ``(username) -> password | None`` callable (Kafka's
PlainServerCallbackHandler reads them from the JAAS config); an unknown user and a wrong password
fail alike, after the same comparison, so neither the answer nor its timing tells them apart.
"""
from __future__ import annotations

import hashlib
import hmac
from collections.abc import Callable

from odradek.security.sasl import OTHER_AUTHZID, PLAIN, SaslAuthenticationError, SaslServer, invalid_credentials

PasswordLookup = Callable[[str], "str | None"]

#: Kafka's PlainSaslServer's messages, which it sends the client as they are.
BAD_PASSWORD = "Authentication failed: Invalid username or password"
LOOKUP_FAILED = "Authentication failed: credentials for user could not be verified"


def plain_token(username: str, password: str, authzid: str = "") -> bytes:
    """The client's one token (PlainSaslClient's), for tools and tests that authenticate."""
    return f"{authzid}\0{username}\0{password}".encode()


def _tokens(response: bytes) -> tuple[str, str, str]:
    """(authzid, authcid, passwd) of a client token, or the failure a malformed one earns."""
    try:
        text = response.decode("utf-8")
    except UnicodeDecodeError:
        raise invalid_credentials(PLAIN, "Invalid SASL/PLAIN response: not UTF-8") from None
    tokens = text.split("\0")
    if len(tokens) != 3:
        raise invalid_credentials(PLAIN, f"Invalid SASL/PLAIN response: expected 3 tokens, got {len(tokens)}")
    authzid, username, password = tokens
    if not username:
        raise invalid_credentials(PLAIN, "Authentication failed: username not specified")
    if not password:
        raise invalid_credentials(PLAIN, "Authentication failed: password not specified")
    return authzid, username, password


def _same_password(given: str, expected: str | None) -> bool:
    """Compares digests, so the time taken depends on neither password's length nor on whether
    the user exists."""
    want = hashlib.sha256((expected or "").encode()).digest()
    matches = hmac.compare_digest(hashlib.sha256(given.encode()).digest(), want)
    return matches and expected is not None


class PlainSaslServer(SaslServer):
    """One connection's PLAIN exchange: a single evaluate(), then complete (or failed for good)."""

    def __init__(self, passwords: PasswordLookup) -> None:
        super().__init__(PLAIN, "start")
        self._passwords = passwords

    def evaluate(self, response: bytes) -> bytes:
        """b"" once the password matches."""
        if self._state != "start":
            raise self._unexpected()
        self._state = "failed"  # until the checks below pass
        authzid, username, password = _tokens(response)
        try:
            expected = self._passwords(username)
        except Exception as exc:
            raise SaslAuthenticationError(LOOKUP_FAILED, f"{LOOKUP_FAILED}: {exc!r}") from exc
        if not _same_password(password, expected):
            raise SaslAuthenticationError(BAD_PASSWORD)
        if authzid and authzid != username:
            raise SaslAuthenticationError(OTHER_AUTHZID)
        self._authorization_id = username
        self._state = "complete"
        return b""
