"""The dashboard's consumer-group reader survives its child process (kafka_reader.GroupReader):
a child that aborts, as librdkafka's assertions abort, or that stops answering becomes an
AdminError naming how it ended (also when it died between two reads), and the next read starts
a new child. The fake children speak the real protocol (one JSON line each way), so no cluster
is needed."""
from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import pytest

from odradek.admin.errors import AdminError
from odradek.ui.kafka_reader import GroupReader

#: answers each request by its bootstrap: "ok" a group, "abort" librdkafka's way out, "hang" never
FAKE_CHILD = r"""
import json, os, sys, time
for line in sys.stdin:
    bootstrap = json.loads(line)["bootstrap"]
    if bootstrap == "abort":
        sys.stderr.write("python: rdkafka_queue.h:1052: rd_kafka_enq_once_del_source_return: "
                         "Assertion `eonce->refcnt > 0' failed.\n")
        sys.stderr.flush()
        os.abort()
    if bootstrap == "hang":
        time.sleep(60)
    if bootstrap == "refused":
        print(json.dumps({"error": "ListGroups: _TRANSPORT: connection refused"}), flush=True)
        continue
    print(json.dumps({"groups": [{"group": "g", "pid": os.getpid()}]}), flush=True)
"""


@pytest.fixture
def reader(tmp_path: Path):
    script = tmp_path / "child.py"
    script.write_text(FAKE_CHILD)
    r = GroupReader([sys.executable, str(script)], grace_s=1.0)
    yield r
    r.close()


def test_an_aborted_child_is_reported_and_replaced(reader: GroupReader) -> None:
    first = reader.read("ok", 1.0)[0]["pid"]
    assert reader.read("ok", 1.0)[0]["pid"] == first  # one long-lived child
    with pytest.raises(AdminError, match=r"ended by SIGABRT: .*rd_kafka_enq_once_del_source_return.*new one starts"):
        reader.read("abort", 1.0)
    second = reader.read("ok", 1.0)[0]["pid"]
    assert second != first
    os.kill(second, signal.SIGKILL)  # between two reads: the next one reports it
    with pytest.raises(AdminError, match="ended by SIGKILL"):
        reader.read("ok", 1.0)
    assert reader.read("ok", 1.0)[0]["pid"] != second
    with pytest.raises(AdminError, match="^ListGroups: _TRANSPORT"):  # the cluster's errors pass through
        reader.read("refused", 1.0)


def test_a_silent_child_is_killed_and_replaced(reader: GroupReader) -> None:
    first = reader.read("ok", 0.1)[0]["pid"]
    with pytest.raises(AdminError, match="killed: no answer"):
        reader.read("hang", 0.1)  # budget 0.3 s + grace 1 s
    assert reader.read("ok", 0.1)[0]["pid"] != first
