"""A short run of the ordered fault workload (`python -m odradek.faults --workload ordered`):
real ZooKeeper, brokers, OrderedProducers and three OrderedConsumer member processes in a
network namespace of the run's own; under seed 1 the topic grows and shrinks while
partition leaders are killed with kill -9, and in the group's merged delivery order no key is reordered and nothing
acknowledged is missing (the 100-fault runs are in docs/reliability.md)."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces and iptables need root")]


def test_ordered_workload_keeps_every_key_in_order_through_topic_changes_and_kills(tmp_path) -> None:
    run = subprocess.run([sys.executable, "-m", "odradek.faults", "--workload", "ordered", "--seed", "1",
                          "--faults", "10", "--kinds",
                          "expand-topic,shrink-topic,kill-group-member,kill-leader-restart-soon",
                          "--data-dir", str(tmp_path / "run")],
                         capture_output=True, text=True, timeout=900)
    assert run.returncode in (0, 1), run.stderr[-3000:]
    report = json.loads(run.stdout)
    assert report["faults_total"] == 10
    assert report["writes_acknowledged"] > 1000
    changes = report["topic_changes"]
    assert changes["expanded"] >= 1 and changes["shrunk"] >= 1, report["fault_log"]
    assert report["deliveries"] >= report["writes_acknowledged"]
    assert report["anomalies"] == {k: 0 for k in report["anomalies"]}, json.dumps(report["examples"], indent=1)
    assert run.returncode == 0
