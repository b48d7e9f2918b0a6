"""`odradek groups` refuses a malformed command line in one `odradek: error:` line before it
talks to any broker (nothing listens on the address given): the group named twice over or not
at all, --all-groups beside named groups, reset-offsets without its partitions, a
--by-duration that is no ISO 8601 duration, a --from-file that cannot be read."""
from __future__ import annotations

from pathlib import Path

import pytest

from cli_helpers import assert_one_line_error, run
from odradek.common.netutil import free_port


@pytest.fixture(scope="module")
def closed() -> list[str]:
    return ["--bootstrap-server", f"127.0.0.1:{free_port()}", "--timeout-s", "1"]


@pytest.mark.parametrize("args, status, fragments", [
    (["describe"], 2, ["name a consumer group (or --all-groups)"]),
    (["describe", "a", "--all-groups"], 2, ["not both"]),
    (["describe", "a", "--verbose"], 2, ["--verbose goes with --members"]),
    (["describe", "a", "--members", "--state"], 2, ["not allowed with"]),
    (["delete"], 2, ["name a consumer group"]),
    (["reset-offsets", "--topic", "t", "--to-earliest"], 2, ["name a consumer group"]),
    (["reset-offsets", "a", "--group", "b", "--topic", "t", "--to-earliest"], 2, ["one consumer group at a time"]),
    (["reset-offsets", "a", "--to-earliest"], 2, ["--topic", "--all-topics"]),
    (["reset-offsets", "a", "--topic", "t", "--all-topics", "--to-earliest"], 2, ["not allowed with"]),
    (["reset-offsets", "a", "--from-file", "f.csv", "--topic", "t"], 2, ["--topic: not allowed with", "--from-file"]),
    (["reset-offsets", "a", "--from-file", "f.csv", "--to-latest"], 2, ["--to-latest: not allowed with"]),
    (["reset-offsets", "a", "--all-topics", "--by-duration", "1h"], 2, ["ISO 8601 duration", "'1h'"]),
    (["reset-offsets", "a", "--all-topics", "--to-current", "--execute", "--dry-run"], 2, ["not allowed with"]),
    (["reset-offsets", "a", "--all-topics", "--to-current", "--json", "--export"], 2, ["not allowed with"]),
    (["reset-offsets", "a", "--from-file", "/nonexistent/plan.csv"], 1,
     ["cannot read --from-file /nonexistent/plan.csv: No such file or directory"]),
    (["delete-offsets", "a"], 2, ["--topic"]),
    (["delete-offsets", "--topic", "t"], 2, ["name a consumer group"]),
])
def test_bad_groups_command_lines(closed: list[str], args: list[str], status: int, fragments: list[str]) -> None:
    proc = run("groups", *args, *closed)
    assert_one_line_error(proc, status, *fragments)
    assert "Errno" not in proc.stderr and "None" not in proc.stderr


def test_a_malformed_plan_file_names_its_line(closed: list[str], tmp_path: Path) -> None:
    plan = tmp_path / "plan.csv"
    plan.write_text("t,0,5\nt,0\n")
    assert_one_line_error(run("groups", "reset-offsets", "a", "--from-file", str(plan), *closed), 1,
                          "line 2", "topic,partition,offset")
    plan.write_text("other,t,0,5\n")
    assert_one_line_error(run("groups", "reset-offsets", "a", "--from-file", str(plan), *closed), 1,
                          "no offsets for group 'a'")


@pytest.mark.parametrize("command", [["delete-offsets", "--group", "g", "--topic", "t"],
                                     ["describe", "--all-groups", "--state"]])
def test_new_commands_against_a_closed_port(closed: list[str], command: list[str]) -> None:
    assert_one_line_error(run("groups", *command, *closed), 1, "cannot reach")
