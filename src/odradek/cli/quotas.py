"""`odradek quotas alter|describe`: client quotas (producer_byte_rate, consumer_byte_rate,
request_percentage, controller_mutation_rate) of users, client ids, or both, and their defaults
(kafka-configs.sh --entity-type users/clients); the requests are admin/client_quota_command.py's."""
from __future__ import annotations

import argparse
import json
import math
from typing import Any

from odradek.cli.args import UserError, seconds_arg
from odradek.cli.bootstrap import add_bootstrap_options, probe_cluster

#: kept in step with admin/client_quota_command.QUOTA_KEYS (imported late, as every command's admin module)
QUOTA_KEYS = ("producer_byte_rate", "consumer_byte_rate", "request_percentage", "controller_mutation_rate")
_BYTE_RATES = ("producer_byte_rate", "consumer_byte_rate")


def _key(key: str) -> str:
    if key not in QUOTA_KEYS:
        raise argparse.ArgumentTypeError(f"unknown quota {key!r} (known: {', '.join(QUOTA_KEYS)})")
    return key


def quota_configs_arg(value: str) -> list[tuple[str, float]]:
    """``producer_byte_rate=1048576,request_percentage=200``: (key, value) pairs, each value a
    number >= 0, a whole one for the byte rates (as brokers store them)."""
    pairs = []
    for item in value.split(","):
        key, sep, text = item.strip().partition("=")
        if not sep:
            raise argparse.ArgumentTypeError(f"expected KEY=VALUE[,KEY=VALUE...], got {item.strip()!r}")
        key = _key(key.strip())
        try:
            number = float(text.strip())
        except ValueError:
            raise argparse.ArgumentTypeError(f"{key}: expected a number, got {text.strip()!r}") from None
        if not math.isfinite(number) or number < 0:
            raise argparse.ArgumentTypeError(f"{key}: expected a number >= 0, got {text.strip()!r}")
        if key in _BYTE_RATES and not number.is_integer():
            raise argparse.ArgumentTypeError(f"{key}: expected whole bytes per second, got {text.strip()!r}")
        pairs.append((key, number))
    return pairs


def quota_keys_arg(value: str) -> list[str]:
    """``consumer_byte_rate,request_percentage``: quota keys."""
    return [_key(key.strip()) for key in value.split(",")]


def add_commands(sub: Any) -> None:
    """`odradek quotas` and its subcommands."""
    q = sub.add_parser("quotas", help="set and show client quotas: byte rates and request time of users and client "
                       "ids (kafka-configs.sh --entity-type users/clients)")
    qsub = q.add_subparsers(dest="quotas_command", metavar="SUBCOMMAND", required=True)
    qa = qsub.add_parser("alter", help="set or remove quotas of a user, a client id, a user's client id, or their "
                         "defaults (AlterClientQuotas)")
    user = qa.add_mutually_exclusive_group()
    user.add_argument("--user", metavar="U", help="the user (a principal's name: alice for User:alice)")
    user.add_argument("--user-default", action="store_true", help="the default user: every user without quotas "
                      "of its own")
    client = qa.add_mutually_exclusive_group()
    client.add_argument("--client-id", metavar="C", help="the client id (client.id of the clients)")
    client.add_argument("--client-default", action="store_true", help="the default client id")
    qa.add_argument("--add-config", type=quota_configs_arg, action="append", default=[],
                    metavar="KEY=VALUE[,...]", help=f"quotas to set ({', '.join(QUOTA_KEYS)}; repeatable)")
    qa.add_argument("--delete-config", type=quota_keys_arg, action="append", default=[], metavar="KEY[,...]",
                    help="quotas to remove: the next level of precedence applies (repeatable)")
    qa.add_argument("--validate-only", action="store_true", help="have the broker check the change, store nothing")
    qa.set_defaults(func=cmd_quotas_alter)

    qd = qsub.add_parser("describe", help="the quotas of every entity, or of those named (DescribeClientQuotas)")
    user = qd.add_mutually_exclusive_group()
    user.add_argument("--user", metavar="U", nargs="?", const="", help="the user's own quotas (without U: every "
                      "user's; with --client-id: that user's client id's)")
    user.add_argument("--user-default", action="store_true", help="the default user's quotas")
    client = qd.add_mutually_exclusive_group()
    client.add_argument("--client-id", metavar="C", nargs="?", const="", help="the client id's quotas (without C: "
                        "every client id's)")
    client.add_argument("--client-default", action="store_true", help="the default client id's quotas")
    qd.add_argument("--json", action="store_true", help="print [{\"entity\": {\"user\", \"client-id\"}, "
                    "\"quotas\": {key: value}}], a default entity's name null")
    qd.set_defaults(func=cmd_quotas_describe)
    for parser in (qa, qd):
        add_bootstrap_options(parser)
        parser.add_argument("--timeout-s", type=seconds_arg, default=10.0, help="how long to wait for each request")


def _selectors(args: argparse.Namespace, describing: bool) -> tuple[Any, Any]:
    """(user, client id) as admin/client_quota_command.py takes them."""
    from odradek.admin.client_quota_command import ANY, DEFAULT

    def selector(name: str | None, default: bool, what: str) -> Any:
        if default:
            return DEFAULT
        if name == "" and describing:
            return ANY
        if name == "":
            raise UserError(f"quotas alter: the {what} is empty")
        return name

    return selector(args.user, args.user_default, "user"), selector(args.client_id, args.client_default, "client id")


def cmd_quotas_alter(args: argparse.Namespace) -> None:
    """kafka-configs.sh --alter --entity-type users/clients: one AlterClientQuotas. A key given
    twice, or both set and removed, is refused before anything is sent."""
    from odradek.admin.client_quota_command import ClientQuotaAdmin, entity_text, format_value

    user, client_id = _selectors(args, describing=False)
    if user is None and client_id is None:
        raise UserError("quotas alter: name the entity: --user U or --user-default, --client-id C or "
                        "--client-default, or one of each")
    add = [pair for pairs in args.add_config for pair in pairs]
    delete = [key for keys in args.delete_config for key in keys]
    if not add and not delete:
        raise UserError("quotas alter: nothing to change (give --add-config KEY=VALUE or --delete-config KEY)")
    names = [k for k, _v in add] + delete
    twice = sorted({k for k in names if names.count(k) > 1})
    if twice:
        raise UserError(f"quotas alter: {', '.join(twice)} given more than once (each key once, with --add-config "
                        f"or --delete-config)")
    probe_cluster(args)
    ClientQuotaAdmin(args.bootstrap_server, args.timeout_s).alter(user, client_id, dict(add), delete,
                                                                 args.validate_only)
    changes = [f"{k}={format_value(k, v)}" for k, v in add] + [f"-{k}" for k in delete]
    verb = "validated (not stored) the change of" if args.validate_only else "altered"
    print(f"{verb} quotas of {entity_text(user, client_id)}: {', '.join(changes)}")


def cmd_quotas_describe(args: argparse.Namespace) -> None:
    """kafka-configs.sh --describe: without --user or --client-id every entity with quotas; with
    them the entity made of exactly the parts given (a part without a name: any name)."""
    from odradek.admin.client_quota_command import ClientQuotaAdmin, format_describe

    user, client_id = _selectors(args, describing=True)
    probe_cluster(args)
    rows = ClientQuotaAdmin(args.bootstrap_server, args.timeout_s).describe(user, client_id)
    print(json.dumps(rows) if args.json else format_describe(rows))
