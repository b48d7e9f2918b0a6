"""The SASL exchange fuzzed over TCP against a live broker process with a SASL_PLAINTEXT listener:
each case on a new connection, judged by sasl_driver's model; after every ``login_every`` cases a
correct login on a new connection, each mechanism in turn, must succeed and be served.

The broker's own evidence is read too: its process must stay alive and its log must show no
traceback and no ERROR line. At the end no topic may exist (a CreateTopics, or anything else
that creates one, before authentication would be a bypass the answers did not show).

The broker (``broker_settings``): PLAINTEXT://{port} for the set-up (SCRAM users, the end's
topic list) and the cluster tooling, SASL://{port+1} offering PLAIN (sasl_cases.USERS in its JAAS
config), SCRAM-SHA-256 and SCRAM-SHA-512 (the same users, added with AlterUserScramCredentials),
with re-authentication (connections.max.reauth.ms) and Kafka's sasl.server.max.receive.size.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path

from odradek.admin.admin_client import metadata_request
from odradek.admin.user_scram_command import UserScramAdmin
from odradek.broker.listener_security import DEFAULT_MAX_RECEIVE
from odradek.fuzz import harness
from odradek.fuzz.report import Report
from odradek.fuzz.sasl_cases import MECHANISMS, USERS, SaslCaseMaker
from odradek.fuzz.sasl_driver import Driver, NoAnswer, login_mechanism
from odradek.fuzz.sasl_inprocess import PLAIN_MODULE, REAUTH_MS
from odradek.fuzz.tcp import _Peer
from odradek.security.client_security import ClientSecurity, connect_blocking
from odradek.security.sasl import SaslAuthenticationError

GRACE_S = 5.0  # for an answer, or for the connection to close
QUIET_S = 0.05  # how long a frame not yet complete is watched for an answer nobody asked for
LOGIN_CHECK_EVERY = 10
#: the broker's socket.request.max.bytes: the frame limit once authenticated
MAX_REQUEST_BYTES = 100 * 1024 * 1024


def broker_settings() -> dict[str, object]:
    """LocalCluster broker_args for the fuzzed broker (the SASL listener at {port+1})."""
    users = " ".join(f'user_{name}="{password}"' for name, password in USERS.items())
    return {"listeners": "PLAINTEXT://127.0.0.1:{port},SASL://127.0.0.1:{port+1}",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL:SASL_PLAINTEXT",
            "listener.name.sasl.sasl.enabled.mechanisms": ",".join(MECHANISMS),
            "listener.name.sasl.plain.sasl.jaas.config": f"{PLAIN_MODULE} required {users};",
            "listener.name.sasl.connections.max.reauth.ms": REAUTH_MS,
            "controlled_shutdown_enable": False}


class TcpChannel:
    def __init__(self, host: str, port: int) -> None:
        self.peer = _Peer(host, port)
        self.peer.connect()

    def send(self, data: bytes, cuts: Sequence[int]) -> None:
        bounds = (0, *cuts, len(data))
        try:
            for start, end in zip(bounds, bounds[1:]):
                if self.peer.sock is not None:
                    self.peer.sock.sendall(data[start:end])
        except OSError:  # closed by the broker already: what is read next says so
            pass

    def read(self, quiet: bool = False) -> bytes | None:
        if self.peer.sock is None:
            return None
        try:
            return self.peer.read_frame(QUIET_S if quiet else GRACE_S)
        except TimeoutError:
            raise NoAnswer() from None
        except OSError:
            return None

    def calls(self) -> list[tuple[int, str]]:
        return []

    def close(self) -> None:
        self.peer.drop()


def add_users(plaintext: str, sasl_host: str, sasl_port: int, timeout: float = 30) -> None:
    """USERS' SCRAM credentials for both mechanisms, then waits until the broker's credential
    cache has them (a login succeeds)."""
    admin = UserScramAdmin(plaintext, timeout)
    for mechanism in MECHANISMS[1:]:
        for user, password in USERS.items():
            admin.add(user, password, mechanism, 4096)
    deadline = time.monotonic() + timeout
    for mechanism in MECHANISMS:
        for user, password in USERS.items():
            while True:
                try:
                    connect_blocking(sasl_host, sasl_port, ClientSecurity("SASL_PLAINTEXT", None, mechanism, user,
                                                                          password), 10, "sasl-fuzz-setup").close()
                    break
                except SaslAuthenticationError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.05)


class _LogWatch:
    """The broker log's new lines that show a traceback or an error."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = path.stat().st_size if path.exists() else 0

    def new_problems(self) -> list[str]:
        if not self.path.exists():
            return []
        with open(self.path, "rb") as log:
            log.seek(self.offset)
            text = log.read().decode("utf-8", "replace")
        self.offset += len(text.encode("utf-8", "replace"))
        problems, lines = [], text.splitlines()
        for i, line in enumerate(lines):
            if line.startswith("Traceback") or " ERROR " in line or " CRITICAL " in line:
                problems.append("\n".join(lines[max(0, i - 1):i + 12]))
        return problems


def run(host: str, sasl_port: int, plaintext_port: int, broker_log: Path, broker_alive: Callable[[], bool],
        cases: int, stream_number: int, first_case: int = 0) -> Report:
    """``cases`` SASL fuzz cases against the broker's SASL listener at host:sasl_port."""
    started = time.perf_counter()
    report = Report()
    plaintext = f"{host}:{plaintext_port}"
    add_users(plaintext, host, sasl_port)
    watch = _LogWatch(broker_log)
    driver = Driver(MECHANISMS, REAUTH_MS, DEFAULT_MAX_RECEIVE, MAX_REQUEST_BYTES, report)
    maker = SaslCaseMaker(stream_number, DEFAULT_MAX_RECEIVE, harness.TOPOLOGY)
    for index in range(first_case, first_case + cases):
        case = maker.case(index)
        try:
            driver.play(case, TcpChannel(host, sasl_port))
            if index % LOGIN_CHECK_EVERY == 0:
                driver.check_login(TcpChannel(host, sasl_port), login_mechanism(index // LOGIN_CHECK_EVERY), index)
        except OSError as exc:  # a new connection refused: the listener is gone
            report.find("crash", "the broker refused a new connection", b"", f"after case {index} ({case.kind}): {exc!r}")
        for problem in watch.new_problems():
            report.find("crash", f"the broker logged: {problem.splitlines()[-1][:150]}", b"",
                        f"after case {index} ({case.kind}):\n{problem}")
        if not broker_alive():
            report.find("crash", "the broker process died", b"", f"after case {index} ({case.kind})")
            break
    if broker_alive():
        for mechanism in MECHANISMS:
            driver.check_login(TcpChannel(host, sasl_port), mechanism, -1)
        topics = sorted(t.name for t in metadata_request(plaintext, None, 10).topics)
        if topics:
            report.find("state-changed", "topics exist that no authenticated request created", b"", str(topics))
    report.seconds = time.perf_counter() - started
    return report
