"""The fuzzer's short run: 20,000 frames in-process, Hypothesis-built requests for every API and
version, and 500 frames over TCP to a live broker. Any crash, hang, malformed answer or changed
data fails."""
from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cluster_helpers import start_cluster
from odradek.broker import api_keys
from odradek.fuzz import harness, inprocess, mutate, structured, tcp
from odradek.fuzz.report import FAILURES, Report
from odradek.zk.server import ZooKeeperServer


def unexpected(report: Report) -> list[str]:
    return [f.line() for f in report.findings.values()]


def test_in_process_short_run(tmp_path: Path) -> None:
    report = inprocess.run(20_000, 1, workdir=tmp_path)
    assert report.frames >= 20_000
    assert set(report.kinds) == set(mutate.KINDS)
    # the run reached handlers, not just the decoder: answers of both kinds, and appends
    assert report.outcomes["answered-with-error"] > 1000
    assert report.outcomes["answered-without-error"] > 1000
    assert report.outcomes["closed"] > 1000
    assert report.writes["sink appends"] > 100
    assert not unexpected(report), "\n".join(unexpected(report))


def test_in_process_run_is_deterministic(tmp_path: Path) -> None:
    a = inprocess.run(2000, 7, workdir=tmp_path)
    b = inprocess.run(2000, 7, workdir=tmp_path)
    assert (a.frames, a.kinds, a.outcomes) == (b.frames, b.kinds, b.outcomes)


@pytest.fixture(scope="module")
def fuzz_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[inprocess.InProcessRun]:
    run = inprocess.InProcessRun(tmp_path_factory.mktemp("fuzz"), 1)
    try:
        with run.clock.installed():
            yield run
    finally:
        run.close()


def test_a_failed_handler_leaves_the_requests_pipelined_behind_it_answered(
        fuzz_run: inprocess.InProcessRun) -> None:
    """ListGroups failing at once and DescribeGroups failing later, pipelined with ApiVersions
    and Metadata: four answers in order, the failed two UNKNOWN_SERVER_ERROR, and each failure
    still known to the fuzzer as a crash (it is a bug the client only sees as an error code)."""
    findings_before = dict(fuzz_run.report.findings)
    dispatched = fuzz_run.check_failure_isolation()
    assert [d.outcome for d in dispatched] == ["answered"] * 4
    assert [d.verdict.has_error if d.verdict else None for d in dispatched] == [True, False, True, False]
    assert [d.failure is not None and "planted" in d.failure for d in dispatched] == [True, False, True, False]
    assert fuzz_run.report.findings == findings_before


API_VERSIONS = [(k, v) for k, (lo, hi) in sorted(api_keys.VERSIONS.items()) for v in range(lo, hi + 1)]


@settings(max_examples=300, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data(), api_version=st.sampled_from(API_VERSIONS))
def test_well_formed_requests_with_adversarial_values(fuzz_run: inprocess.InProcessRun, data: st.DataObject,
                                                      api_version: tuple[int, int]) -> None:
    """Every API and version, values from Hypothesis (shrinks to a minimal failing request)."""
    payload = structured.request(structured.HypothesisChoices(data), harness.TOPOLOGY, *api_version)
    before = {key: f.count for key, f in fuzz_run.report.findings.items()}
    dispatched = fuzz_run.run_case(len(payload).to_bytes(4, "big") + payload)
    assert len(dispatched) == 1 and dispatched[0].exp.response is not None  # well-formed: a request
    new = [f for key, f in fuzz_run.report.findings.items()
           if f.count > before.get(key, 0)]
    assert not new, "\n".join(f.line() for f in new)


def test_tcp_sample(zookeeper: ZooKeeperServer, tmp_path: Path) -> None:
    cluster = start_cluster(zookeeper, tmp_path / "cluster", brokers=1, controlled_shutdown_enable=False)
    try:
        report = tcp.run(cluster.host, cluster.broker_port(1), cluster.zookeeper_connect, cluster.broker_dir(1),
                         lambda: cluster.broker_pid(1) is not None, 500, 1)
    finally:
        cluster.down()
    assert report.frames >= 500
    assert report.outcomes["answered-with-error"] > 20 and report.outcomes["closed"] > 100
    failures = [f.line() for f in report.findings.values() if f.category in FAILURES]
    assert not failures, "\n".join(failures)
