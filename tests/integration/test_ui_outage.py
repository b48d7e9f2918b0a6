"""`odradek ui --data-dir` in headless Chromium while its cluster goes down: a broker killed with
SIGKILL shows dead by its pid before its ZooKeeper session expires; a dashboard server that
stops sending turns the page's badge stale by itself; after `odradek down` the page shows the
stopped cluster (ZooKeeper unreachable, no live broker, every partition offline, the time the
grid was last read) instead of a green badge over the last view; after `odradek up` it is live
again. The JSON the page reads (/api/state) says the same, and nothing on the page is a Python
class name or errno text."""
from __future__ import annotations

import json
import os
import re
import signal
import time
from pathlib import Path

import pytest
from clients import create_topic
from ui_process import api_state, start_ui, stop_ui

from cli_helpers import run
from odradek.cluster.local_cluster import LocalCluster
from odradek.common.netutil import free_port, free_port_block

pytestmark = pytest.mark.integration

CHROMIUM = "/usr/bin/chromium"
TOPIC = "ui-outage"
INTERVAL_S = 1.0
#: what must never reach an operator: Python class names, errno text, a bare None, tracebacks
LEAKS = re.compile(r"\[Errno|\b[A-Z][A-Za-z]+(?:Error|Exception)\b|\bNone\b|Traceback")


@pytest.mark.slow  # 18 s: make test-long (make test keeps the dashboard following a killed leader, test_ui_browser)
def test_dashboard_shows_a_stopped_cluster_as_stopped(tmp_path: Path) -> None:
    if not os.access(CHROMIUM, os.X_OK):
        pytest.skip(f"{CHROMIUM} is missing: `make setup` installs Debian's chromium package (as root)")
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is a dev dependency (pip install -e '.[dev]')")
    data_dir = tmp_path / "cluster"
    # a private ZooKeeper, so `odradek down` stops it as it stops an operator's cluster
    cluster = LocalCluster(data_dir, 3, base_port=free_port_block(3), zk_port=free_port(),
                           broker_args={"zookeeper_session_timeout_ms": 4000})
    try:
        cluster.up(timeout=60)
        create_topic(cluster.bootstrap_servers, TOPIC, 3, 3)
        port, log = free_port(), tmp_path / "ui.log"
        ui = start_ui(["--data-dir", str(data_dir)], port, log, interval_s=INTERVAL_S)
        try:
            with sync_api.sync_playwright() as playwright:
                browser = playwright.chromium.launch(executable_path=CHROMIUM)
                page = browser.new_page(viewport={"width": 1400, "height": 1000})
                page.goto(f"http://127.0.0.1:{port}/")
                page.wait_for_selector("#connection[data-status='live']", timeout=30_000)
                page.wait_for_selector(f"tr[data-tp='{TOPIC}-2'][data-status='ok']", timeout=30_000)
                assert page.locator(".broker[data-live='true']").count() == 3
                assert "ok" in page.get_attribute("#connection", "class")

                # SIGKILL: the registration stays until the session expires, the pid is gone at once
                cluster.kill_broker(3)
                page.wait_for_selector(".broker[data-broker='3'][data-live='false']", timeout=20_000)
                assert "is not running: its process (pid" in page.inner_text(".broker[data-broker='3'] .reason")
                # the controller moves its leaderships once the session expires: settled before `down`
                page.wait_for_function("() => document.querySelector('#offline-count')?.textContent === '0 offline'",
                                       timeout=30_000)

                # a dashboard server that stops sending (its loop stuck, the process stopped): the
                # page itself turns the badge stale, the stream being open says nothing of freshness
                os.kill(ui.pid, signal.SIGSTOP)
                try:
                    page.wait_for_selector("#connection[data-status='stale']", timeout=20_000)
                    assert "no news from the dashboard server" in page.inner_text("#connection")
                finally:
                    os.kill(ui.pid, signal.SIGCONT)
                page.wait_for_selector("#connection[data-status='live']", timeout=20_000)

                down = run("down", "--data-dir", str(data_dir))
                assert down.returncode == 0, down.stderr
                stopped_at_ms = time.time() * 1000
                page.wait_for_selector("#connection[data-status='stopped']", timeout=20_000)
                badge = page.locator("#connection")
                assert "ok" not in badge.get_attribute("class") and "cluster stopped · last read" in badge.inner_text()
                assert int(badge.get_attribute("data-read-at")) <= stopped_at_ms  # the last read before the stop
                page.wait_for_function("() => document.querySelector('#offline-count')?.textContent === '3 offline'",
                                       timeout=10_000)
                assert "0/3 brokers live" in page.inner_text("#summary")
                assert page.locator(".broker[data-live='true']").count() == 0
                assert page.inner_text("#controller") == "controller: unknown"
                problems = page.inner_text("#problems")
                assert f"ZooKeeper at 127.0.0.1:{cluster.zk_port} does not answer" in problems
                for b in (1, 2):
                    assert f"broker {b} does not answer on 127.0.0.1:{cluster.broker_port(b)}" in problems
                state = api_state(port)  # what the page reads says the same
                assert state["health"]["status"] == "stopped" and state["health"]["stale"]
                assert state["cluster"]["summary"]["live_brokers"] == 0 and state["cluster"]["summary"]["offline"] == 3
                assert state["health"]["problems"][0] == f"ZooKeeper at 127.0.0.1:{cluster.zk_port} does not answer"
                text = page.inner_text("body")
                assert not LEAKS.search(text), text
                said = json.dumps([state["errors"], state["health"]["problems"], state["cluster"]["brokers"]])
                assert not LEAKS.search(said.replace("null", "")), said
                page.screenshot(path=str(tmp_path / "ui-stopped.png"), full_page=True)

                up = run("up", "--data-dir", str(data_dir), timeout=120)
                assert up.returncode == 0, up.stderr
                page.wait_for_selector("#connection[data-status='live']", timeout=30_000)
                page.wait_for_function("() => document.querySelectorAll(\".broker[data-live='true']\").length === 3",
                                       timeout=30_000)
                assert page.inner_text("#problems") == ""
                browser.close()
        finally:
            stop_ui(ui, log)
    finally:
        cluster.down()
