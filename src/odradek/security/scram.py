"""SASL/SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677) as Kafka implements them in
org.apache.kafka.common.security.scram.internals: the credential a broker keeps instead of the
password (ScramFormatter.generateCredential), its string form in ZooKeeper's /config/users/<user>
(ScramCredentialUtils), and both sides of the exchange (ScramSaslServer, ScramSaslClient):

    client-first   n,,n=<user>,r=<client nonce>
    server-first   r=<client nonce><server nonce>,s=<salt>,i=<iterations>
    client-final   c=biws,r=<nonce>,p=<proof>
    server-final   v=<server signature>

The broker never sees the password: the proof shows the client knows the key whose hash is the
stored key, and the server signature shows the broker holds the server key, so each side
authenticates the other. Pure and free of I/O: the broker feeds evaluate() the tokens of
SaslAuthenticate requests and a ``(username) -> ScramCredential | None`` callable reads credentials.

Where this differs from Kafka: an unknown user gets a server-first with a made-up salt and fails
at client-final like a wrong password, not to tell who has an account (Kafka fails it at
client-first); the gs2 flag "y" is accepted (RFC 5802 section 6: the client could bind, but no
-PLUS mechanism is offered); "c=" must carry the gs2 header back; the AuthMessage uses the client's
own text of its messages, extensions included. Passwords are not SASLprep-normalised, as in Kafka.
"""
from __future__ import annotations

import base64
import hashlib
import hmac
import re
import secrets
from collections.abc import Callable
from dataclasses import dataclass

from odradek.security.sasl import (
    OTHER_AUTHZID,
    SCRAM_SHA_256,
    SCRAM_SHA_512,
    SaslAuthenticationError,
    SaslServer,
    invalid_credentials,
)

#: Kafka's ScramMechanism bounds; the broker refuses credentials below the minimum.
MIN_ITERATIONS = 4096
MAX_ITERATIONS = 16384
DEFAULT_ITERATIONS = 4096
#: Kafka's ScramMechanism types, the int8 that DescribeUserScramCredentials and
#: AlterUserScramCredentials name a mechanism by (KIP-554); 0 is UNKNOWN, as any other value.
MECHANISM_TYPES: dict[int, str] = {1: SCRAM_SHA_256, 2: SCRAM_SHA_512}
MECHANISM_TYPE_OF: dict[str, int] = {name: number for number, name in MECHANISM_TYPES.items()}

_HASHES = {SCRAM_SHA_256: "sha256", SCRAM_SHA_512: "sha512"}
_CREDENTIAL_FIELDS = ("salt", "stored_key", "server_key", "iterations")
#: RFC 5802's printable: what a nonce is made of (no comma).
_PRINTABLE = re.compile(r"[\x21-\x2b\x2d-\x7e]+")
_SASLNAME = re.compile(r"(?:[^=,\x00]|=2C|=3D)+")
_ESCAPE = re.compile(r"=2C|=3D")
_EXTENSION_NAME = re.compile(r"[A-Za-z]+")
_ITERATIONS = re.compile(r"[0-9]{1,10}")

#: Makes the made-up salt of an unknown user the same on every attempt to this process (a salt
#: changing between attempts would tell the user does not exist).
_UNKNOWN_USER_KEY = secrets.token_bytes(32)


@dataclass(frozen=True, slots=True)
class ScramCredential:
    """What a broker keeps of a password (Kafka's ScramCredential): enough to check a client's
    proof and to sign its own answer, not enough to log in as the user."""

    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int


CredentialLookup = Callable[[str], "ScramCredential | None"]


class _Refusal(ValueError):
    """Why a SCRAM exchange is refused (a message breaking RFC 5802's grammar, a credential
    outside Kafka's limits), for the log: the client gets only the fixed sentence."""


def _hash_name(mechanism: str) -> str:
    try:
        return _HASHES[mechanism]
    except KeyError:
        raise ValueError(f"not a SCRAM mechanism: {mechanism!r} (known: {', '.join(_HASHES)})") from None


def _hmac(hash_name: str, key: bytes, data: bytes) -> bytes:
    return hmac.digest(key, data, hash_name)


def _xor(a: bytes, b: bytes) -> bytes:
    return bytes(x ^ y for x, y in zip(a, b, strict=True))


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _random_string() -> str:
    """130 random bits in base 36, ScramFormatter.secureRandomString()'s shape (nonces and salts)."""
    return _base36(secrets.randbits(130))


def _base36(number: int) -> str:
    digits = ""
    while True:
        number, digit = divmod(number, 36)
        digits = "0123456789abcdefghijklmnopqrstuvwxyz"[digit] + digits
        if not number:
            return digits


