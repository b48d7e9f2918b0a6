"""SASL fuzz cases: what a client sends on one connection to a SASL listener, step by step.

A case is a list of steps. A step is a generator: it yields a Token (bytes to write: one or more
size-prefixed frames, or a broken prefix) and is sent what the broker answered to the last frame
of it (the response frame, or None when the broker closed the connection or said nothing), so a
SCRAM login can answer the broker's nonce and salt. Each Token says which principal it would log
in as were it to complete an exchange (``claims``): None for everything the fuzzer made up or
spoiled, so a broker completing an exchange with it has let someone in (sasl_driver.py).

Every case comes from its own ``random.Random`` (the stream number and the case index), so any
case can be made again on its own. The kinds:

- ``login``: a correct login, any mechanism, SaslHandshake v0 (bare tokens) or v1 with any
  SaslAuthenticate version, sometimes naming the user as its authorization id too; sometimes
  re-authenticated (KIP-368) as the same user.
- ``wrong-credentials``: a wrong password, an unknown user, an authorization id of another user.
- ``before-handshake``: SaslAuthenticate, or a bare token, before any SaslHandshake.
- ``second-handshake``: a SaslHandshake in the middle of an exchange, or after a refused one.
- ``early-request``: a Kafka request other than ApiVersions (a valid one, or any API key's
  header with random bytes) before the exchange, after ApiVersions, after the handshake, or
  between the SCRAM messages.
- ``truncated``: an exchange's frame cut short (the size telling the truth), or a frame the
  connection never completes.
- ``oversized``: a size prefix over sasl.server.max.receive.size, at any point before the
  exchange ends, or a SaslAuthenticate or bare token just under it.
- ``garbage-scram``, ``garbage-plain``: malformed mechanism messages, made to break one rule
  each (RFC 5802's grammar, the nonce, the proof, the channel binding; PLAIN's NULs).
- ``raw-tokens``: a v0 handshake, then bare tokens of random bytes.
- ``reauth``: a correct login, then a re-authentication as another user, with a wrong password,
  another mechanism, or garbage.
- ``mutated``: a correct login with one of its tokens mutated byte-wise.
- ``pipelined``: ApiVersions, handshake, a PLAIN token (right or wrong) and a Metadata request
  in one write, cut into random pieces.

Every case ends with a Metadata request (the driver's probe): answered only when the case left
the connection authenticated.
"""
from __future__ import annotations

import base64
import functools
import hashlib
import hmac
import random
import string
import struct
from collections.abc import Callable, Generator
from dataclasses import dataclass, field

from odradek.broker import api_keys
from odradek.fuzz import templates
from odradek.fuzz.mutate import CaseMaker
from odradek.protocol import controller_api, kio_util

PLAIN, SCRAM_256, SCRAM_512 = "PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"
MECHANISMS = (PLAIN, SCRAM_256, SCRAM_512)
#: the users of the fuzzed listener: PLAIN's (its JAAS config) and SCRAM's (both mechanisms)
USERS = {"alice": "alice-secret", "bob": "bob-secret"}
CLIENT_ID = "sasl-fuzzer"
SCRAM_ITERATIONS = 4096

KINDS = ("login", "wrong-credentials", "before-handshake", "second-handshake", "early-request", "truncated",
         "oversized", "garbage-scram", "garbage-plain", "raw-tokens", "reauth", "mutated", "pipelined")
_WEIGHTS = (8, 8, 6, 8, 12, 8, 6, 12, 6, 8, 10, 10, 6)


@dataclass(frozen=True)
class Token:
    """Bytes a step writes (one or more frames, or a broken prefix), in ``cuts`` pieces."""

    data: bytes
    #: the principal an exchange completed by this token's last frame would be; None: it must not
    #: complete one (a spoiled or made-up token)
    claims: str | None = None
    cuts: tuple[int, ...] = ()


#: a step: yields Tokens, is sent the answer to each Token's last frame (None: closed or none)
StepRun = Generator[Token, "bytes | None", None]
Step = Callable[["Notes"], StepRun]


@dataclass
class Notes:
    """What a step noticed about the broker's answers (a SCRAM server signature that does not
    verify, a server-first that does not extend the client's nonce): findings for the driver."""

    problems: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Case:
    kind: str
    steps: tuple[Step, ...]


