"""Plays SASL fuzz cases (sasl_cases.py) on a connection to a SASL listener and judges every
answer against a model of the exchange, as broker/sasl_server_authenticator.py documents it and
Kafka's SaslServerAuthenticator behaves:

- before authentication only ApiVersions and the exchange are answered: SaslHandshake (a mechanism
  the listener offers, else UNSUPPORTED_SASL_MECHANISM and the connection closes), then the
  mechanism's tokens, in SaslAuthenticate after a v1 handshake, bare after a v0 one; anything
  else (a Kafka request, SaslAuthenticate before the handshake, a second handshake, a malformed
  or unsupported SASL request, a frame over sasl.server.max.receive.size) closes the connection
  without an answer;
- a refused token gets SASL_AUTHENTICATION_FAILED with one of the fixed messages (bare tokens:
  no answer), then the connection closes;
- an exchange completes only with a token made from a user's right password, and on a
  re-authentication (KIP-368) only with the same mechanism and as the same principal;
- once authenticated, requests are served (the probe: Metadata), SaslAuthenticate and (without
  re-authentication) SaslHandshake get ILLEGAL_SASL_STATE.

Findings: "auth-bypass" (a request other than ApiVersions answered, or in-process let through to
KafkaApis, on a connection that has not authenticated, or as a principal it is not; an exchange
completed by a token that should not complete it), "login-refused" (a correct login refused),
"hang" (no answer, or the connection left open where it must close), "malformed-response"
(an answer that does not decode, or breaks the exchange's rules), and "crash" (a traceback in the
broker's log, or in-process an error logged).
"""
from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from odradek.broker import api_keys
from odradek.broker.session import ANONYMOUS
from odradek.fuzz import oracle
from odradek.fuzz.report import Report
from odradek.fuzz.sasl_cases import MECHANISMS, PLAIN, Case, Login, Notes, Send, Step, Token, metadata
from odradek.protocol import kio_util
from odradek.protocol.errors import ErrorCode

#: a fence no controller request passes (none is ever sent after authentication)
_FENCE = (1 << 30, 1 << 62)
_REFUSALS = ("Authentication failed", "Cannot change principals during re-authentication", "Unexpected SASL/")

# the model's states
INITIAL, AUTHENTICATE, RAW, AUTHENTICATED = "initial", "authenticate", "raw-tokens", "authenticated"
CLOSING, CLOSED, PARTIAL = "closing", "closed", "partial"


class NoAnswer(Exception):
    """Nothing came within the channel's wait, and the connection is still open."""


class Channel(Protocol):
    """One client connection to the SASL listener."""

    def send(self, data: bytes, cuts: Sequence[int]) -> None:
        """Write ``data`` (in pieces at ``cuts``); quietly nothing once the connection is closed."""

    def read(self, quiet: bool = False) -> bytes | None:
        """The next frame the broker wrote, None once it closed the connection; NoAnswer when
        nothing comes (``quiet``: a short wait, where nothing may come)."""

    def calls(self) -> list[tuple[int, str]]:
        """(API key, principal) of each request the connection handed to KafkaApis so far, where
        that can be seen (in-process); [] otherwise."""

    def close(self) -> None: ...


@dataclass
class Expectation:
    frame: bytes
    token: Token
    #: "answer", "close" (no answer, the connection closes), "raw" (a bare challenge or a close)
    kind: str
    response: tuple[int, int] | None = None  # (api key, version) an answer decodes as
    correlation_id: int = -1
    #: what an answer to a frame that must close the connection is: "auth-bypass" for requests
    #: other than the exchange's, "malformed-response" for the exchange's out of order
    if_answered: str = "malformed-response"
    why: str = ""
    #: the frame was cut from a write that ends in a size no peer may send: the broker may close
    #: before reading any of it
    droppable: bool = False
    mechanism: str = ""  # a handshake's


@dataclass
class Finding:
    category: str
    signature: str
    detail: str = ""