def _check_iterations(iterations: int) -> None:
    if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
        raise ValueError(f"SCRAM iterations must be between {MIN_ITERATIONS} and {MAX_ITERATIONS}, not {iterations}")


def generate_credential(mechanism: str, password: str, iterations: int = DEFAULT_ITERATIONS, *,
                        salt: bytes | None = None) -> ScramCredential:
    """The credential of ``password`` (ScramFormatter.generateCredential): a random salt in Kafka's
    shape unless one is given, PBKDF2 (RFC 5802's Hi()) for the salted password, and of its client
    key only the hash."""
    _check_iterations(iterations)
    salt = new_salt() if salt is None else salt
    return credential_from_salted_password(mechanism, salt, salted_password(mechanism, password, salt, iterations),
                                           iterations)


def new_salt() -> bytes:
    """A random salt in the shape Kafka's clients make one (KafkaAdminClient's
    generateRandomSalt, ScramFormatter.secureRandomString): 130 random bits in base 36."""
    return _random_string().encode("ascii")


def salted_password(mechanism: str, password: str, salt: bytes, iterations: int) -> bytes:
    """RFC 5802's SaltedPassword, Hi(password, salt, i) (PBKDF2, ScramFormatter.hi): what
    AlterUserScramCredentials carries (KIP-554), so the password itself never leaves the client."""
    return hashlib.pbkdf2_hmac(_hash_name(mechanism), password.encode(), salt, iterations)


def digest_size(mechanism: str) -> int:
    """Bytes of the mechanism's hash: of a salted password, a stored key and a server key."""
    return hashlib.new(_hash_name(mechanism)).digest_size


def credential_from_salted_password(mechanism: str, salt: bytes, salted: bytes, iterations: int) -> ScramCredential:
    """The credential a broker keeps of a salted password (ScramFormatter.generateCredential(salt,
    saltedPassword, iterations)): the server key, and of the client key only its hash."""
    hash_name = _hash_name(mechanism)
    stored_key = hashlib.new(hash_name, _hmac(hash_name, salted, b"Client Key")).digest()
    return ScramCredential(salt, stored_key, _hmac(hash_name, salted, b"Server Key"), iterations)


def password_matches(mechanism: str, credential: ScramCredential, password: str) -> bool:
    """Whether ``password`` is the one ``credential`` was made from: the stored key of its salted
    password (Hi(password, salt, i), then H(HMAC(salted, "Client Key"))) compared in constant time
    (for logins that carry the password itself, as HTTP Basic authentication does). False for a
    credential outside Kafka's iteration bounds, which a SCRAM exchange refuses too."""
    if not MIN_ITERATIONS <= credential.iterations <= MAX_ITERATIONS:
        return False
    hash_name = _hash_name(mechanism)
    salted = hashlib.pbkdf2_hmac(hash_name, password.encode(), credential.salt, credential.iterations)
    stored_key = hashlib.new(hash_name, _hmac(hash_name, salted, b"Client Key")).digest()
    return hmac.compare_digest(stored_key, credential.stored_key)


def credential_to_string(credential: ScramCredential) -> str:
    """ScramCredentialUtils.credentialToString: the value of a user's ``SCRAM-SHA-256`` (or -512)
    key in ZooKeeper's /config/users/<user>, the form Kafka's brokers and kafka-configs read."""
    return (f"salt={_b64(credential.salt)},stored_key={_b64(credential.stored_key)},"
            f"server_key={_b64(credential.server_key)},iterations={credential.iterations}")


def credential_from_string(text: str) -> ScramCredential:
    """ScramCredentialUtils.credentialFromString, stricter: each of the four fields exactly once,
    strict base64, decimal iterations; anything else is a ValueError naming the fault."""
    fields: dict[str, str] = {}
    for part in text.split(","):
        name, sep, value = part.partition("=")
        if not sep or not name or not value:
            raise ValueError(f"SCRAM credential {text!r}: {part!r} is not name=value")
        if name not in _CREDENTIAL_FIELDS or name in fields:
            raise ValueError(f"SCRAM credential {text!r}: unexpected or repeated field {name!r}")
        fields[name] = value
    if len(fields) != len(_CREDENTIAL_FIELDS):
        missing = [name for name in _CREDENTIAL_FIELDS if name not in fields]
        raise ValueError(f"SCRAM credential {text!r}: missing {', '.join(missing)}")
    if not _ITERATIONS.fullmatch(fields["iterations"]) or int(fields["iterations"]) <= 0:
        raise ValueError(f"SCRAM credential {text!r}: iterations {fields['iterations']!r} is not a positive number")
    try:
        salt, stored_key, server_key = (_unb64(fields[name]) for name in _CREDENTIAL_FIELDS[:3])
    except _Refusal as exc:
        raise ValueError(f"SCRAM credential {text!r}: {exc}") from None
    return ScramCredential(salt, stored_key, server_key, int(fields["iterations"]))


