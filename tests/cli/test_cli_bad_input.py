"""Every `odradek` command, found by walking the argparse tree (a command added later is
covered without touching this file), run with bad input: an unknown option, values its types
refuse, and for client commands a cluster that is not there. Each run must end in one
`odradek: error: ...` line, never a traceback and never main()'s internal-error fallback.

Commands run in-process through cli.main (fast); nothing here needs a cluster.
"""
from __future__ import annotations

import argparse
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

import odradek.cli.main as cli
from odradek.common.netutil import free_port


def leaves(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    """(command path, parser) of every runnable command."""
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        yield path, parser
        return
    for name, child in subs[0].choices.items():
        yield from leaves(child, path + (name,))


LEAVES = dict(leaves(cli.build_parser()))
IDS = [" ".join(p) for p in LEAVES]


def value_for(action: argparse.Action, tmp: Path) -> list[str]:
    """A value the option's type accepts, for filling in required arguments."""
    if action.nargs == 0:
        return []
    if action.choices:
        return [str(next(iter(action.choices)))]
    by_type = {cli.positive_int: "1", cli.nonnegative_int: "0", int: "0", cli.keyvalue_arg: "a=b", cli.seconds_arg: "1",
               cli.directory_arg: str(tmp), Path: str(tmp / "plan.json"), cli.hostport_arg: "127.0.0.1:1"}
    return [by_type.get(action.type, "t")]


#: commands that need one of several options argparse cannot mark required (their own
#: argument checks come before they contact the cluster)
ONE_OF_REQUIRED = {("topics", "alter"): ["--partitions", "9"], ("configs", "alter"): ["--set", "a=b"],
                   ("reassign",): ["--topics", "t", "--brokers", "1,2"],
                   ("acls", "add"): ["--topic", "t", "--allow-principal", "User:a"],
                   ("acls", "remove"): ["--topic", "t", "--force"],
                   ("quotas", "alter"): ["--client-id", "c", "--add-config", "producer_byte_rate=1"]}


def required_args(parser: argparse.ArgumentParser, tmp: Path) -> list[str]:
    """The command's required positionals and options (one of each required group), filled in."""
    argv: list[str] = list(ONE_OF_REQUIRED.get(tuple(parser.prog.split()[1:]), []))
    grouped = {a for g in parser._mutually_exclusive_groups for a in g._group_actions}
    for action in parser._actions:
        if action.required and action not in grouped:
            argv += ([action.option_strings[0]] if action.option_strings else []) + value_for(action, tmp)
    for group in parser._mutually_exclusive_groups:
        if group.required:
            first = group._group_actions[0]
            argv += [first.option_strings[0], *value_for(first, tmp)]
    return argv


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    """cli.main in-process: (exit status, stderr)."""
    try:
        status = cli.main(argv)
    except SystemExit as exc:  # argparse
        status = exc.code if isinstance(exc.code, int) else 1
    return status, capsys.readouterr().err


def assert_one_error_line(status: int, err: str, *fragments: str) -> None:
    assert status in (1, 2), err
    assert "Traceback" not in err and cli.INTERNAL_ERROR not in err, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("odradek: error: "), err
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


@pytest.fixture
def closed() -> str:
    return f"127.0.0.1:{free_port()}"


@pytest.mark.parametrize("path", LEAVES, ids=IDS)
def test_unknown_option(path: tuple[str, ...], capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    status, err = run([*path, *required_args(LEAVES[path], tmp_path), "--no-such-option"], capsys)
    assert status == 2
    assert_one_error_line(status, err, "--no-such-option")


BAD_VALUES = ["x%z", "-1", "0", "127.0.0.1:99999"]


@pytest.mark.parametrize("path", LEAVES, ids=IDS)
def test_values_the_types_refuse(path: tuple[str, ...], capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """Each typed option with each bad value that its type refuses: a usage error naming it."""
    parser = LEAVES[path]
    base = required_args(parser, tmp_path)
    (tmp_path / "a-file").write_text("")
    for action in parser._actions:
        if action.type in (None, str, Path) or not action.option_strings:
            continue
        for bad in BAD_VALUES + ([str(tmp_path / "a-file")] if action.type is cli.directory_arg else []):
            try:
                action.type(bad)
                continue  # accepted: not a bad value for this option
            except (argparse.ArgumentTypeError, ValueError, TypeError):
                pass
            status, err = run([*path, *base, action.option_strings[0], bad], capsys)
            assert status == 2, (action.option_strings, bad, err)
            assert_one_error_line(status, err, action.option_strings[0])


CLIENT_LEAVES = [p for p, parser in LEAVES.items() if parser.get_default("resolve_bootstrap")]


@pytest.mark.parametrize("path", CLIENT_LEAVES, ids=[" ".join(p) for p in CLIENT_LEAVES])
def test_client_commands_without_a_cluster(path: tuple[str, ...], closed: str, capsys: pytest.CaptureFixture[str],
                                           tmp_path: Path) -> None:
    status, err = run([*path, *required_args(LEAVES[path], tmp_path), "--bootstrap-server", closed], capsys)
    assert_one_error_line(status, err, "cannot reach", closed)


@pytest.mark.parametrize("path", CLIENT_LEAVES[:3], ids=[" ".join(p) for p in CLIENT_LEAVES[:3]])
def test_client_commands_with_a_data_dir_without_a_cluster(path: tuple[str, ...], tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    status, err = run([*path, *required_args(LEAVES[path], tmp_path), "--data-dir", str(tmp_path)], capsys)
    assert_one_error_line(status, err, "no cluster in", "odradek up")


def test_the_bootstrap_environment_variable_is_used(closed: str, capsys: pytest.CaptureFixture[str],
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(cli.BOOTSTRAP_ENV, closed)
    assert_one_error_line(*run(["topics", "list"], capsys), "cannot reach", closed)
    monkeypatch.setenv(cli.BOOTSTRAP_ENV, "nohost")
    assert_one_error_line(*run(["topics", "list"], capsys), cli.BOOTSTRAP_ENV, "HOST:PORT")


def test_bootstrap_precedence(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """--bootstrap-server, then --data-dir (every broker), then the environment, then the default."""
    from odradek.cluster.local_cluster import LocalCluster

    LocalCluster(tmp_path, 3, base_port=19092, zookeeper="127.0.0.1:2181")._write_state()

    def resolved(bootstrap: str | None, cluster_dir: Path | None) -> str:
        args = argparse.Namespace(bootstrap_server=bootstrap, cluster_dir=cluster_dir)
        cli.resolve_bootstrap(args)
        return args.bootstrap_server

    monkeypatch.delenv(cli.BOOTSTRAP_ENV, raising=False)
    assert resolved(None, None) == cli.DEFAULT_BOOTSTRAP
    monkeypatch.setenv(cli.BOOTSTRAP_ENV, "h:1,h:2")
    assert resolved(None, None) == "h:1,h:2"
    assert resolved(None, tmp_path) == "127.0.0.1:19092,127.0.0.1:19093,127.0.0.1:19094"
    assert resolved("b:9", tmp_path) == "b:9"


# Commands that do not bootstrap from Kafka brokers, each with a bad input of its own.
OWN_BAD_INPUT = {
    ("status",): (["--zookeeper", "CLOSED", "--timeout-s", "1"], "nothing listens on"),
    ("down",): (["--data-dir", "TMP"], "no cluster in"),
    ("up",): (["--brokers", "1", "--data-dir", "FILE"], "not a directory"),
    ("bench", "failover"): (["--brokers", "1"], "at least 2"),
    ("bench", "shutdown"): (["--brokers", "1"], "at least 2"),
    ("bench", "reassign"): (["--throttle-mb-per-s", "0"], "must be positive"),
    ("bench", "produce"): (["--bootstrap-server", "CLOSED"], "cannot reach"),
    ("bench", "spark-read"): (["--bootstrap-server", "CLOSED"], "cannot reach"),
    ("bench", "groups"): (["--members", "0"], "positive integer"),
    ("bench", "ordered"): (["--expansions", "0"], "positive integer"),
    ("bench", "transactions"): (["--seconds", "0"], "positive integer"),
    ("bench", "latency"): (["--bootstrap-server", "CLOSED"], "cannot reach"),
    ("bench", "consume"): (["--bootstrap-server", "CLOSED"], "cannot reach"),
    ("completion",): (["tcsh"], "invalid choice"),
    ("ui",): (["--data-dir", "TMP"], "no cluster in"),
}


@pytest.mark.parametrize("path", OWN_BAD_INPUT, ids=[" ".join(p) for p in OWN_BAD_INPUT])
def test_own_bad_input(path: tuple[str, ...], closed: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args, fragment = OWN_BAD_INPUT[path]
    (tmp_path / "a-file").write_text("")
    subst = {"CLOSED": closed, "TMP": str(tmp_path), "FILE": str(tmp_path / "a-file")}
    status, err = run([*path, *[subst.get(a, a) for a in args]], capsys)
    assert_one_error_line(status, err, fragment)


def test_every_command_has_a_bad_input_that_runs_it() -> None:
    """A new command that neither bootstraps from brokers (then it is run against a closed port
    above) nor has a case in OWN_BAD_INPUT fails here: argparse-level checks cover it already,
    but a command's own code must meet bad input too."""
    uncovered = [" ".join(p) for p in LEAVES if p not in OWN_BAD_INPUT and p not in CLIENT_LEAVES
                 and p != ("broker",)]  # test_broker_on_a_port_in_use
    assert not uncovered, f"add a case to OWN_BAD_INPUT for: {uncovered}"


def test_broker_on_a_port_in_use(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        status, err = run(["broker", "--id", "1", "--listen", f"127.0.0.1:{port}", "--zookeeper", "127.0.0.1:1",
                           "--data-dir", str(tmp_path)], capsys)
    assert_one_error_line(status, err, "already in use", str(port))


def test_broker_on_a_metrics_port_in_use(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Refused as a taken listen port is, not a broker running without its metrics."""
    config = tmp_path / "server.properties"
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        config.write_text(f"metrics.port={port}\n")
        status, err = run(["broker", "--id", "1", "--listen", f"127.0.0.1:{free_port()}", "--zookeeper",
                           "127.0.0.1:1", "--data-dir", str(tmp_path / "data"), "--config", str(config)], capsys)
    assert_one_error_line(status, err, f"metrics port 127.0.0.1:{port} is already in use")


def test_version_and_help_defaults(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    with pytest.raises(SystemExit) as exit_:
        cli.main(["--version"])
    assert exit_.value.code == 0 and capsys.readouterr().out.startswith("odradek 0.")
    with pytest.raises(SystemExit):
        cli.main(["consume", "--help"])
    helptext = capsys.readouterr().out
    assert "(default: 10.0)" in helptext and "(default: all)" not in helptext


def test_completion_prints_shell_code(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["completion", "bash"]) == 0
    assert "complete " in capsys.readouterr().out


@pytest.mark.parametrize("path", LEAVES, ids=IDS)
def test_every_option_has_help(path: tuple[str, ...]) -> None:
    """An option without help shows neither what it does nor its default in --help."""
    bare = [a.option_strings or a.dest for a in LEAVES[path]._actions if not a.help]
    assert not bare, f"odradek {' '.join(path)}: no help for {bare}"


@pytest.mark.parametrize("path", LEAVES, ids=IDS)
def test_options_stay_options(path: tuple[str, ...]) -> None:
    """An option that lost its flags (argparse's parents= shares action objects, and a child's
    conflict_handler="resolve" strips the parent's) becomes a positional with a default: a bare
    N in --help, and errors about `argument N` instead of the flag."""
    stripped = [a.dest for a in LEAVES[path]._actions if not a.option_strings and not a.required
                and a.nargs not in ("?", "*") and not isinstance(a, argparse._SubParsersAction)]
    assert not stripped, f"odradek {' '.join(path)}: options without flags: {stripped}"


@pytest.mark.parametrize("argv, fragment, help_of", [
    (["status", "--bogus"], "unrecognized arguments: --bogus", "odradek status --help"),
    (["up", "--bogus"], "unrecognized arguments: --bogus", "odradek up --help"),  # not the missing --data-dir
    (["bench", "failover", "--rounds", "0"], "argument --rounds", "odradek bench failover --help"),
])
def test_usage_errors_name_the_flag_and_the_command(argv: list[str], fragment: str, help_of: str,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    status, err = run(argv, capsys)
    assert status == 2
    assert_one_error_line(status, err, fragment, f"(see `{help_of}`)")
