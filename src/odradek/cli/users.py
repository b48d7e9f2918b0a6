"""`odradek users add|list|delete`: the users that log in with SASL/SCRAM, whose credentials
the brokers keep in ZooKeeper (kafka-configs.sh --entity-type users with SCRAM-SHA-256 /
SCRAM-SHA-512 configs); the requests are admin/user_scram_command.py's."""
from __future__ import annotations

import argparse
import getpass
import json
import sys
from pathlib import Path
from typing import Any

from odradek.cli.args import UserError, seconds_arg
from odradek.cli.bootstrap import add_bootstrap_options, probe_cluster
from odradek.security.sasl import SCRAM_SHA_256, SCRAM_SHA_512
from odradek.security.scram import DEFAULT_ITERATIONS, MAX_ITERATIONS, MIN_ITERATIONS

MECHANISMS = (SCRAM_SHA_256, SCRAM_SHA_512)


def iterations_arg(value: str) -> int:
    """Kafka's bounds: brokers refuse fewer (UNACCEPTABLE_CREDENTIAL) and more, and this command
    would spend its time hashing before they do."""
    if not value.isdigit() or not MIN_ITERATIONS <= int(value) <= MAX_ITERATIONS:
        raise argparse.ArgumentTypeError(f"expected iterations from {MIN_ITERATIONS} to {MAX_ITERATIONS} "
                                         f"(Kafka's bounds), got {value!r}")
    return int(value)


def add_commands(sub: Any) -> None:
    """`odradek users` and its subcommands."""
    u = sub.add_parser("users", help="add, list and delete the users that log in with SASL/SCRAM (kafka-configs.sh "
                       "--entity-type users)")
    usub = u.add_subparsers(dest="users_command", metavar="SUBCOMMAND", required=True)
    ua = usub.add_parser("add", help="set a user's SCRAM credential: a new user, or a new password "
                         "(AlterUserScramCredentials; only a salted password is sent)")
    ua.add_argument("name", metavar="NAME", help="the user name")
    ua.add_argument("--password", metavar="P", help="the password (other local users may see it in the process "
                    "list; without it the command asks, when run in a terminal)")
    ua.add_argument("--mechanism", choices=MECHANISMS, default=SCRAM_SHA_256, help="the SCRAM mechanism")
    ua.add_argument("--iterations", type=iterations_arg, default=DEFAULT_ITERATIONS, metavar="N",
                    help="PBKDF2 iterations of the credential")
    ua.add_argument("--zookeeper", metavar="CONN", help="write the credential to this ZooKeeper directly (HOST:PORT"
                    "[/chroot]), as kafka-configs.sh --zookeeper does: for the brokers' own user, before any "
                    "broker runs")
    ua.add_argument("--zookeeper-jaas", type=Path, metavar="FILE",
                    help="with --zookeeper: the JAAS file whose Client section logs in to ZooKeeper (the brokers' "
                         "java.security.auth.login.config); the znode then gets Kafka's ACLs (zookeeper.set.acl)")
    ua.set_defaults(func=cmd_users_add)

    ul = usub.add_parser("list", help="the users with SCRAM credentials, each mechanism with its iterations "
                         "(DescribeUserScramCredentials)")
    ul.add_argument("names", nargs="*", metavar="NAME", help="only these users (default: every user)")
    ul.add_argument("--json", action="store_true", help="print [{\"user\", \"mechanism\", \"iterations\"}]")
    ul.set_defaults(func=cmd_users_list)

    ud = usub.add_parser("delete", help="delete a user's SCRAM credentials, so it can no longer log in with them "
                         "(AlterUserScramCredentials)")
    ud.add_argument("name", metavar="NAME", help="the user name")
    ud.add_argument("--mechanism", choices=MECHANISMS, help="only this mechanism's credential (default: every one "
                    "the user has)")
    ud.set_defaults(func=cmd_users_delete)
    for parser in (ua, ul, ud):
        add_bootstrap_options(parser)
        parser.add_argument("--timeout-s", type=seconds_arg, default=10.0, help="how long to wait for each request")


def _admin(args: argparse.Namespace) -> Any:
    from odradek.admin.user_scram_command import UserScramAdmin

    probe_cluster(args)
    return UserScramAdmin(args.bootstrap_server, args.timeout_s)


def _password(args: argparse.Namespace) -> str:
    """--password, else asked twice without echo on a terminal; never read from a pipe, where a
    missing --password is more likely a mistake than a password."""
    if args.password is not None:
        password: str = args.password
    elif sys.stdin is not None and sys.stdin.isatty():
        password = getpass.getpass(f"Password of {args.name}: ")
        if getpass.getpass("The same again: ") != password:
            raise UserError("users add: the two passwords differ")
    else:
        raise UserError("users add: no password: give --password P, or run the command in a terminal to be asked")
    if not password:
        raise UserError("users add: the password is empty")
    return password


def cmd_users_add(args: argparse.Namespace) -> None:
    if not args.name:
        raise UserError("users add: the user name is empty")
    if args.zookeeper_jaas is not None and args.zookeeper is None:
        raise UserError("users add: --zookeeper-jaas goes with --zookeeper")
    if args.zookeeper is not None:
        from odradek.admin.user_scram_command import add_in_zookeeper

        add_in_zookeeper(args.zookeeper, args.zookeeper_jaas, args.name, _password(args), args.mechanism,
                         args.iterations)
        print(f"user {args.name}: {args.mechanism} credential written to ZooKeeper {args.zookeeper} "
              f"({args.iterations} iterations)")
        return
    admin = _admin(args)  # a cluster that is not there fails before the password is asked for
    admin.add(args.name, _password(args), args.mechanism, args.iterations)
    print(f"user {args.name}: {args.mechanism} credential set ({args.iterations} iterations)")


def cmd_users_list(args: argparse.Namespace) -> None:
    """Every answer, then one error line naming the users that could not be described (exit 1)."""
    from odradek.admin.user_scram_command import format_list

    if any(not name for name in args.names):
        raise UserError("users list: a user name is empty")
    rows, errors = _admin(args).describe(args.names or None)
    print(json.dumps(rows) if args.json else format_list(rows))
    if errors:
        raise UserError(f"users list: {'; '.join(f'{user}: {why}' for user, why in errors.items())}")


def cmd_users_delete(args: argparse.Namespace) -> None:
    if not args.name:
        raise UserError("users delete: the user name is empty")
    mechanisms = _admin(args).delete(args.name, None if args.mechanism is None else [args.mechanism])
    print(f"user {args.name}: {', '.join(mechanisms)} credential{'s' if len(mechanisms) > 1 else ''} deleted")