def sasl_name(username: str) -> str:
    """RFC 5802's saslname of a user: '=' as '=3D' and ',' as '=2C' (ScramFormatter.saslName)."""
    return username.replace("=", "=3D").replace(",", "=2C")


def username_of(saslname: str) -> str:
    """The user a saslname names; a '=' that starts neither escape is malformed."""
    if not _SASLNAME.fullmatch(saslname):
        raise _Refusal(f"invalid saslname {saslname[:64]!r}")
    return _ESCAPE.sub(lambda m: "," if m.group() == "=2C" else "=", saslname)


def _unb64(value: str) -> bytes:
    """Non-empty strict base64 (padded, nothing outside the alphabet), or _Refusal."""
    try:
        data = base64.b64decode(value, validate=True)
    except ValueError:
        raise _Refusal(f"invalid base64 {value[:64]!r}") from None
    if not data:
        raise _Refusal("empty base64 value")
    return data


def _text(message: bytes, what: str) -> str:
    try:
        text = message.decode("utf-8")
    except UnicodeDecodeError:
        raise _Refusal(f"{what} is not UTF-8") from None
    if not text or "\0" in text:
        raise _Refusal(f"{what} is empty or holds NUL")
    return text


def _attribute(part: str, name: str) -> str:
    """The value of ``name=value``; RFC 5802 fixes each message's attributes and their order."""
    if not part.startswith(name + "=") or len(part) == len(name) + 1:
        raise _Refusal(f"expected {name}=..., got {part[:64]!r}")
    return part[len(name) + 1:]


def _nonce(value: str) -> str:
    if not _PRINTABLE.fullmatch(value):
        raise _Refusal(f"invalid nonce {value[:64]!r}")
    return value


def _extensions(parts: list[str]) -> dict[str, str]:
    """Trailing ``name=value`` extensions; "m" is the mandatory extension RFC 5802 reserves, which
    a party that does not know it must refuse."""
    extensions: dict[str, str] = {}
    for part in parts:
        name, sep, value = part.partition("=")
        if not sep or not value or not _EXTENSION_NAME.fullmatch(name):
            raise _Refusal(f"invalid extension {part[:64]!r}")
        if name == "m":
            raise _Refusal("mandatory extension m= is not supported")
        extensions[name] = value
    return extensions


@dataclass(frozen=True, slots=True)
class _ClientFirst:
    gs2_header: str  # "n,," and its kin: what c= of client-final must carry back
    authzid: str
    username: str
    nonce: str
    bare: str  # client-first-message-bare, as the client wrote it, for the AuthMessage
    extensions: dict[str, str]


def _client_first(text: str) -> _ClientFirst:
    cbind, _, rest = text.partition(",")
    authz, sep, bare = rest.partition(",")
    if cbind.startswith("p="):
        raise _Refusal("channel binding (p=) is not supported")
    if cbind not in ("n", "y") or not sep:
        raise _Refusal(f"invalid gs2 header in {text[:64]!r}")
    authzid = username_of(_attribute(authz, "a")) if authz else ""
    parts = bare.split(",")
    if len(parts) < 2 or parts[0].startswith("m="):
        raise _Refusal(f"invalid client-first message {text[:64]!r}")
    username = username_of(_attribute(parts[0], "n"))
    nonce = _nonce(_attribute(parts[1], "r"))
    return _ClientFirst(text[: len(text) - len(bare)], authzid, username, nonce, bare, _extensions(parts[2:]))


@dataclass(frozen=True, slots=True)
class _ClientFinal:
    channel_binding: bytes
    nonce: str
    without_proof: str  # client-final-message-without-proof, for the AuthMessage
    proof: bytes


def _client_final(text: str) -> _ClientFinal:
    without_proof, sep, proof = text.rpartition(",p=")
    parts = without_proof.split(",")
    if not sep or len(parts) < 2:
        raise _Refusal(f"invalid client-final message {text[:64]!r}")
    channel_binding = _unb64(_attribute(parts[0], "c"))
    nonce = _nonce(_attribute(parts[1], "r"))
    _extensions(parts[2:])
    return _ClientFinal(channel_binding, nonce, without_proof, _unb64(proof))


