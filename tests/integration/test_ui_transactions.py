"""The dashboard's transactions section on a real cluster: a confluent-kafka transactional
producer's open transaction shows in /api/state with its state, producer id and epoch,
coordinator and partitions, those partitions' last stable offset lag (from the brokers'
/metrics) held by it, and, where Chromium is installed, the page marks them; after the commit
the id shows CompleteCommit and no partition lags."""
from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from clients import create_topic
from confluent_kafka import Producer
from ui_process import api_state, metrics_cluster, start_ui, stop_ui

from odradek.admin.transactions_command import TransactionsAdmin
from odradek.cluster.local_cluster import LocalCluster
from odradek.common.netutil import free_port
from odradek.zk.server import ZooKeeperServer

pytestmark = pytest.mark.integration

TOPIC = "ui-txn"
TXN_ID = "ui-txn-producer"
CHROMIUM = "/usr/bin/chromium"


@pytest.fixture(scope="module")
def cluster(zookeeper: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """The shared fixture's 3-broker cluster (conftest.py), with metrics ports: the last stable
    offset lags come from the brokers' scrapes."""
    with metrics_cluster(zookeeper, tmp_path_factory.mktemp("cluster"), "ui-txn") as c:
        yield c


def wait_for_row(port: int, ui: Any, log: Path, done: Any, what: str, timeout_s: float = 15.0) -> dict[str, Any]:
    """The transactions section once ``done(section, our row)`` holds."""
    deadline, section = time.monotonic() + timeout_s, {}
    while True:
        section = api_state(port).get("transactions", {})
        row = next((t for t in section.get("transactions", []) if t["transactional_id"] == TXN_ID), None)
        if row is not None and done(section, row):
            return section
        assert ui.poll() is None and time.monotonic() < deadline, \
            f"the dashboard never showed {what}: {json.dumps(section)[:3000]}\n{log.read_text()[-2000:]}"
        time.sleep(0.3)


def page_marks_the_lagging_partitions(port: int) -> None:
    """The page's row of the transaction, its partitions in the warning style (skipped without
    Chromium or playwright, as test_ui_browser.py is)."""
    if not os.access(CHROMIUM, os.X_OK):
        return
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        return
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM)
        try:
            page = browser.new_page()
            page.goto(f"http://127.0.0.1:{port}/")
            row = f"#transactions tr[data-txn='{TXN_ID}'][data-state='Ongoing']"
            page.wait_for_selector(row, timeout=5000)
            for p in (0, 1):
                page.wait_for_selector(f"{row} span.tp.lso-lag[data-tp='{TOPIC}-{p}'][data-lso-lag='3']", timeout=5000)
        finally:
            browser.close()


@pytest.mark.slow  # a cluster of its own with metrics ports: make test-long; tests/ui/test_ui_txn_view.py in make test
def test_an_open_transaction_and_its_commit_in_the_dashboard(cluster: LocalCluster, tmp_path: Path) -> None:
    bootstrap = cluster.bootstrap_servers
    create_topic(bootstrap, TOPIC, 3, 3)
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": TXN_ID,
                         "transaction.timeout.ms": 45000})
    producer.init_transactions(30)
    port, log = free_port(), tmp_path / "ui.log"
    ui = start_ui(["--data-dir", str(cluster.data_dir)], port, log)
    try:
        producer.begin_transaction()
        for i in range(6):
            producer.produce(TOPIC, b"v%d" % i, partition=i % 2)
        assert producer.flush(10) == 0
        ours = {f"{TOPIC}-0", f"{TOPIC}-1"}

        def open_and_lagging(section: dict[str, Any], row: dict[str, Any]) -> bool:
            return row["state"] == "Ongoing" and all(p["lso_lag"] for p in row["partitions"]) \
                and {p["name"] for p in row["partitions"]} == ours
        section = wait_for_row(port, ui, log, open_and_lagging, "the open transaction with its partitions lagging")
        row = next(t for t in section["transactions"] if t["transactional_id"] == TXN_ID)
        described = TransactionsAdmin(bootstrap, 5).describe(TXN_ID)  # what `odradek transactions describe` says
        assert (row["coordinator"], row["producer_id"], row["producer_epoch"], row["timeout_ms"]) == \
            (described["coordinator"], described["producer_id"], described["producer_epoch"], 45000)
        assert row["open"] and not row["overdue"] and row["error"] is None and 0 <= row["open_s"] < 30
        assert {p["name"]: p["lso_lag"] for p in row["partitions"]} == {f"{TOPIC}-0": 3, f"{TOPIC}-1": 3}
        assert {p["name"]: p["held_by"] for p in section["lagging"] if p["topic"] == TOPIC} == \
            {name: [TXN_ID] for name in ours}
        assert section["lso_known"] and section["problems"] == []
        page_marks_the_lagging_partitions(port)

        producer.commit_transaction(10)
        section = wait_for_row(port, ui, log, lambda s, r: r["state"] == "CompleteCommit"
                               and not any(p["topic"] == TOPIC for p in s["lagging"]), "the committed transaction")
        row = next(t for t in section["transactions"] if t["transactional_id"] == TXN_ID)
        assert not row["open"] and row["open_s"] is None and row["partitions"] == []
        assert section["problems"] == [] and "transactions" not in api_state(port)["errors"]
    finally:
        stop_ui(ui, log)