@dataclass
class Model:
    """What the connection's SASL state is, as far as the answers so far tell."""

    mechanisms: tuple[str, ...]
    reauth_ms: int
    max_receive_size: int
    max_request_size: int
    state: str = INITIAL
    mechanism: str | None = None  # the current exchange's
    session_mechanism: str | None = None  # the authenticated session's
    handshake_version: int = 1
    scram_stage: int = 0  # 0: the client-first is next, 1: the client-final
    principal: str | None = None
    reauthenticating: bool = False
    findings: list[Finding] = field(default_factory=list)
    answer_had_error: bool = False  # the last answer's (an error code, or a refused token)
    logins: int = 0
    reauthentications: int = 0
    refusals: int = 0

    @property
    def over(self) -> bool:
        return self.state in (CLOSING, CLOSED, PARTIAL)

    @property
    def max_frame(self) -> int:
        return self.max_request_size if self.state == AUTHENTICATED else self.max_receive_size

    def find(self, category: str, signature: str, detail: str = "") -> None:
        self.findings.append(Finding(category, signature, detail))

    # -- what a frame is owed ----------------------------------------------------------------------

    def expect(self, frame: bytes, token: Token) -> Expectation:
        if self.state == RAW:
            return Expectation(frame, token, "raw", why="a bare token")
        if len(frame) < 8:
            return Expectation(frame, token, "close", why="a frame shorter than a request header")
        api_key, version, correlation_id = struct.unpack_from(">hhi", frame, 0)
        exp = Expectation(frame, token, "close", correlation_id=correlation_id,
                          why=f"api {api_key} v{version} in state {self.state}")
        if self.state == AUTHENTICATED:
            if api_key == api_keys.SASL_HANDSHAKE and self.reauth_ms > 0:
                return self._handshake(exp, api_key, version)
            if api_key in (api_keys.SASL_HANDSHAKE, api_keys.SASL_AUTHENTICATE):
                if self._decodes(frame, api_key, version):
                    exp.kind, exp.response = "answer", (api_key, version)
                return exp
            owed = oracle.expect(frame, _FENCE)
            if owed.response is not None and not owed.silent:
                exp.kind, exp.response = "answer", owed.response
            return exp
        if api_key == api_keys.API_VERSIONS and self.state == INITIAL:
            owed = oracle.expect(frame, _FENCE)
            if owed.response is not None:
                exp.kind, exp.response = "answer", owed.response
            return exp
        if api_key == api_keys.SASL_HANDSHAKE and self.state == INITIAL:
            return self._handshake(exp, api_key, version)
        if api_key == api_keys.SASL_AUTHENTICATE and self.state == AUTHENTICATE:
            if self._decodes(frame, api_key, version):
                exp.kind, exp.response = "answer", (api_key, version)
            return exp
        if api_key not in (api_keys.API_VERSIONS, api_keys.SASL_HANDSHAKE, api_keys.SASL_AUTHENTICATE):
            exp.if_answered = "auth-bypass"
        return exp

    @staticmethod
    def _decodes(frame: bytes, api_key: int, version: int) -> Any:
        if not api_keys.supported(api_key, version):
            return None
        try:
            return kio_util.decode_request(frame)[1]
        except Exception:  # noqa: BLE001 - the authenticator closes on any decoding failure
            return None

    def _handshake(self, exp: Expectation, api_key: int, version: int) -> Expectation:
        request = self._decodes(exp.frame, api_key, version)
        if request is not None:
            exp.kind, exp.response, exp.mechanism = "answer", (api_key, version), str(request.mechanism).upper()
        return exp

    # -- what the broker did -------------------------------------------------------------------

    def observe(self, exp: Expectation, answer: bytes | None | NoAnswer) -> None:
        """``answer``: the frame the broker wrote next, None when it closed the connection,
        NoAnswer when it did neither."""
        self.answer_had_error = False
        if isinstance(answer, NoAnswer):
            if exp.kind == "close":
                self.find("hang", f"the connection stayed open after {exp.why}")
            else:
                self.find("hang", f"no answer to {exp.why}")
            self.state = CLOSED
            return
        if answer is None:
            self._closed(exp)
            return
        if exp.kind == "close":
            self.find(exp.if_answered, f"answered {exp.why}" + (" before authentication" if
                                                              exp.if_answered == "auth-bypass" else ""),
                      answer[:200].hex())
            self.state = CLOSED
            return
        if exp.kind == "raw":
            self._challenge(exp, answer, raw=True)
            return
        assert exp.response is not None
        owed = oracle.Expectation(exp.response[0], exp.response[1], exp.correlation_id, exp.response)
        verdict = oracle.check_response(owed, answer)
        if not verdict.ok:
            self.find("malformed-response", f"api {exp.response[0]} v{exp.response[1]}: {verdict.problem[:120]}",
                      answer[:200].hex())
            self.state = CLOSED
            return
        api_key, version = exp.response
        self.answer_had_error = verdict.has_error
        if api_key == api_keys.SASL_HANDSHAKE:
            self._handshake_answer(exp, version, answer)
        elif api_key == api_keys.SASL_AUTHENTICATE and self.state == AUTHENTICATED:
            self._illegal_state(answer, api_key, version)
        elif api_key == api_keys.SASL_AUTHENTICATE:
            self._challenge(exp, answer, raw=False)

    def _closed(self, exp: Expectation) -> None:
        state = self.state
        self.state = CLOSED
        if exp.kind == "close" or exp.droppable:
            return
        if exp.kind == "raw" or (exp.response and exp.response[0] == api_keys.SASL_AUTHENTICATE):
            self.refusals += 1
            if self._must_succeed(exp.token):
                what = "re-authentication" if self.reauthenticating else "login"
                self.find("login-refused", f"SASL/{self.mechanism}: a correct {what}'s token answered by closing "
                                           "the connection")
            elif exp.kind != "raw":
                self.find("hang", f"closed the connection instead of answering {exp.why}")
            return
        if exp.response and exp.response[0] == api_keys.SASL_HANDSHAKE and state == AUTHENTICATED:
            self.find("hang", f"closed the connection instead of answering a re-authentication's {exp.why}")
            return
        self.find("login-refused" if self._must_succeed(exp.token) else "hang",
                  f"closed the connection instead of answering {exp.why}")

    def _must_succeed(self, token: Token) -> bool:
        if token.claims is None:
            return False
        same = token.claims == self.principal and self.mechanism == self.session_mechanism
        return not self.reauthenticating or same

    def _handshake_answer(self, exp: Expectation, version: int, answer: bytes) -> None:
        _, body = kio_util.decode_response(api_keys.SASL_HANDSHAKE, version, answer)
        reauth = self.state == AUTHENTICATED
        offered = exp.mechanism in self.mechanisms and (not reauth or exp.mechanism == self.session_mechanism)
        code = int(body.error_code)
        if code != (ErrorCode.NONE if offered else ErrorCode.UNSUPPORTED_SASL_MECHANISM):
            self.find("malformed-response", f"SaslHandshake for {exp.mechanism!r}{' (re-authentication)' * reauth}: "
                                            f"error {code}")
            self.state = CLOSED
            return
        if list(body.mechanisms) != list(self.mechanisms):
            self.find("malformed-response", f"SaslHandshake offers {list(body.mechanisms)}, the listener "
                                            f"{list(self.mechanisms)}")
        if not offered:
            self.state = CLOSING
            return
        if reauth:
            self.reauthenticating = True
        self.mechanism, self.handshake_version, self.scram_stage = exp.mechanism, version, 0
        self.state = AUTHENTICATE if version >= 1 else RAW

    def _illegal_state(self, answer: bytes, api_key: int, version: int) -> None:
        _, body = kio_util.decode_response(api_key, version, answer)
        if int(body.error_code) != ErrorCode.ILLEGAL_SASL_STATE:
            self.find("malformed-response", f"api {api_key} v{version} after authentication: error "
                                            f"{int(body.error_code)}, not ILLEGAL_SASL_STATE")

    def _challenge(self, exp: Expectation, answer: bytes, raw: bool) -> None:
        """A token answered: a refusal, or the exchange's next step (or its end)."""
        lifetime_ms: int | None = None
        if not raw:
            assert exp.response is not None
            _, body = kio_util.decode_response(api_keys.SASL_AUTHENTICATE, exp.response[1], answer)
            if int(body.error_code) != ErrorCode.NONE:
                self._refused(exp, body)
                return
            if exp.response[1] >= 1:
                lifetime = body.session_lifetime  # a timedelta
                lifetime_ms = round(lifetime.total_seconds() * 1000)
        completes = self.mechanism == PLAIN or self.scram_stage == 1
        if not completes:
            self.scram_stage = 1
            return
        if not self._must_succeed(exp.token):
            how = "a re-authentication as " if self.reauthenticating else ""
            self.find("auth-bypass", f"SASL/{self.mechanism}: an exchange completed by {how}"
                                     f"{exp.token.claims or 'a made-up or spoiled token'}", exp.frame[:200].hex())
            self.state = CLOSED
            return
        if lifetime_ms is not None and lifetime_ms != self.reauth_ms:
            self.find("malformed-response", f"SaslAuthenticate v{exp.response[1] if exp.response else '?'}: "
                                            f"session lifetime {lifetime_ms} ms, not connections.max.reauth.ms "
                                            f"{self.reauth_ms}")
        if self.reauthenticating:
            self.reauthentications += 1
        else:
            self.logins += 1
        self.principal, self.session_mechanism = exp.token.claims, self.mechanism
        self.state, self.reauthenticating = AUTHENTICATED, False

    def _refused(self, exp: Expectation, body: Any) -> None:
        self.refusals += 1
        code, message = int(body.error_code), str(body.error_message or "")
        if code != ErrorCode.SASL_AUTHENTICATION_FAILED:
            self.find("malformed-response", f"SaslAuthenticate refused with error {code}, not "
                                            "SASL_AUTHENTICATION_FAILED")
        elif not message.startswith(_REFUSALS):
            self.find("malformed-response", f"SaslAuthenticate refused with a message of its own: {message[:100]!r}")
        if self._must_succeed(exp.token):
            what = "re-authentication" if self.reauthenticating else "login"
            self.find("login-refused", f"SASL/{self.mechanism}: a correct {what} refused: {message[:100]}")
        self.state = CLOSING