class ScramSaslServer(SaslServer):
    """One connection's SCRAM exchange on the broker (Kafka's ScramSaslServer): evaluate() the
    client-first, then the client-final; then complete, or failed for good after any error.

    Every failure is a SaslAuthenticationError. A malformed message, an unknown user and a wrong
    password carry the same message, the one Kafka's SaslServerAuthenticator sends; an unknown user
    even gets a server-first (a made-up salt, the same on each attempt) and fails on its proof.
    ``server_nonce`` is for tests (RFC 7677's vector); ``unknown_user_key`` lets the brokers of a
    cluster make up the same salts."""

    def __init__(self, mechanism: str, credentials: CredentialLookup, *, server_nonce: str | None = None,
                 unknown_user_key: bytes | None = None) -> None:
        super().__init__(mechanism, "client-first")  # -> client-final -> complete, or failed
        self._hash = _hash_name(mechanism)
        self._credentials = credentials
        if server_nonce is not None and not _PRINTABLE.fullmatch(server_nonce):
            raise ValueError(f"invalid server nonce {server_nonce!r}")
        self._server_nonce = server_nonce or _random_string()
        self._unknown_user_key = unknown_user_key or _UNKNOWN_USER_KEY
        self._first: _ClientFirst | None = None
        self._nonce = ""
        self._server_first = ""
        self._credential: ScramCredential | None = None
        self._known_user = False

    def evaluate(self, response: bytes) -> bytes:
        """The challenge for the client's ``response``: server-first, then server-final."""
        state = self._state
        if state not in ("client-first", "client-final"):
            raise self._unexpected()
        self._state = "failed"
        try:
            if state == "client-first":
                challenge, self._state = self._server_first_message(response), "client-final"
            else:
                challenge, self._state = self._server_final_message(response), "complete"
        except _Refusal as exc:
            self._forget()
            raise invalid_credentials(self.mechanism, str(exc)) from None
        except SaslAuthenticationError:
            self._forget()
            raise
        return challenge

    def _forget(self) -> None:
        self._credential = None
        self._first = None

    def _server_first_message(self, response: bytes) -> bytes:
        first = _client_first(_text(response, "client-first message"))
        if first.extensions.get("tokenauth", "").lower() == "true":
            raise _Refusal("delegation tokens (tokenauth) are not supported")
        if first.authzid and first.authzid != first.username:
            raise SaslAuthenticationError(OTHER_AUTHZID)
        credential = self._lookup(first.username)
        self._known_user = credential is not None
        if credential is None:
            credential = self._unknown_user_credential(first.username)
        self._first, self._credential = first, credential
        self._nonce = first.nonce + self._server_nonce
        self._server_first = f"r={self._nonce},s={_b64(credential.salt)},i={credential.iterations}"
        return self._server_first.encode()

    def _lookup(self, username: str) -> ScramCredential | None:
        """The user's credential; one the exchange cannot use fails here, as in Kafka."""
        try:
            credential = self._credentials(username)
        except Exception as exc:
            raise invalid_credentials(self.mechanism, f"credentials could not be obtained: {exc!r}") from exc
        if credential is None:
            return None
        if credential.iterations < MIN_ITERATIONS:
            raise _Refusal(f"iterations {credential.iterations} is less than the minimum {MIN_ITERATIONS} "
                             f"for {self.mechanism}")
        size = hashlib.new(self._hash).digest_size
        if len(credential.stored_key) != size or len(credential.server_key) != size:
            raise _Refusal(f"the stored credential of {username!r} is not a {self.mechanism} one")
        return credential

    def _unknown_user_credential(self, username: str) -> ScramCredential:
        """A salt in Kafka's shape derived from the name, and keys no proof can match."""
        digest = _hmac("sha256", self._unknown_user_key, f"{self.mechanism}\0{username}".encode())
        salt = _base36(int.from_bytes(digest[:17], "big") >> 6).encode("ascii")
        size = hashlib.new(self._hash).digest_size
        return ScramCredential(salt, secrets.token_bytes(size), secrets.token_bytes(size), DEFAULT_ITERATIONS)

    def _server_final_message(self, response: bytes) -> bytes:
        final = _client_final(_text(response, "client-final message"))
        first, credential = self._first, self._credential
        assert first is not None and credential is not None
        if final.channel_binding != first.gs2_header.encode():
            raise _Refusal("c= does not carry the gs2 header of the client-first message")
        # the nonce must end with the one the server-first gave: librdkafka before 2.6.1 puts
        # its own nonce in front of it again, which Apache Kafka accepts from 3.8.1 on
        # (librdkafka #4895); the proof is checked over the client's text as it sent it
        given, expected = final.nonce.encode(), self._nonce.encode()
        if len(given) < len(expected) or not hmac.compare_digest(given[len(given) - len(expected):], expected):
            raise _Refusal("invalid nonce in the client-final message")
        auth_message = f"{first.bare},{self._server_first},{final.without_proof}".encode()
        signature = _hmac(self._hash, credential.stored_key, auth_message)
        if len(final.proof) != len(signature):
            raise _Refusal("invalid client proof")
        client_key = _xor(signature, final.proof)
        proven = hmac.compare_digest(hashlib.new(self._hash, client_key).digest(), credential.stored_key)
        if not (proven and self._known_user):
            raise _Refusal("invalid client proof")
        self._authorization_id = first.username
        return f"v={_b64(_hmac(self._hash, credential.server_key, auth_message))}".encode()


