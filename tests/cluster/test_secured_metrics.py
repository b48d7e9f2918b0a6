"""The metrics endpoints and the dashboard of an `odradek up --secure` cluster, driven only through
the command line and read as an operator's scraper and browser read them: HTTPS with the cluster's
CA, and an HTTP Basic login of a SCRAM user of the cluster who may DESCRIBE it (the admin, a super
user; any other user once an ACL allows it). Nothing is served to anyone else, and nothing over
plain HTTP."""
from __future__ import annotations

import base64
import http.client
import json
import signal
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from cli_helpers import run
from odradek.common.netutil import free_port, free_port_block
from odradek.zk.server import check_installed

pytestmark = pytest.mark.integration


def basic(user: str, password: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


def get(url: str, context: ssl.SSLContext | None, headers: dict[str, str] | None = None) -> tuple[int, Any, bytes]:
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=10, context=context) as response:
            return response.status, response.headers, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers, exc.read()


def until(what: str, probe: Any, timeout: float = 15.0) -> Any:
    """``probe()`` until it returns something true; its last value, or the test fails."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"{what}: not within {timeout} s")
        time.sleep(0.2)


def plain_http_fails(url: str) -> bool:
    try:
        urllib.request.urlopen(url.replace("https://", "http://"), timeout=5)
    except (urllib.error.URLError, http.client.HTTPException, ConnectionError):
        return True
    return False


def test_a_secured_clusters_metrics_and_dashboard_serve_only_its_allowed_users_over_https(tmp_path: Path) -> None:
    check_installed()
    data_dir = tmp_path / "secure"
    base, metrics_base, zk_port = free_port_block(2), free_port_block(2), free_port()
    up = run("up", "--brokers", "2", "--data-dir", str(data_dir), "--secure", "--base-port", str(base),
             "--metrics-base-port", str(metrics_base), "--zk-port", str(zk_port), timeout=120)
    ui: subprocess.Popen[bytes] | None = None
    ui_log = tmp_path / "ui.log"
    try:
        assert up.returncode == 0, up.stderr
        settings = dict(line.split("=", 1) for line in
                        (data_dir / "security" / "admin.properties").read_text().splitlines() if line)
        admin = basic("admin", settings["sasl.password"])
        ca = ssl.create_default_context(cafile=settings["ssl.ca.location"])

        # each broker registers an https URL, which `up` prints and `status` shows
        status = run("status", "--data-dir", str(data_dir), "--json")
        assert status.returncode == 0, status.stderr
        urls = {b["id"]: b["metrics_url"] for b in json.loads(status.stdout)["brokers"]}
        assert urls == {b: f"https://127.0.0.1:{metrics_base + b - 1}/metrics" for b in (1, 2)}
        assert f"metrics {urls[1]}" in up.stdout
        url = urls[1]

        # no login, a malformed or wrong one: 401, asking for Basic; nothing of the metrics
        for headers in ({}, {"Authorization": "Basic !!"}, basic("admin", "wrong"), basic("nobody", "x")):
            code, answer_headers, body = get(url, ca, headers)
            assert code == 401 and answer_headers["WWW-Authenticate"] == 'Basic realm="odradek"', headers
            assert b"kafka_" not in body
        assert get(url.replace("/metrics", "/state-change-log"), ca)[0] == 401

        # a user of the cluster without an ACL: a valid login, not allowed
        assert run("users", "add", "bob", "--password", "bob-secret", "--data-dir", str(data_dir)).returncode == 0
        bob = basic("bob", "bob-secret")
        until("bob's credential reaches broker 1", lambda: get(url, ca, bob)[0] == 403)

        # the admin (a super user) gets the metrics, of both brokers
        for broker_url in urls.values():
            code, _, body = get(broker_url, ca, admin)
            assert code == 200 and b"kafka_server_replicamanager_partitioncount" in body
        assert get(url.replace("/metrics", "/state-change-log"), ca, admin)[0] == 200

        # plain HTTP to the metrics port gets nothing
        assert plain_http_fails(url)

        # the dashboard of the data dir: HTTPS with the brokers' certificate, the cluster's logins
        port = free_port()
        with open(ui_log, "wb") as out:
            ui = subprocess.Popen([sys.executable, "-m", "odradek", "ui", "--data-dir", str(data_dir),
                                   "--port", str(port), "--interval-s", "0.5"],
                                  stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        dashboard = f"https://127.0.0.1:{port}"

        def serving() -> bool:
            assert ui is not None and ui.poll() is None, ui_log.read_text()
            try:
                return get(f"{dashboard}/api/state", ca)[0] == 401
            except (urllib.error.URLError, OSError):
                return False

        until("the dashboard serves", serving, 20)
        code, answer_headers, _ = get(f"{dashboard}/", ca)
        assert code == 401 and answer_headers["WWW-Authenticate"] == 'Basic realm="odradek"'
        assert get(f"{dashboard}/api/state", ca, basic("admin", "wrong"))[0] == 401
        assert get(f"{dashboard}/api/state", ca, bob)[0] == 403  # may not DESCRIBE the cluster
        assert plain_http_fails(f"{dashboard}/api/state")
        code, _, page = get(f"{dashboard}/", ca, admin)
        assert code == 200 and b"<html" in page.lower()

        def charted() -> dict[str, Any] | None:
            code, _, body = get(f"{dashboard}/api/state", ca, admin)
            assert code == 200
            state = json.loads(body)
            live = sorted(b["id"] for b in state["cluster"]["brokers"] if b["live"])
            points = {b for b, p in state["metrics"]["brokers"].items() if p}
            return state if live == [1, 2] and points == {"1", "2"} else None

        state = until("the dashboard shows both brokers and their scraped metrics", charted, 20)
        assert "metrics" not in state["errors"], state["errors"]
        assert state["metrics"]["urls"] == {"1": urls[1], "2": urls[2]}

        # an ACL allowing bob to DESCRIBE the cluster opens the metrics to him
        assert run("acls", "add", "--allow-principal", "User:bob", "--operation", "Describe", "--cluster",
                   "--data-dir", str(data_dir)).returncode == 0
        until("bob's ACL reaches broker 1", lambda: get(url, ca, bob)[0] == 200)
    finally:
        if ui is not None and ui.poll() is None:
            ui.send_signal(signal.SIGTERM)
            try:
                ui.wait(10)
            except subprocess.TimeoutExpired:
                ui.kill()
                ui.wait()
        run("down", "--data-dir", str(data_dir))
