"""What the SASL mechanisms share: their names, the one error every failed exchange ends in, and
the state every mechanism's server side keeps (javax.security.sasl.SaslServer as Kafka's
SaslServerAuthenticator drives it).

The error's message is what the broker may send the client in SaslAuthenticateResponse; like
Kafka's SaslServerAuthenticator, which answers every SaslException with one fixed sentence, it
never says whether the user exists. The reason is for the broker's own log.
"""
from __future__ import annotations

PLAIN = "PLAIN"
SCRAM_SHA_256 = "SCRAM-SHA-256"
SCRAM_SHA_512 = "SCRAM-SHA-512"
MECHANISMS = (PLAIN, SCRAM_SHA_256, SCRAM_SHA_512)

#: Kafka's PlainSaslServer's and ScramSaslServer's refusal, which it sends the client as it is.
OTHER_AUTHZID = "Authentication failed: Client requested an authorization id that is different from username"


class SaslAuthenticationError(Exception):
    """A SASL exchange failed; the broker answers SASL_AUTHENTICATION_FAILED with ``message``."""

    def __init__(self, message: str, reason: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.reason = reason if reason is not None else message


def invalid_credentials(mechanism: str, reason: str) -> SaslAuthenticationError:
    """The error Kafka's SaslServerAuthenticator reports for any SaslException: one sentence for a
    malformed token, an unknown user and a wrong password alike."""
    return SaslAuthenticationError("Authentication failed during authentication due to invalid credentials "
                                   f"with SASL mechanism {mechanism}", reason)


class SaslServer:
    """The server side of one mechanism's exchange on one connection: evaluate() each client token
    until complete. A failed exchange stays failed; a message after the end is refused and leaves
    a complete exchange complete."""

    def __init__(self, mechanism: str, first_state: str) -> None:
        self.mechanism = mechanism
        self._state = first_state  # the mechanism's own states, then "complete" or "failed"
        self._authorization_id: str | None = None

    @property
    def complete(self) -> bool:
        return self._state == "complete"

    @property
    def authorization_id(self) -> str | None:
        """The authenticated user once complete, None before."""
        return self._authorization_id

    def evaluate(self, response: bytes) -> bytes:
        """The challenge answering the client's ``response``; raises SaslAuthenticationError."""
        raise NotImplementedError

    def _unexpected(self) -> SaslAuthenticationError:
        return SaslAuthenticationError(f"Unexpected SASL/{self.mechanism} message: the exchange is {self._state}")
