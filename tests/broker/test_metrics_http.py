"""The broker's HTTP endpoint (broker/http_endpoints.py): Prometheus text on /metrics, the state-change
log's tail on /state-change-log in bounded chunks of complete lines, and bad requests answered
with an HTTP error while the server keeps serving."""
from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from odradek.broker import api_keys
from odradek.broker.metrics import BrokerMetrics
from odradek.broker.state_change_log_reader import read_log_chunk


@pytest.fixture
def endpoint(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    metrics = BrokerMetrics()
    metrics.request_done(api_keys.METADATA, 12, 0.0)
    log = tmp_path / "state-change.log"
    server = metrics.serve("127.0.0.1", 0, log)
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", log
    finally:
        server.shutdown()
        server.server_close()


def _get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def test_metrics_route_serves_prometheus_text(endpoint: tuple[str, Path]) -> None:
    base, _ = endpoint
    status, body = _get(base + "/metrics")
    assert status == 200 and b'kafka_network_requestmetrics_requests_total{request="Metadata",version="12"} 1.0' in body


def test_state_change_log_route_serves_complete_lines_in_bounded_chunks(endpoint: tuple[str, Path]) -> None:
    base, log = endpoint
    assert json.loads(_get(base + "/state-change-log")[1]) == {"start": 0, "next_offset": 0, "size": 0, "lines": []}

    log.write_text('{"a":1}\n{"b":2}\n{"c":')  # the last line is still being written
    first = json.loads(_get(base + "/state-change-log?offset=0")[1])
    assert first["lines"] == ['{"a":1}', '{"b":2}'] and first["next_offset"] == 16
    assert json.loads(_get(base + "/state-change-log?offset=16")[1])["lines"] == []
    with open(log, "a") as f:
        f.write("3}\n")
    assert json.loads(_get(base + "/state-change-log?offset=16")[1])["lines"] == ['{"c":3}']
    small = json.loads(_get(base + "/state-change-log?offset=0&max_bytes=10")[1])
    assert small["lines"] == ['{"a":1}'] and small["next_offset"] == 8  # bounded, whole lines only


def test_a_bad_request_gets_an_http_error_and_the_server_keeps_serving(endpoint: tuple[str, Path]) -> None:
    base, _ = endpoint
    for bad, code in (("/state-change-log?offset=x", 400), ("/state-change-log?max_bytes=", 400), ("/nothing", 404)):
        assert _get(base + bad)[0] == code
    assert _get(base + "/metrics")[0] == 200  # still serving


def test_read_log_chunk_tail_and_replaced_log(tmp_path: Path) -> None:
    log = tmp_path / "l"
    log.write_text("".join(f"line {i}\n" for i in range(100)))
    tail = read_log_chunk(log, None, 30)
    assert tail.lines == ["line 97", "line 98", "line 99"]  # the first, cut, line dropped
    assert tail.next_offset == tail.size == log.stat().st_size
    log.write_text("new\n")  # a new, shorter log: read from its start
    assert read_log_chunk(log, tail.next_offset, 30).lines == ["new"]
    log.write_text("x" * 50 + "\nafter\n")  # a line longer than a chunk is skipped, not waited on
    skipped = read_log_chunk(log, 0, 20)
    assert skipped.lines == [] and skipped.next_offset == 20
    assert read_log_chunk(log, None, 20).lines == ["after"]
    assert read_log_chunk(tmp_path / "missing", 0, 20).lines == []