class Driver:
    """Plays cases on channels and files what the model finds in a Report."""

    def __init__(self, mechanisms: tuple[str, ...], reauth_ms: int, max_receive_size: int,
                 max_request_size: int, report: Report) -> None:
        self.mechanisms = mechanisms
        self.reauth_ms = reauth_ms
        self.max_receive_size = max_receive_size
        self.max_request_size = max_request_size
        self.report = report
        for category in ("auth-bypass", "login-refused"):
            report.outcomes[category] += 0  # shown in the summary even when none

    def model(self) -> Model:
        return Model(self.mechanisms, self.reauth_ms, self.max_receive_size, self.max_request_size)

    def play(self, case: Case, channel: Channel, probe: bool = True, count: bool = True) -> Model:
        """The case's steps, then (while the connection is open and whole) the Metadata probe."""
        model = self.model()
        notes = Notes()
        steps: list[Step] = list(case.steps)
        if probe:
            steps.append(Send(metadata(0x7EED)))
        written: list[bytes] = []
        frames_before = self.report.frames
        try:
            for step in steps:
                run = step(notes)
                try:
                    token = next(run)
                    while True:
                        written.append(token.data[:2000])
                        answer = self._send(model, channel, token)
                        if model.over:
                            break
                        token = run.send(answer)
                except StopIteration:
                    pass
                finally:
                    run.close()
                if model.over:
                    break
            if model.state == CLOSING:  # a refusal's answer came: the connection must close now
                self._expect_close(model, channel, Expectation(b"", Token(b""), "close", why="a refused exchange"))
        finally:
            channel.close()
        for problem in notes.problems:
            model.find("malformed-response", problem)
        self._file(case.kind, model, b"".join(written), self.report.frames - frames_before, count)
        return model

    def check_login(self, channel: Channel, mechanism: str, seed: int) -> Model:
        """A correct login and a Metadata request on a new connection: both must succeed."""
        login = Login(mechanism, "alice", "alice-secret", seed=seed)
        model = self.play(Case("login-check", (login,)), channel, count=False)
        if model.logins != 1 and not model.findings:
            self.report.find("login-refused", f"a correct SASL/{mechanism} login after fuzzing did not succeed", b"",
                             f"the connection ended in state {model.state}")
        return model

    def _send(self, model: Model, channel: Channel, token: Token) -> bytes | None:
        frames, ending = oracle.split_frames(token.data, model.max_frame)
        calls_before = len(channel.calls())
        principal_before = model.principal if model.state == AUTHENTICATED else None
        channel.send(token.data, token.cuts)
        self.report.frames += len(frames) + (ending != "whole")
        last: bytes | None = None
        for frame in frames:
            exp = model.expect(frame, token)
            exp.droppable = ending == "bad-size"
            answer = self._read(channel)
            model.observe(exp, answer)
            self._count(model, answer)
            if model.over:
                break
            last = answer if isinstance(answer, bytes) else None
        else:
            if ending == "bad-size":
                self._expect_close(model, channel, Expectation(token.data[:64], token, "close",
                                                               why="a size prefix over the limit"))
            elif ending == "partial":
                try:
                    extra = channel.read(quiet=True)
                except NoAnswer:
                    extra = b""
                if extra:
                    model.find("malformed-response", "an answer to a frame not yet complete", extra[:200].hex())
                self.report.outcomes["incomplete (waits for more bytes)"] += 1
                model.state = PARTIAL
        self._check_calls(model, channel.calls()[calls_before:], principal_before)
        return last

    def _read(self, channel: Channel) -> bytes | None | NoAnswer:
        try:
            return channel.read()
        except NoAnswer as exc:
            return exc

    def _expect_close(self, model: Model, channel: Channel, exp: Expectation) -> None:
        answer = self._read(channel)
        model.observe(exp, answer)
        self._count(model, answer)

    def _count(self, model: Model, answer: bytes | None | NoAnswer) -> None:
        if answer is None:
            self.report.outcomes["closed"] += 1
        elif isinstance(answer, bytes):
            self.report.outcomes["answered-with-error" if model.answer_had_error else "answered-without-error"] += 1

    @staticmethod
    def _check_calls(model: Model, calls: list[tuple[int, str]], principal_before: str | None) -> None:
        """In-process: every request KafkaApis saw (but ApiVersions) came from an authenticated
        connection, as the principal it had authenticated as."""
        principal_after = model.principal if model.state == AUTHENTICATED else None
        for api_key, principal in calls:
            if api_key == api_keys.API_VERSIONS:
                continue
            if principal == ANONYMOUS:
                model.find("auth-bypass", f"api {api_key} reached KafkaApis before authentication")
            elif principal not in (principal_before, principal_after):
                model.find("auth-bypass", f"api {api_key} served as {principal}, the session being "
                                          f"{principal_before or principal_after}")

    def _file(self, kind: str, model: Model, stream: bytes, frames: int, count: bool) -> None:
        report = self.report
        if count:
            report.cases += 1
            report.kinds[kind] += frames
        report.writes["logins"] += model.logins
        report.writes["re-authentications"] += model.reauthentications
        report.writes["tokens refused"] += model.refusals
        for finding in model.findings:
            report.find(finding.category, f"[{kind}] {finding.signature}", stream, finding.detail)


def login_mechanism(index: int) -> str:
    return MECHANISMS[index % len(MECHANISMS)]
