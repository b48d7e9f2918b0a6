"""Who sent the request being handled: Kafka's RequestContext.principal, clientAddress and
listenerName, for the handler that answers it.

A connection authenticates once (TLS client certificate, SASL) and keeps its Session; every
request it carries is handled as that session. KafkaConnection sets the current session before
it calls the request handler, and an asynchronous handler's task inherits it (asyncio copies the
context into each task it creates), so handlers ask `current_session()` instead of every handler
signature taking the connection.
"""
from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass

ANONYMOUS = "User:ANONYMOUS"
PLAINTEXT = "PLAINTEXT"


@dataclass(frozen=True, slots=True)
class Session:
    principal: str  # "User:alice", "User:ANONYMOUS" before (or without) authentication
    client_host: str  # the client's address as the authorizer matches ACL hosts ("127.0.0.1")
    listener: str = PLAINTEXT  # the listener's name ("SASL_SSL", "INTERNAL"): Metadata answers its addresses
    security_protocol: str = PLAINTEXT


#: the session of a request handled outside any connection (tests, the broker's own calls)
INTERNAL = Session(ANONYMOUS, "", PLAINTEXT, PLAINTEXT)

_CURRENT: ContextVar[Session] = ContextVar("odradek_session", default=INTERNAL)


def current_session() -> Session:
    return _CURRENT.get()


def set_session(session: Session) -> object:
    """Make ``session`` current; the token resets it (ContextVar.reset)."""
    return _CURRENT.set(session)


def reset_session(token: object) -> None:
    _CURRENT.reset(token)  # type: ignore[arg-type]