# -- frames --------------------------------------------------------------------------------------

def framed(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def request(api_key: int, version: int, correlation_id: int, body: dict[str, object]) -> bytes:
    return kio_util.encode_request(api_key, version, correlation_id, CLIENT_ID, body)


def handshake(mechanism: str, version: int, correlation_id: int) -> bytes:
    return request(api_keys.SASL_HANDSHAKE, version, correlation_id, {"mechanism": mechanism})


def authenticate(token: bytes, version: int, correlation_id: int) -> bytes:
    return request(api_keys.SASL_AUTHENTICATE, version, correlation_id, {"auth_bytes": token})


def api_versions(version: int, correlation_id: int) -> bytes:
    """ApiVersions; a version past the broker's is v3's body under that version (a newer client)."""
    frame = bytearray(request(api_keys.API_VERSIONS, min(version, 3), correlation_id,
                              {"client_software_name": "sasl-fuzzer", "client_software_version": "1.0"}))
    frame[6:8] = version.to_bytes(2, "big")
    return bytes(frame)


def metadata(correlation_id: int) -> bytes:
    """The probe: Metadata v12 for every topic."""
    return request(api_keys.METADATA, 12, correlation_id, {"topics": None, "allow_auto_topic_creation": False,
                                                           "include_topic_authorized_operations": False})


def challenge_of(answer: bytes | None, raw: bool, version: int) -> bytes | None:
    """The mechanism's challenge in a broker's answer: the bare frame after a v0 handshake, the
    auth bytes of a successful SaslAuthenticate response; None for a refusal or no answer."""
    if answer is None:
        return None
    if raw:
        return answer
    try:
        _, body = kio_util.decode_response(api_keys.SASL_AUTHENTICATE, version, answer)
    except Exception:  # noqa: BLE001 - the driver reports a response that does not decode
        return None
    return bytes(body.auth_bytes) if int(body.error_code) == 0 else None


# -- SCRAM's client side (written apart from odradek.security.scram: an oracle of its own) ------

_HASHES = {SCRAM_256: "sha256", SCRAM_512: "sha512"}


@functools.lru_cache(maxsize=256)
def _salted(hash_name: str, password: str, salt: bytes, iterations: int) -> bytes:
    return hashlib.pbkdf2_hmac(hash_name, password.encode(), salt, iterations)


def scram_final(mechanism: str, password: str, gs2_header: str, client_first_bare: str, server_first: str,
                nonce: str | None = None) -> tuple[str, bytes]:
    """(client-final message, the server signature a correct broker sends back) for
    ``server_first``; ValueError when it is not a server-first message."""
    attributes = dict(part.split("=", 1) for part in server_first.split(",")[:3] if "=" in part)
    if set(attributes) != {"r", "s", "i"} or not attributes["i"].isdigit():
        raise ValueError(f"not a server-first message: {server_first[:80]!r}")
    hash_name = _HASHES[mechanism]
    salted = _salted(hash_name, password, base64.b64decode(attributes["s"]), int(attributes["i"]))
    client_key = hmac.digest(salted, b"Client Key", hash_name)
    stored_key = hashlib.new(hash_name, client_key).digest()
    without_proof = f"c={base64.b64encode(gs2_header.encode()).decode()},r={nonce or attributes['r']}"
    auth_message = f"{client_first_bare},{server_first},{without_proof}".encode()
    signature = hmac.digest(stored_key, auth_message, hash_name)
    proof = bytes(a ^ b for a, b in zip(client_key, signature))
    server_key = hmac.digest(salted, b"Server Key", hash_name)
    return f"{without_proof},p={base64.b64encode(proof).decode()}", hmac.digest(server_key, auth_message, hash_name)


def nonce_of(server_first: str) -> str:
    return server_first.split(",", 1)[0][2:]


# -- steps ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Login:
    """A login by the book unless ``spoil`` says how to break it: "" (none), "password",
    "unknown-user", "authzid-same" (still correct), "authzid-other", a garbage-scram or
    garbage-plain variant, or "mutate-first"/"mutate-final" (a byte-wise mutation of that token)."""

    mechanism: str
    user: str = "alice"
    password: str = USERS["alice"]
    handshake_version: int = 1
    authenticate_version: int = 1
    spoil: str = ""
    seed: int = 0

    def claims(self) -> str | None:
        correct = USERS.get(self.user) == self.password and self.spoil in ("", "authzid-same")
        return f"User:{self.user}" if correct else None

    def __call__(self, notes: Notes) -> StepRun:
        rng = random.Random(self.seed)
        raw = self.handshake_version == 0
        correlation = rng.randrange(1 << 30)
        answer = yield Token(handshake(self.mechanism, self.handshake_version, correlation))
        if answer is None:
            return

        def wrap(token: bytes) -> bytes:
            return framed(token) if raw else authenticate(token, self.authenticate_version, correlation + 1)

        if self.mechanism == PLAIN:
            yield Token(wrap(self._plain_token(rng)), self.claims())
            return
        client_nonce = "".join(rng.choice(string.ascii_letters + string.digits) for _ in range(24))
        authzid = {"authzid-same": self.user, "authzid-other": "bob" if self.user != "bob" else "alice"}.get(self.spoil)
        gs2_header = f"n,a={authzid}," if authzid else "n,,"
        bare = f"n={self.user},r={client_nonce}"
        first = (gs2_header + bare).encode()
        if self.spoil.startswith("first-"):
            first = _garbage_client_first(rng, self.spoil, self.user, client_nonce)
        elif self.spoil == "mutate-first":
            first = _mutated(rng, first)
        answer = yield Token(wrap(first))
        challenge = challenge_of(answer, raw, self.authenticate_version)
        if challenge is None:
            return
        server_first = challenge.decode("utf-8", "replace")
        try:
            if not server_first.startswith(f"r={client_nonce}") or nonce_of(server_first) == client_nonce:
                raise ValueError(f"the server nonce does not extend the client's: {server_first[:80]!r}")
            final, signature = scram_final(self.mechanism, self.password, gs2_header, bare, server_first)
        except ValueError as exc:
            if not self.spoil.startswith("first-") and self.spoil != "mutate-first":
                notes.problems.append(f"SASL/{self.mechanism} server-first message: {exc}")
            final, signature = "c=biws,r=x,p=eA==", b""
        if self.spoil.startswith("final-"):
            final = _garbage_client_final(rng, self.spoil, final, nonce_of(server_first), self.mechanism)
        token = _encoded(final)
        if self.spoil == "mutate-final":
            token = _mutated(rng, token)
        answer = yield Token(wrap(token), self.claims())
        server_final = challenge_of(answer, raw, self.authenticate_version)
        if server_final is not None and self.claims() is not None and signature and \
                server_final != b"v=" + base64.b64encode(signature):
            notes.problems.append(f"SASL/{self.mechanism} server-final message does not verify: {server_final[:80]!r}")

    def _plain_token(self, rng: random.Random) -> bytes:
        user, password = self.user.encode(), self.password.encode()
        spoil = self.spoil
        if spoil == "authzid-same":
            return user + b"\0" + user + b"\0" + password
        if spoil == "authzid-other":
            return (b"alice" if user == b"bob" else b"bob") + b"\0" + user + b"\0" + password
        if spoil == "mutate-final":
            return _mutated(rng, b"\0" + user + b"\0" + password)
        if spoil.startswith("plain-"):
            return _garbage_plain(rng, spoil, user, password)
        return b"\0" + user + b"\0" + password


SCRAM_FIRST_SPOILS = ("first-random", "first-no-gs2", "first-channel-binding", "first-mandatory-extension",
                      "first-tokenauth", "first-bad-saslname", "first-no-nonce", "first-comma-nonce",
                      "first-invalid-utf8", "first-nul", "first-empty", "first-huge-user", "first-extensions")
SCRAM_FINAL_SPOILS = ("final-random", "final-proof-random", "final-proof-short", "final-proof-empty",
                      "final-no-proof", "final-wrong-nonce", "final-client-nonce-only", "final-nonce-twice",
                      "final-channel-binding", "final-bad-base64", "final-extension", "final-reordered",
                      "final-invalid-utf8", "final-nul", "final-empty", "final-appended")
PLAIN_SPOILS = ("plain-no-nul", "plain-one-nul", "plain-many-nuls", "plain-empty-user", "plain-empty-password",
                "plain-invalid-utf8", "plain-random", "plain-empty", "plain-huge-user", "plain-trailing-nul")


def _garbage_client_first(rng: random.Random, spoil: str, user: str, nonce: str) -> bytes:
    bare = f"n={user},r={nonce}"
    return {
        "first-random": rng.randbytes(rng.randint(1, 200)),
        "first-no-gs2": bare.encode(),
        "first-channel-binding": f"p=tls-unique,,{bare}".encode(),
        "first-mandatory-extension": f"n,,m=ext,{bare}".encode(),
        "first-tokenauth": f"n,,{bare},tokenauth=true".encode(),
        "first-bad-saslname": f"n,,n={user}=2X,r={nonce}".encode(),
        "first-no-nonce": f"n,,n={user}".encode(),
        "first-comma-nonce": f"n,,n={user},r=,".encode(),
        "first-invalid-utf8": f"n,,n={user}".encode() + b"\xff\xfe,r=" + nonce.encode(),
        "first-nul": f"n,,n={user}\0,r={nonce}".encode(),
        "first-empty": b"",
        "first-huge-user": f"n,,n={'u' * rng.choice((1000, 65536))},r={nonce}".encode(),
        "first-extensions": f"n,,{bare},{','.join(f'e{i}=v' for i in range(rng.randint(1, 300)))}".encode(),
    }[spoil]


def _garbage_client_final(rng: random.Random, spoil: str, final: str, nonce: str, mechanism: str) -> str:
    without_proof, _, proof = final.rpartition(",p=")
    size = hashlib.new(_HASHES[mechanism]).digest_size
    return {
        "final-random": rng.randbytes(rng.randint(1, 200)).decode("latin-1"),
        "final-proof-random": f"{without_proof},p={base64.b64encode(rng.randbytes(size)).decode()}",
        "final-proof-short": f"{without_proof},p={base64.b64encode(rng.randbytes(size // 2)).decode()}",
        "final-proof-empty": f"{without_proof},p=",
        "final-no-proof": without_proof,
        "final-wrong-nonce": f"c=biws,r={nonce}x,p={proof}",
        "final-client-nonce-only": f"c=biws,r={nonce[:24]},p={proof}",
        "final-nonce-twice": f"c=biws,r={nonce[:24]}{nonce},p={proof}",  # librdkafka < 2.6.1's nonce
        "final-channel-binding": f"c=eSws,r={nonce},p={proof}",  # "y,," instead of "n,,"
        "final-bad-base64": f"c=biws,r={nonce},p={proof[:-2]}*!",
        "final-extension": f"{without_proof},x=y,p={proof}",
        "final-reordered": f"r={nonce},c=biws,p={proof}",
        "final-invalid-utf8": final[:10] + "\udcff" + final[10:],
        "final-nul": final.replace(",p=", "\0,p="),
        "final-empty": "",
        "final-appended": final + rng.choice((",", "=", "==", ",p=AAAA", "\n")),
    }[spoil]


def _garbage_plain(rng: random.Random, spoil: str, user: bytes, password: bytes) -> bytes:
    return {
        "plain-no-nul": user + password,
        "plain-one-nul": user + b"\0" + password,
        "plain-many-nuls": b"\0" + user + b"\0" + password + b"\0\0",
        "plain-empty-user": b"\0\0" + password,
        "plain-empty-password": b"\0" + user + b"\0",
        "plain-invalid-utf8": b"\0" + user + b"\0" + password + b"\xc0\x80",
        "plain-random": rng.randbytes(rng.randint(1, 100)),
        "plain-empty": b"",
        "plain-huge-user": b"\0" + b"u" * 100_000 + b"\0" + password,
        "plain-trailing-nul": b"\0" + user + b"\0" + password + b"\0",
    }[spoil]


def _encoded(text: str) -> bytes:
    return text.encode("utf-8", "surrogateescape")


def _mutated(rng: random.Random, token: bytes) -> bytes:
    """One to three byte-wise mutations that always change the token."""
    data = bytearray(token)
    for _ in range(rng.randint(1, 3)):
        op = rng.randrange(5)
        at = rng.randrange(len(data) + 1)
        if op == 0 and data and at < len(data):
            data[at] ^= 1 << rng.randrange(8)
        elif op == 1:
            data[at:at] = rng.randbytes(rng.randint(1, 8))
        elif op == 2 and data:
            del data[at:at + rng.randint(1, 8)]
        elif op == 3:
            del data[at:]
        else:
            data += rng.randbytes(rng.randint(1, 8))
    return bytes(data) if bytes(data) != token else token + b"\0"


@dataclass(frozen=True)
class Send:
    """Bytes as they are (frames of the fuzzer's making: nothing in them may log anyone in)."""

    data: bytes
    cuts: tuple[int, ...] = ()

    def __call__(self, notes: Notes) -> StepRun:
        yield Token(self.data, None, self.cuts)


@dataclass(frozen=True)
class Pipelined:
    """ApiVersions, SaslHandshake v1, one PLAIN SaslAuthenticate and a Metadata request in one
    write: a client that does not wait for answers. The token claims alice only when right."""

    password: str
    cuts: tuple[int, ...]

    def __call__(self, notes: Notes) -> StepRun:
        data = b"".join((api_versions(3, 1), handshake(PLAIN, 1, 2),
                         authenticate(b"\0alice\0" + self.password.encode(), 2, 3), metadata(4)))
        claims = "User:alice" if self.password == USERS["alice"] else None
        yield Token(data, claims, tuple(c for c in self.cuts if 0 < c < len(data)))


# -- the cases -----------------------------------------------------------------------------------

class SaslCaseMaker:
    def __init__(self, stream_number: int, max_receive_size: int, topology: templates.Topology) -> None:
        self.stream_number = stream_number
        self.max_receive_size = max_receive_size
        self._requests = CaseMaker(topology, 100 * 1024 * 1024, stream_number)
        self._api_keys = sorted(set(api_keys.VERSIONS) | set(controller_api.VERSIONS))

    def case(self, index: int) -> Case:
        rng = random.Random(self.stream_number * 1_000_000_007 + index + 0x5A51)
        kind = rng.choices(KINDS, _WEIGHTS)[0]
        steps = getattr(self, kind_method(kind))(rng)
        return Case(kind, tuple(steps))

    # -- pieces --

    def _login(self, rng: random.Random, mechanism: str | None = None, **kwargs: object) -> Login:
        mechanism = mechanism or rng.choice(MECHANISMS)
        args: dict[str, object] = {"handshake_version": rng.choice((0, 1, 1, 1)),
                                   "authenticate_version": rng.choice((0, 1, 2, 2)),
                                   "seed": rng.randrange(1 << 32)}
        args.update(kwargs)
        return Login(mechanism, **args)  # type: ignore[arg-type]

    def _maybe_api_versions(self, rng: random.Random) -> list[Send]:
        if rng.random() < 0.4:
            return [Send(api_versions(rng.choice((0, 1, 2, 3, 3, 99)), rng.randrange(1000)))]
        return []

    def _kafka_request(self, rng: random.Random) -> bytes:
        """A request other than the exchange's: a valid one, or any API key's header followed by
        random bytes (before authentication the broker must not look further than the key)."""
        if rng.random() < 0.5:
            template = self._requests.template(rng)
            if template.api_key != api_keys.API_VERSIONS:
                return framed(template.payload)
        key = rng.choice([k for k in self._api_keys if k not in (api_keys.API_VERSIONS, api_keys.SASL_HANDSHAKE,
                                                                  api_keys.SASL_AUTHENTICATE)]
                         + [rng.randrange(-5, 200)])
        key = key if key not in (api_keys.API_VERSIONS, api_keys.SASL_HANDSHAKE, api_keys.SASL_AUTHENTICATE) else 3
        lo, hi = api_keys.VERSIONS.get(key, (0, controller_api.VERSIONS.get(key, 3)))
        header = struct.pack(">hhi", key, rng.randint(lo, hi), rng.randrange(1000)) + struct.pack(">h", 7) + b"fuzzer!"
        return framed(header + rng.randbytes(rng.randint(0, 64)))

    def _sasl_frame(self, rng: random.Random) -> bytes:
        """A frame of the exchange: ApiVersions, SaslHandshake or SaslAuthenticate."""
        which = rng.randrange(3)
        if which == 0:
            return api_versions(rng.choice((0, 3)), rng.randrange(1000))
        if which == 1:
            return handshake(rng.choice(MECHANISMS + ("GSSAPI", "plain", "")), rng.choice((0, 1)), rng.randrange(1000))
        return authenticate(rng.randbytes(rng.randint(0, 40)), rng.choice((0, 1, 2)), rng.randrange(1000))

    # -- kinds --

    def _login_(self, rng: random.Random) -> list[Step]:
        user = rng.choice(sorted(USERS))
        first = self._login(rng, user=user, password=USERS[user], spoil=rng.choice(("", "", "", "authzid-same")))
        steps: list[Step] = [*self._maybe_api_versions(rng), first]
        if rng.random() < 0.3:  # KIP-368: the same user again, on the same mechanism
            steps.append(self._login(rng, first.mechanism, user=user, password=USERS[user]))
        return steps

    def _wrong_credentials(self, rng: random.Random) -> list[Step]:
        spoil = rng.choice(("password", "unknown-user", "authzid-other"))
        user = "mallory" if spoil == "unknown-user" else rng.choice(sorted(USERS))
        password = "wrong" if spoil == "password" else USERS.get(user, "alice-secret")
        return [*self._maybe_api_versions(rng), self._login(rng, user=user, password=password, spoil=spoil)]

    def _before_handshake(self, rng: random.Random) -> list[Step]:
        token = rng.choice((b"\0alice\0alice-secret", b"n,,n=alice,r=abc", rng.randbytes(rng.randint(0, 64))))
        frame = authenticate(token, rng.choice((0, 1, 2)), 1) if rng.random() < 0.7 else framed(token)
        return [*self._maybe_api_versions(rng), Send(frame)]

    def _second_handshake(self, rng: random.Random) -> list[Step]:
        mechanism = rng.choice(MECHANISMS)
        steps: list[Step] = [*self._maybe_api_versions(rng), Send(handshake(mechanism, rng.choice((0, 1)), 1))]
        if mechanism != PLAIN and rng.random() < 0.5:
            steps.append(Send(authenticate(b"n,,n=alice,r=fuzznonce", 1, 2)))
        again = handshake(rng.choice(MECHANISMS + ("GSSAPI",)), rng.choice((0, 1)), 3)
        steps.append(Send(again))
        if rng.random() < 0.5:  # and then a login as if the second handshake had been taken
            steps.append(self._login(rng))
        return steps

    def _early_request(self, rng: random.Random) -> list[Step]:
        mechanism = rng.choice(MECHANISMS)
        where = rng.randrange(5)
        steps: list[Step] = []
        if where >= 1:
            steps.append(Send(api_versions(3, 1)))
        if where >= 2:
            steps.append(Send(handshake(mechanism, 0 if where == 4 else 1, 2)))
        if where == 3 and mechanism != PLAIN:
            steps.append(Send(authenticate(b"n,,n=alice,r=fuzznonce", 1, 3)))
        requests = b"".join(self._kafka_request(rng) for _ in range(rng.randint(1, 3)))
        return [*steps, Send(requests, self._cuts(rng, requests))]

    def _truncated(self, rng: random.Random) -> list[Step]:
        steps: list[Step] = [*self._maybe_api_versions(rng)]
        if rng.random() < 0.5:
            steps.append(Send(handshake(rng.choice(MECHANISMS), 1, 1)))
            frame = authenticate(b"\0alice\0alice-secret" if rng.random() < 0.5 else b"n,,n=alice,r=abc",
                                 rng.choice((0, 1, 2)), 2)
        else:
            frame = self._sasl_frame(rng)
        payload = frame[4:]
        cut = rng.randrange(len(payload))
        if rng.random() < 0.5:  # the size tells the truth about a short payload
            steps.append(Send(framed(payload[:cut])))
        else:  # the size promises more than comes: the broker waits
            steps.append(Send(frame[:4 + cut]))
        return steps

    def _oversized(self, rng: random.Random) -> list[Step]:
        limit = self.max_receive_size
        steps: list[Step] = [*self._maybe_api_versions(rng)]
        how = rng.randrange(4)
        if how >= 2:
            steps.append(Send(handshake(rng.choice(MECHANISMS), 0 if how == 3 else 1, 1)))
        if rng.random() < 0.6:  # a size prefix past the limit: the connection closes at once
            size = rng.choice((limit + 1, limit + 4096, 1 << 20, (1 << 31) - 1))
            steps.append(Send(struct.pack(">i", size) + rng.randbytes(rng.randint(0, 64))))
        elif how == 3:  # a bare token just under the limit
            steps.append(Send(framed(rng.randbytes(limit - rng.randint(0, 16)))))
        else:  # a SaslAuthenticate just under it (the token fails, or comes before a handshake)
            body = authenticate(b"", 1, 2)[4:]
            token = b"\0alice\0" + b"x" * (limit - len(body) - 16 - rng.randint(0, 16))
            steps.append(Send(authenticate(token, 1, 2)))
        return steps

    def _garbage_scram(self, rng: random.Random) -> list[Step]:
        spoil = rng.choice(SCRAM_FIRST_SPOILS + SCRAM_FINAL_SPOILS)
        return [*self._maybe_api_versions(rng), self._login(rng, rng.choice((SCRAM_256, SCRAM_512)), spoil=spoil)]

    def _garbage_plain(self, rng: random.Random) -> list[Step]:
        return [*self._maybe_api_versions(rng), self._login(rng, PLAIN, spoil=rng.choice(PLAIN_SPOILS))]

    def _raw_tokens(self, rng: random.Random) -> list[Step]:
        steps: list[Step] = [Send(handshake(rng.choice(MECHANISMS), 0, 1))]
        for _ in range(rng.randint(1, 3)):
            token = rng.randbytes(rng.choice((0, 1, 5, 40, 300, 4000)))
            steps.append(Send(framed(token)))
        return steps

    def _reauth(self, rng: random.Random) -> list[Step]:
        first = self._login(rng, user="alice", password=USERS["alice"])
        steps: list[Step] = [first]
        if rng.random() < 0.3:
            steps.append(Send(metadata(50)))
        how = rng.randrange(6)
        if how == 0:  # another user, with that user's own right password
            steps.append(self._login(rng, first.mechanism, user="bob", password=USERS["bob"]))
        elif how == 1:
            steps.append(self._login(rng, first.mechanism, password="wrong", spoil="password"))
        elif how == 2:  # another mechanism: refused at the handshake
            other = rng.choice([m for m in MECHANISMS if m != first.mechanism])
            steps.append(self._login(rng, other, user=rng.choice(sorted(USERS))))
        elif how == 3:
            spoils = PLAIN_SPOILS if first.mechanism == PLAIN else SCRAM_FIRST_SPOILS + SCRAM_FINAL_SPOILS
            steps.append(self._login(rng, first.mechanism, spoil=rng.choice(spoils)))
        elif how == 4:  # a handshake, then a request other than the exchange's
            steps.append(Send(handshake(first.mechanism, 1, 60)))
            steps.append(Send(self._kafka_request(rng)))
        else:  # SaslAuthenticate without the handshake that starts a re-authentication
            steps.append(Send(authenticate(b"\0bob\0bob-secret", rng.choice((0, 1, 2)), 61)))
        return steps

    def _mutated(self, rng: random.Random) -> list[Step]:
        mechanism = rng.choice(MECHANISMS)
        spoil = "mutate-final" if mechanism == PLAIN or rng.random() < 0.5 else "mutate-first"
        return [*self._maybe_api_versions(rng), self._login(rng, mechanism, spoil=spoil)]

    def _pipelined(self, rng: random.Random) -> list[Step]:
        password = USERS["alice"] if rng.random() < 0.5 else rng.choice(("wrong", "", "alice-secre"))
        return [Pipelined(password, tuple(sorted(rng.sample(range(1, 200), rng.randint(0, 4)))))]

    @staticmethod
    def _cuts(rng: random.Random, data: bytes) -> tuple[int, ...]:
        if len(data) < 2 or rng.random() < 0.5:
            return ()
        return tuple(sorted(rng.sample(range(1, len(data)), min(len(data) - 1, rng.randint(1, 3)))))


def kind_method(kind: str) -> str:
    """The SaslCaseMaker method making a case of ``kind`` (``_login`` makes a Login step)."""
    return "_login_" if kind == "login" else "_" + kind.replace("-", "_")
