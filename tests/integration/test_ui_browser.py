"""`odradek ui` in headless Chromium against a real 3-broker cluster: a killed broker shows dead,
a partition it led shows its new leader, and the timeline shows the election, without a reload
(the page follows the server-sent events)."""
from __future__ import annotations

import os
from pathlib import Path

import pytest
from clients import create_topic
from ui_process import start_ui, stop_ui

from cluster_helpers import SHORT_SESSION_TIMEOUT_MS
from odradek.common.netutil import free_port

pytestmark = pytest.mark.integration

CHROMIUM = "/usr/bin/chromium"
TOPIC = "ui-grid"


def test_dashboard_follows_a_killed_leader(cluster_factory, tmp_path: Path) -> None:
    if not os.access(CHROMIUM, os.X_OK):
        pytest.skip(f"{CHROMIUM} is missing: `make setup` installs Debian's chromium package (as root)")
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is a dev dependency (pip install -e '.[dev]')")
    cluster = cluster_factory(3, zookeeper_session_timeout_ms=SHORT_SESSION_TIMEOUT_MS)
    create_topic(cluster.bootstrap_servers, TOPIC, 3, 3)
    port = free_port()
    ui = start_ui(["--data-dir", str(cluster.data_dir)], port, tmp_path / "ui.log")
    try:
        with sync_api.sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM)
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.goto(f"http://127.0.0.1:{port}/")
            page.wait_for_selector(f"tr[data-tp='{TOPIC}-2']")
            leaders = {p: int(page.get_attribute(f"tr[data-tp='{TOPIC}-{p}']", "data-leader")) for p in range(3)}
            controller = int(page.get_attribute("#controller", "data-controller"))
            # a leader that is not the controller: its partitions move once its session expires
            partition, victim = next((p, b) for p, b in sorted(leaders.items()) if b != controller)
            assert page.get_attribute(f".broker[data-broker='{victim}']", "data-live") == "true"
            assert {page.get_attribute(f"tr[data-tp='{TOPIC}-{p}']", "data-status") for p in range(3)} == {"ok"}

            cluster.kill_broker(victim)
            page.wait_for_selector(f".broker[data-broker='{victim}'][data-live='false']", timeout=20_000)
            row = f"tr[data-tp='{TOPIC}-{partition}']"
            page.wait_for_function(
                "([row, victim]) => { const r = document.querySelector(row);"
                " return r && !['-1', String(victim)].includes(r.dataset.leader); }",
                arg=[row, victim], timeout=20_000)
            new_leader = int(page.get_attribute(row, "data-leader"))
            assert new_leader in set(range(1, 4)) - {victim}
            # two of three replicas left in the ISR
            page.wait_for_selector(f"{row}[data-status='under_replicated']", timeout=20_000)
            # the controller's state-change log has the election of that partition
            page.wait_for_function(
                "text => [...document.querySelectorAll('#timeline .ev.election')].some(e => e.textContent.includes(text))",
                arg=f"elected leader {new_leader} of {TOPIC}-{partition}", timeout=10_000)
            page.screenshot(path=str(tmp_path / "ui.png"), full_page=True)
            browser.close()
    finally:
        stop_ui(ui, tmp_path / "ui.log")
