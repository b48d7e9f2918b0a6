"""The SASL fuzzer's short run (`make fuzz` has the long one): a few thousand exchanges in-process
and a few hundred over TCP to a live broker's SASL_PLAINTEXT listener, none of which may crash
the broker, be served before authenticating, or keep a correct login out. And the fuzzer itself
checked: bugs planted in the broker's exchange are found."""
from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pytest

from cluster_helpers import start_cluster
from odradek.broker import sasl_server_authenticator
from odradek.broker.sasl_server_authenticator import SaslServerAuthenticator
from odradek.fuzz import harness, sasl_cases, sasl_inprocess, sasl_tcp
from odradek.fuzz.report import FAILURES, Report
from odradek.security import plain, scram
from odradek.zk.server import ZooKeeperServer


def findings(report: Report) -> list[str]:
    return [f.line() for f in report.findings.values()]


def test_in_process_short_run(tmp_path: Path) -> None:
    report = sasl_inprocess.run(2000, 1, workdir=tmp_path)
    assert report.cases == 2000
    assert set(report.kinds) == set(sasl_cases.KINDS)
    # the run reached every part of the exchange: logins, re-authentications, refusals, closes
    assert report.writes["logins"] > 300 and report.writes["re-authentications"] > 20
    assert report.writes["tokens refused"] > 500
    assert report.outcomes["closed"] > 800 and report.outcomes["incomplete (waits for more bytes)"] > 20
    assert not findings(report), "\n".join(findings(report))


def test_in_process_run_is_deterministic(tmp_path: Path) -> None:
    a = sasl_inprocess.run(400, 7, workdir=tmp_path)
    b = sasl_inprocess.run(400, 7, workdir=tmp_path)
    assert (a.frames, a.kinds, a.outcomes, a.writes) == (b.frames, b.kinds, b.outcomes, b.writes)


@pytest.fixture
def fuzz(tmp_path: Path) -> Iterator[sasl_inprocess.SaslInProcessRun]:
    run = sasl_inprocess.SaslInProcessRun(tmp_path, 1)
    try:
        yield run
    finally:
        run.close()


def _requests_before_authentication(monkeypatch: pytest.MonkeyPatch, run: sasl_inprocess.SaslInProcessRun) -> None:
    """Requests other than the exchange's let through while no exchange has begun."""
    original = SaslServerAuthenticator.__call__

    def call(self: SaslServerAuthenticator, frame: memoryview, conn: object) -> object:
        if self._state == sasl_server_authenticator._INITIAL and len(frame) >= 8 and \
                int.from_bytes(frame[:2], "big") not in (17, 18, 36):
            return self._apis(frame, conn)  # type: ignore[arg-type]
        return original(self, frame, conn)  # type: ignore[arg-type]
    monkeypatch.setattr(SaslServerAuthenticator, "__call__", call)


def _any_plain_password(monkeypatch: pytest.MonkeyPatch, run: sasl_inprocess.SaslInProcessRun) -> None:
    monkeypatch.setattr(plain, "_same_password", lambda given, expected: expected is not None)


def _reauthentication_as_anyone(monkeypatch: pytest.MonkeyPatch, run: sasl_inprocess.SaslInProcessRun) -> None:
    original = SaslServerAuthenticator._evaluate

    def evaluate(self: SaslServerAuthenticator, token: bytes, conn: object) -> bytes:
        self._reauthenticating = False  # forgets the principal must stay the same
        return original(self, token, conn)  # type: ignore[arg-type]
    monkeypatch.setattr(SaslServerAuthenticator, "_evaluate", evaluate)


def _no_receive_limit(monkeypatch: pytest.MonkeyPatch, run: sasl_inprocess.SaslInProcessRun) -> None:
    """The listener reads frames of any size before authentication (the fuzzer still expects 512 KiB)."""
    run.security = dataclasses.replace(run.security, max_receive_size=1 << 30)


def _scram_final_fails(monkeypatch: pytest.MonkeyPatch, run: sasl_inprocess.SaslInProcessRun) -> None:
    def fails(self: object, response: bytes) -> bytes:
        raise RuntimeError("planted: the client-final message breaks the broker")
    monkeypatch.setattr(scram.ScramSaslServer, "_server_final_message", fails)


@pytest.mark.parametrize("plant, category, signature", [
    (_requests_before_authentication, "auth-bypass", "reached KafkaApis before authentication"),
    (_any_plain_password, "auth-bypass", "SASL/PLAIN: an exchange completed by a made-up or spoiled token"),
    (_reauthentication_as_anyone, "auth-bypass", "completed by a re-authentication as User:bob"),
    (_no_receive_limit, "hang", "the connection stayed open after a size prefix over the limit"),
    (_scram_final_fails, "crash", "RuntimeError: planted"),
], ids=["requests-before-authentication", "any-plain-password", "reauthentication-as-another-user",
        "no-receive-limit", "scram-final-fails"])
def test_a_planted_bug_is_found(monkeypatch: pytest.MonkeyPatch, fuzz: sasl_inprocess.SaslInProcessRun,
                                plant: object, category: str, signature: str) -> None:
    plant(monkeypatch, fuzz)  # type: ignore[operator]
    report = fuzz.run(0, 600)
    assert report.failures
    found = [f for f in report.findings.values() if f.category == category and signature in f.signature + f.detail]
    assert found, "\n".join(findings(report))


def test_tcp_sample(zookeeper: ZooKeeperServer, tmp_path: Path) -> None:
    cluster = start_cluster(zookeeper, tmp_path / "cluster", brokers=1, ports_per_broker=2,
                            **sasl_tcp.broker_settings())
    try:
        port = cluster.broker_port(1)
        report = sasl_tcp.run(cluster.host, port + 1, port, cluster.broker_dir(1) / "broker.log",
                              lambda: cluster.broker_pid(1) is not None, 400, 1)
    finally:
        cluster.down()
    assert report.cases == 400 and report.writes["logins"] > 50 and report.outcomes["closed"] > 100
    failures = [f.line() for f in report.findings.values() if f.category in FAILURES]
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("refused", ["another-mechanism", "another-user"])
def test_a_refused_re_authentication_behind_a_pending_answer_is_still_answered(
        fuzz: sasl_inprocess.SaslInProcessRun, refused: str) -> None:
    """A long-polling Fetch, then (pipelined) a re-authentication the broker refuses: the Fetch
    is answered when its wait ends, then the handshake (and the refused token), then the
    connection closes: every answer is written before the close."""
    t = harness.TOPOLOGY
    fetch = sasl_cases.request(1, 12, 77, {
        "replica_id": -1, "max_wait": 500, "min_bytes": 1 << 20, "isolation_level": 0, "session_id": 0,
        "session_epoch": -1, "forgotten_topics_data": [], "rack_id": "",
        "topics": [{"topic": t.guarded, "partitions": [{"partition": 0, "fetch_offset": 3, "current_leader_epoch": -1,
                                                        "log_start_offset": -1, "partition_max_bytes": 1 << 20}]}]})
    reauth = (sasl_cases.handshake("SCRAM-SHA-256", 1, 78) if refused == "another-mechanism" else
              sasl_cases.handshake("PLAIN", 1, 78) + sasl_cases.authenticate(b"\0bob\0bob-secret", 2, 79))
    case = sasl_cases.Case("pending", (sasl_cases.Login("PLAIN", seed=1), sasl_cases.Send(fetch + reauth)))
    with fuzz.clock.installed():
        model = fuzz.driver.play(case, fuzz.channel())
    assert model.logins == 1
    assert not model.findings, [(f.category, f.signature) for f in model.findings]
