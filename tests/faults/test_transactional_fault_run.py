"""A short run of the transactional fault workload (`python -m odradek.faults --workload
transactions`): real ZooKeeper, brokers, transactional producers, a consume-transform-produce
copier and read_committed / read_uncommitted readers in a network namespace of the run's own;
ten faults under seed 1, kills of the transaction coordinator and of partition leaders among
them. No aborted read, lost write, duplicate, torn transaction or reordering, and the control
reader saw aborted records (the check could have failed; the 100-fault runs are in
docs/reliability.md)."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces and iptables need root")]


def test_transactions_stay_atomic_through_coordinator_and_leader_kills(tmp_path) -> None:
    run = subprocess.run([sys.executable, "-m", "odradek.faults", "--workload", "transactions", "--seed", "1",
                          "--faults", "10", "--kinds",
                          "kill-transaction-coordinator,kill-leader-restart-soon,kill-controller-restart-late,"
                          "leader-cut-from-followers,delay-one-connection",
                          "--data-dir", str(tmp_path / "run")],
                         capture_output=True, text=True, timeout=900)
    assert run.returncode in (0, 1), run.stderr[-3000:]
    report = json.loads(run.stdout)
    assert report["faults_total"] == 10
    assert report["faults"].get("kill-transaction-coordinator", 0) >= 1, report["fault_log"]
    summary = json.dumps({k: report[k] for k in ("duration_s", "transactions", "anomalies", "examples",
                                                  "fault_log", "machine_stalls")}, indent=1)
    # librdkafka's own bugs (#5476, #5456, sequences reused after abort) have rows of their own, told from the run's
    # evidence (faults/librdkafka_bugs.py); every other row must be zero
    ours = {k: v for k, v in report["anomalies"].items() if not k.startswith("librdkafka_")}
    assert ours == {k: 0 for k in ours}, summary
    # enough of both outcomes that the check could have failed: a quiet machine commits about 95 and
    # aborts about 35 in this run's 56 s; a loaded one (make test's other worker) fewer
    assert report["transactions"]["committed"] > 30 and report["transactions"]["aborted"] > 10, summary
    assert report["records"]["aborted_records_seen_by_control"] > 0, summary
    if not report["anomalies"].get("librdkafka_send_offsets_stalls"):
        assert report["copier"]["copied_records"] > 1000, summary
    assert run.returncode == (1 if sum(report["anomalies"].values()) else 0)   # 1: the data dir is kept