class ScramSaslClient:
    """The client side (Kafka's ScramSaslClient), for tools and tests: evaluate(b"") gives the
    client-first, evaluate(server-first) the client-final, evaluate(server-final) checks the
    broker's signature and gives b"". Failures are SaslAuthenticationError."""

    def __init__(self, mechanism: str, username: str, password: str, *, authzid: str = "",
                 client_nonce: str | None = None) -> None:
        self.mechanism = mechanism
        self._hash = _hash_name(mechanism)
        if client_nonce is not None and not _PRINTABLE.fullmatch(client_nonce):
            raise ValueError(f"invalid client nonce {client_nonce!r}")
        self._gs2_header = f"n,a={sasl_name(authzid)}," if authzid else "n,,"
        self._client_nonce = client_nonce or _random_string()
        self._bare = f"n={sasl_name(username)},r={self._client_nonce}"
        self._password = password
        self._state = "start"  # -> server-first -> server-final -> complete, or failed
        self._server_signature = b""

    @property
    def complete(self) -> bool:
        return self._state == "complete"

    def evaluate(self, challenge: bytes) -> bytes:
        state, self._state = self._state, "failed"
        try:
            if state == "start" and not challenge:
                response, self._state = f"{self._gs2_header}{self._bare}".encode(), "server-first"
            elif state == "server-first":
                response, self._state = self._client_final(_text(challenge, "server-first message")), "server-final"
            elif state == "server-final":
                response, self._state = self._check_server_final(_text(challenge, "server-final message")), "complete"
            else:
                raise _Refusal(f"unexpected challenge in state {state}")
        except _Refusal as exc:
            raise SaslAuthenticationError(f"SASL/{self.mechanism} exchange failed: {exc}") from None
        return response

    def _client_final(self, server_first: str) -> bytes:
        parts = server_first.split(",")
        if len(parts) < 3 or parts[0].startswith("m="):
            raise _Refusal(f"invalid server-first message {server_first[:64]!r}")
        nonce = _nonce(_attribute(parts[0], "r"))
        salt = _unb64(_attribute(parts[1], "s"))
        iterations = _attribute(parts[2], "i")
        _extensions(parts[3:])
        if not nonce.startswith(self._client_nonce) or nonce == self._client_nonce:
            raise _Refusal("the server nonce does not extend the client nonce")
        if not _ITERATIONS.fullmatch(iterations) or int(iterations) < MIN_ITERATIONS:
            raise _Refusal(f"iterations {iterations[:16]!r} below the minimum {MIN_ITERATIONS} for {self.mechanism}")
        salted = hashlib.pbkdf2_hmac(self._hash, self._password.encode(), salt, int(iterations))
        client_key = _hmac(self._hash, salted, b"Client Key")
        without_proof = f"c={_b64(self._gs2_header.encode())},r={nonce}"
        auth_message = f"{self._bare},{server_first},{without_proof}".encode()
        signature = _hmac(self._hash, hashlib.new(self._hash, client_key).digest(), auth_message)
        self._server_signature = _hmac(self._hash, _hmac(self._hash, salted, b"Server Key"), auth_message)
        return f"{without_proof},p={_b64(_xor(client_key, signature))}".encode()

    def _check_server_final(self, server_final: str) -> bytes:
        if server_final.startswith("e="):
            raise _Refusal(f"the server refused: {server_final[2:66]!r}")
        signature = _unb64(_attribute(server_final.split(",")[0], "v"))
        if not hmac.compare_digest(signature, self._server_signature):
            raise _Refusal("invalid server signature in the server-final message")
        return b""
