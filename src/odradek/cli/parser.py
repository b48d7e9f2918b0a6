"""The whole `odradek` command tree: each command family adds its own subcommands (cli/*.py's
add_commands); here the top, `completion`, --version, and the help shared options get."""
from __future__ import annotations

import argparse

import odradek.cli.acls as acls
import odradek.cli.bench as bench
import odradek.cli.cluster_commands as cluster_commands
import odradek.cli.configs as configs
import odradek.cli.groups as groups
import odradek.cli.log_dirs as log_dirs
import odradek.cli.quotas as quotas
import odradek.cli.reassign as reassign
import odradek.cli.records as records
import odradek.cli.topics as topics
import odradek.cli.transactions as transactions
import odradek.cli.users as users
from odradek.cli.args import Parser, UserError


def build_parser() -> argparse.ArgumentParser:
    """The whole command tree; each leaf carries its handler in `func`."""
    p = Parser(prog="odradek", description="A Kafka-compatible broker cluster on ZooKeeper.")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", required=True)
    cluster_commands.add_commands(sub)
    topics.add_commands(sub)
    records.add_commands(sub)
    groups.add_commands(sub)
    configs.add_commands(sub)
    log_dirs.add_commands(sub)
    reassign.add_commands(sub)
    transactions.add_commands(sub)
    acls.add_commands(sub)
    users.add_commands(sub)
    quotas.add_commands(sub)
    bench.add_commands(sub)

    cp = sub.add_parser("completion", help="print the shell code that completes odradek's commands and "
                        "options: eval \"$(odradek completion bash)\" (in ~/.bashrc to keep it)")
    cp.add_argument("shell", choices=("bash", "zsh", "fish"), nargs="?", default="bash")
    cp.set_defaults(func=cmd_completion)
    p.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    _fill_in_help(p)
    return p


def leaf_parser(parser: argparse.ArgumentParser, names: list[str]) -> argparse.ArgumentParser:
    """The parser of the subcommand ``names`` (e.g. ['topics', 'describe']) under ``parser``."""
    for name in names:
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if not subs or name not in subs[0].choices:
            break
        parser = subs[0].choices[name]
    return parser


#: Help for the options that many commands share, filled in where a command gave none.
_SHARED_HELP = {
    "json": "print JSON instead of text",
    "timeout_s": "how long to wait, in seconds",
    "name": "the topic",
    "topic": "the topic",
    "group": "the consumer group",
    "brokers": "how many brokers",
    "data_dir": "the cluster's data directory",
    "host": "the address the brokers listen on",
    "id": "broker.id",
    "partitions": "how many partitions",
    "replication_factor": "replicas of each partition",
    "names": "the topics",
    "messages": "how many records",
    "records": "how many records",
    "members": "how many group members",
    "acks": "replicas that must have a record before it counts as sent",
    "shell": "the shell to complete in",
}


def _fill_in_help(parser: argparse.ArgumentParser) -> None:
    """Every option of every command gets a help line (and so its default shown)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                _fill_in_help(child)
        elif action.help is None and action.dest in _SHARED_HELP:
            action.help = _SHARED_HELP[action.dest]


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("odradek")
    except PackageNotFoundError:
        return "unknown (not installed)"



def cmd_completion(args: argparse.Namespace) -> None:
    try:
        import argcomplete
    except ImportError:
        raise UserError("completion needs the argcomplete package: pip install argcomplete") from None
    print(argcomplete.shellcode(["odradek"], shell=args.shell))
