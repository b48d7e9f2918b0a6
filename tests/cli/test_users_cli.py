"""`odradek users` without a cluster (cli/users.py, admin/user_scram_command.py): where the
password comes from, the iterations Kafka accepts, and the list's table."""
from __future__ import annotations

import argparse
import io

import pytest

from odradek.admin.user_scram_command import format_list
from odradek.cli import users
from odradek.cli.args import UserError


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def args(password: str | None) -> argparse.Namespace:
    return argparse.Namespace(name="alice", password=password)


def test_the_password_is_taken_from_the_option_else_asked_twice_on_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    assert users._password(args("secret")) == "secret"
    monkeypatch.setattr("sys.stdin", io.StringIO("secret\n"))  # a pipe: never read from
    with pytest.raises(UserError, match="no password: give --password P, or run the command in a terminal"):
        users._password(args(None))
    monkeypatch.setattr("sys.stdin", Terminal())
    answers = iter(["typed", "typed"])
    prompts: list[str] = []
    monkeypatch.setattr("getpass.getpass", lambda prompt: prompts.append(prompt) or next(answers))
    assert users._password(args(None)) == "typed"
    assert prompts == ["Password of alice: ", "The same again: "]
    answers = iter(["typed", "typo"])
    with pytest.raises(UserError, match="the two passwords differ"):
        users._password(args(None))
    answers = iter(["", ""])
    with pytest.raises(UserError, match="the password is empty"):
        users._password(args(None))
    with pytest.raises(UserError, match="the password is empty"):
        users._password(args(""))


@pytest.mark.parametrize("value, ok", [("4096", True), ("16384", True), ("8192", True), ("4095", False),
                                       ("16385", False), ("-5000", False), ("1e4", False)])
def test_iterations_within_kafkas_bounds(value: str, ok: bool) -> None:
    if ok:
        assert users.iterations_arg(value) == int(value)
    else:
        with pytest.raises(argparse.ArgumentTypeError, match="4096 to 16384"):
            users.iterations_arg(value)


def test_the_list_is_a_table_of_credentials() -> None:
    assert format_list([]) == "no SCRAM credentials"
    assert format_list([{"user": "alice", "mechanism": "SCRAM-SHA-256", "iterations": 4096},
                        {"user": "bob", "mechanism": "SCRAM-SHA-512", "iterations": 16384}]) == (
        "User   Mechanism      Iterations\n"
        "alice  SCRAM-SHA-256  4096\n"
        "bob    SCRAM-SHA-512  16384")
