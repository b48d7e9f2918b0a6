"""Authenticating to ZooKeeper with SASL DIGEST-MD5, as ZooKeeper's Java client does with a
JAAS "Client" section naming org.apache.zookeeper.server.auth.DigestLoginModule.

The exchange (ZooKeeperSaslClient over ClientCnxn): once the session is established, the client
sends requests of type ``sasl`` (opcode 102) with ordinary xids, each a GetSASLRequest
(``buffer token``), and the server answers each with a SetSASLResponse (``buffer token``) in a
normal reply (ReplyHeader xid, zxid, err). For DIGEST-MD5 the first token is empty (the
mechanism has no initial response), the server answers with its challenge (realm
"zk-sasl-md5", nonce, qop), the client's digest response follows, and the server's last token
(rspauth) proves it knows the password too. The service name is "zookeeper" and the host part
of the digest-uri is fixed to "zk-sasl-md5" (ZooKeeper's SecurityUtils), whatever server we
reach. A failed login is answered with err AUTHFAILED (-115), or SESSIONCLOSEDREQUIRESASLAUTH
(-124) when the server requires SASL (enforce.auth.enabled), and the server closes the
connection. On success the connection carries the Id ``sasl:<username>`` for ACL checks.

kazoo does the same exchange with pure-sasl when given ``sasl_options``; raw_session.py does it
over its own socket with ``digest_md5_exchange``.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import puresasl
import puresasl.client

OP_SASL = 102
MECHANISM = "DIGEST-MD5"
SERVICE = "zookeeper"
DIGEST_HOST = "zk-sasl-md5"
ERR_AUTH_FAILED = -115
ERR_SESSION_CLOSED_REQUIRE_SASL_AUTH = -124


@dataclass(frozen=True)
class ZkSaslCredentials:
    """The user a ZooKeeper client logs in as (a JAAS Client section's username and password)."""

    username: str
    password: str = field(repr=False)

    def kazoo_sasl_options(self) -> dict[str, Any]:
        """KazooClient(sasl_options=...): a new dict each time (kazoo adds to it)."""
        return {"mechanism": MECHANISM, "username": self.username, "password": self.password}


class SaslLoginError(Exception):
    """The server refused the login (wrong user or password), or the exchange went wrong."""


def digest_md5_exchange(credentials: ZkSaslCredentials, round_trip: Callable[[bytes], bytes | None]) -> None:
    """Run a DIGEST-MD5 login: ``round_trip(token)`` sends one GetSASLRequest and returns the
    server's SetSASLResponse token (raising if the server answered with an error). Raises
    SaslLoginError if the server's proof (rspauth) does not check out or the mechanism fails."""
    client = puresasl.client.SASLClient(DIGEST_HOST, service=SERVICE, mechanism=MECHANISM,
                                        username=credentials.username, password=credentials.password)
    challenge: bytes | None = None
    try:
        for _ in range(10):  # DIGEST-MD5 takes 3 round trips; a server that goes on is broken
            try:
                token = client.process(challenge)
            except (puresasl.SASLError, puresasl.SASLProtocolException) as exc:
                raise SaslLoginError(f"SASL {MECHANISM}: {exc}") from None
            if client.complete and not token:
                return
            challenge = round_trip(token or b"")
        raise SaslLoginError(f"SASL {MECHANISM} did not complete in 10 round trips")
    finally:
        client.dispose()
