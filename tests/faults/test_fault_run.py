"""A short fault run (the long ones are `make faults`): real ZooKeeper, brokers and clients in a
network namespace of the run's own, four seeded faults, no anomaly allowed (ten took a minute of
`make test`; the 100-fault seeds run in `make faults`)."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces and iptables need root")]


def test_four_faults_leave_no_anomaly(tmp_path) -> None:
    run = subprocess.run([sys.executable, "-m", "odradek.faults", "--seed", "7", "--faults", "4",
                          "--data-dir", str(tmp_path / "run")],
                         capture_output=True, text=True, timeout=600)
    assert run.returncode in (0, 1), run.stderr[-3000:]
    report = json.loads(run.stdout)
    assert report["faults_total"] == 4
    assert report["writes_acknowledged"] > 1000
    assert report["anomalies"] == {k: 0 for k in report["anomalies"]}, json.dumps(report["examples"], indent=1)
    assert run.returncode == 0
