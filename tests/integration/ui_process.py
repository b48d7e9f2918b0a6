"""`odradek ui` as a process for the dashboard's tests: started on a port once it serves, its
/api/state read, and stopped as an operator's Ctrl-C stops it."""
from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest


def start_ui(where: list[str], port: int, log: Path, interval_s: float = 0.5) -> subprocess.Popen:
    """`odradek ui` reading the cluster ``where`` names (--data-dir, or --zookeeper and
    --bootstrap-server), once it serves; stop it with stop_ui."""
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "odradek", "ui", *where, "--port", str(port),
                                 "--interval-s", str(interval_s)],
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 20
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/state", timeout=2):
                return proc
        except (urllib.error.URLError, OSError):
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                pytest.fail(f"odradek ui did not serve on port {port}:\n{log.read_text()}")
            time.sleep(0.2)


def api_state(port: int) -> dict[str, Any]:
    """Every section of the dashboard on ``port`` (/api/state)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/state", timeout=5) as response:
        return json.loads(response.read())


def stop_ui(ui: subprocess.Popen, log: Path) -> None:
    """SIGTERM, as an operator's Ctrl-C: the dashboard must end cleanly."""
    ui.send_signal(signal.SIGTERM)
    try:
        ui.wait(10)
    except subprocess.TimeoutExpired:
        ui.kill()
        ui.wait()
    assert ui.returncode == 0, log.read_text()
