"""The `odradek` console script as an operator meets it: real subprocesses, no cluster needed.

What matters here is the contract of the command line itself: every command explains itself
with --help, and every mistake costs one readable line on stderr, never a traceback.
"""
from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from cli_helpers import assert_one_line_error, run
from odradek.common.netutil import free_port

COMMANDS = [
    [], ["broker"], ["up"], ["down"], ["status"], ["topics"], ["topics", "create"], ["topics", "list"],
    ["topics", "describe"], ["produce"], ["consume"], ["bench"], ["bench", "produce"],
    ["groups"], ["groups", "list"], ["groups", "describe"], ["groups", "reset-offsets"], ["groups", "delete"],
    ["groups", "delete-offsets"], ["log-dirs"], ["log-dirs", "describe"], ["configs", "describe"],
]


@pytest.fixture
def closed_port() -> str:
    """An address nothing listens on: connection refused, immediately."""
    return f"127.0.0.1:{free_port()}"


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c) or "odradek")
def test_every_command_has_help(command: list[str]) -> None:
    proc = run(*command, "--help")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"usage: odradek {' '.join(command)}".rstrip())


def test_python_dash_m_runs_the_same_cli() -> None:
    proc = subprocess.run([sys.executable, "-m", "odradek", "--help"], capture_output=True, text=True)
    assert proc.returncode == 0 and "topics" in proc.stdout


def test_no_command_is_a_one_line_usage_error() -> None:
    assert_one_line_error(run(), 2, "COMMAND")


def test_topics_create_without_a_topic_names_both_ways_to_give_it() -> None:
    assert_one_line_error(run("topics", "create", "--partitions", "1"), 2, "topics create", "NAME", "--topic")


@pytest.mark.parametrize("args, fragment", [
    (["topics", "create", "t", "--partitions", "0", "--replication-factor", "1"], "positive integer"),
    (["topics", "create", "t", "--partitions", "1", "--replication-factor", "1", "--config", "x"], "KEY=VALUE"),
    (["produce", "t", "--acks", "2"], "invalid choice"),
    (["up", "--brokers", "3"], "--data-dir"),
    (["broker", "--listen", "nohost"], "HOST:PORT"),
    (["status", "--zookeeper", "z:1", "--data-dir", "d"], "not allowed with"),
    (["bench", "produce", "--acks", "0"], "invalid choice"),
    (["groups", "reset-offsets", "g", "--topic", "t"], "one of the arguments --to-earliest"),
    (["groups", "reset-offsets", "g", "--topic", "t", "--to-earliest", "--to-latest"], "not allowed with"),
    (["groups", "reset-offsets", "g", "--topic", "t", "--to-offset", "-1"], "0 or more"),
    (["groups", "reset-offsets", "g", "--topic", "t:a", "--to-latest"], "TOPIC:P"),
])
def test_bad_arguments_are_one_line(args: list[str], fragment: str) -> None:
    assert_one_line_error(run(*args), 2, fragment)


def test_broker_without_required_settings() -> None:
    assert_one_line_error(run("broker", "--id", "1"), 1, "--listen", "--zookeeper", "--data-dir")


def test_broker_with_unreadable_config(tmp_path: Path) -> None:
    bad = tmp_path / "server.properties"
    bad.write_text("no.such.setting=1\n")
    assert_one_line_error(run("broker", "--config", str(bad)), 1, "no.such.setting")


def test_down_without_a_cluster(tmp_path: Path) -> None:
    assert_one_line_error(run("down", "--data-dir", str(tmp_path)), 1, "no cluster in", "odradek up")


def test_status_of_a_missing_data_dir(tmp_path: Path) -> None:
    assert_one_line_error(run("status", "--data-dir", str(tmp_path / "nothing")), 1, "no cluster in")


def test_status_against_a_closed_zookeeper_port(closed_port: str) -> None:
    # refused outright: said so, instead of kazoo's "Connection time-out" after --timeout-s
    assert_one_line_error(run("status", "--zookeeper", closed_port), 1, f"nothing listens on {closed_port}")


def test_consume_against_a_closed_port_times_out_clearly(closed_port: str) -> None:
    start = time.monotonic()
    proc = run("consume", "t", "--bootstrap-server", closed_port, "--timeout-s", "1")
    assert_one_line_error(proc, 1, "cannot reach", closed_port)
    assert time.monotonic() - start < 15


@pytest.mark.parametrize("command", [
    ["produce", "t"], ["topics", "list"], ["topics", "describe"], ["topics", "describe", "t", "--json"],
    ["groups", "list"], ["groups", "describe", "g"], ["groups", "delete", "g"],
    ["groups", "reset-offsets", "g", "--topic", "t", "--to-latest"],
])
def test_client_commands_against_a_closed_port(command: list[str], closed_port: str) -> None:
    args = [*command, "--bootstrap-server", closed_port]
    if command[0] in ("produce", "groups"):
        args += ["--timeout-s", "1"]
    assert_one_line_error(run(*args, stdin="a\n"), 1, "cannot reach", closed_port)
