"""`odradek acls add|list|remove` (Kafka's kafka-acls.sh, with its option names: --allow-principal,
--deny-principal, --allow-host, --deny-host, --operation, --topic, --group, --cluster,
--transactional-id, --resource-pattern-type, --producer, --consumer, --idempotent, --principal,
--force); the requests and Kafka's rules are admin/acl_command.py's."""
from __future__ import annotations

import argparse
import json
import sys
from typing import Any, Callable, TypeVar

from odradek.cli.args import UserError, seconds_arg
from odradek.cli.bootstrap import add_bootstrap_options, probe_cluster

#: kafka-acls.sh's operation names (admin.acl_command.OPERATION_NAMES, spelled out here so that
#: building the parser imports nothing heavy)
OPERATIONS = ("Read", "Write", "Create", "Delete", "Alter", "Describe", "ClusterAction", "DescribeConfigs",
              "AlterConfigs", "IdempotentWrite", "All")
T = TypeVar("T")


def _converted(convert: Callable[[str], T]) -> Callable[[str], T]:
    """An argparse type from a function raising ValueError with the reason."""
    def arg(value: str) -> T:
        try:
            return convert(value)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
    return arg


def _operation(value: str) -> Any:
    from odradek.admin.acl_command import parse_operation

    return parse_operation(value)


def _pattern_type(value: str) -> Any:
    from odradek.admin.acl_command import parse_pattern_type

    return parse_pattern_type(value)


def _principal(value: str) -> str:
    from odradek.admin.acl_command import check_principal

    return check_principal(value)


operation_arg = _converted(_operation)
pattern_type_arg = _converted(_pattern_type)
principal_arg = _converted(_principal)


def add_commands(sub: Any) -> None:
    """`odradek acls` and its subcommands."""
    a = sub.add_parser("acls", help="add, list and remove ACLs, which brokers with "
                       "authorizer.class.name=kafka.security.authorizer.AclAuthorizer enforce (Kafka's kafka-acls.sh)")
    asub = a.add_subparsers(dest="acls_command", metavar="SUBCOMMAND", required=True)
    aa = asub.add_parser("add", help="allow or deny principals operations on resources (CreateAcls)")
    _add_resources(aa)
    _add_entries(aa)
    aa.set_defaults(func=cmd_acls_add, usage_error=aa.error)
    al = asub.add_parser("list", help="the ACLs of the resources named, every ACL without one (DescribeAcls)")
    _add_resources(al)
    al.add_argument("--principal", type=principal_arg, action="append", default=[], metavar="TYPE:NAME",
                    help="only the ACLs of this principal, e.g. User:alice (repeatable: one listing each)")
    al.set_defaults(func=cmd_acls_list, usage_error=al.error)
    ar = asub.add_parser("remove", help="remove the ACLs the options spell, or, without a principal, every ACL of "
                         "the resources named (DeleteAcls)")
    _add_resources(ar)
    _add_entries(ar)
    ar.add_argument("--force", action="store_true", help="remove without asking first")
    ar.set_defaults(func=cmd_acls_remove, usage_error=ar.error)
    for parser in (aa, al, ar):
        parser.add_argument("--json", action="store_true", help="print the ACLs as JSON objects (resource_type, name, "
                            "pattern_type, principal, host, operation, permission_type)")
        add_bootstrap_options(parser)
        parser.add_argument("--timeout-s", type=seconds_arg, default=10.0, help="how long to wait for each request")


def _add_resources(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--topic", action="append", default=[], metavar="TOPIC",
                        help="a topic, * for every topic (repeatable)")
    parser.add_argument("--group", action="append", default=[], metavar="GROUP",
                        help="a consumer group, * for every group (repeatable)")
    parser.add_argument("--transactional-id", action="append", default=[], metavar="ID",
                        help="a transactional id, * for every one (repeatable)")
    parser.add_argument("--cluster", action="store_true", help="the cluster (kafka-cluster)")
    parser.add_argument("--resource-pattern-type", type=pattern_type_arg, default=None, metavar="TYPE",
                        help="literal (the default): the names as given; prefixed: every resource whose name starts "
                             "with one; to list and remove also match (the ACLs that apply to a name: its literal "
                             "ones, *, and the prefixes of it) and any (literal and prefixed)")


def _add_entries(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--allow-principal", type=principal_arg, action="append", default=[], metavar="TYPE:NAME",
                        help="a principal allowed, e.g. User:alice, User:* for everyone (repeatable)")
    parser.add_argument("--deny-principal", type=principal_arg, action="append", default=[], metavar="TYPE:NAME",
                        help="a principal denied; a DENY wins over every ALLOW (repeatable)")
    parser.add_argument("--allow-host", action="append", default=[], metavar="HOST",
                        help="the address --allow-principal is allowed from (default: *, any; repeatable)")
    parser.add_argument("--deny-host", action="append", default=[], metavar="HOST",
                        help="the address --deny-principal is denied from (default: *, any; repeatable)")
    parser.add_argument("--operation", type=operation_arg, action="append", default=[], metavar="OPERATION",
                        help=f"allowed or denied (default: All; repeatable): {', '.join(OPERATIONS)}")
    parser.add_argument("--producer", action="store_true", help="a producer's ACLs: Write, Describe and Create on "
                        "each --topic, Write and Describe on each --transactional-id")
    parser.add_argument("--idempotent", action="store_true",
                        help="with --producer: IdempotentWrite on the cluster too")
    parser.add_argument("--consumer", action="store_true",
                        help="a consumer's ACLs: Read and Describe on each --topic, Read on each --group")


def _spec(args: argparse.Namespace) -> Any:
    from odradek.admin.acl_command import AclSpec
    from odradek.security.acl import PatternType

    return AclSpec(
        topics=tuple(args.topic), groups=tuple(args.group), transactional_ids=tuple(args.transactional_id),
        cluster=args.cluster,
        pattern_type=args.resource_pattern_type if args.resource_pattern_type is not None else PatternType.LITERAL,
        allow_principals=tuple(getattr(args, "allow_principal", ())),
        deny_principals=tuple(getattr(args, "deny_principal", ())),
        allow_hosts=tuple(getattr(args, "allow_host", ())), deny_hosts=tuple(getattr(args, "deny_host", ())),
        operations=tuple(getattr(args, "operation", ())), producer=getattr(args, "producer", False),
        consumer=getattr(args, "consumer", False), idempotent=getattr(args, "idempotent", False),
        principals=tuple(getattr(args, "principal", ())))


def _usage(args: argparse.Namespace, build: Callable[[], T]) -> T:
    """What the options make, or the subcommand's usage error (exit 2) for options that make nothing."""
    from odradek.admin.acl_command import AclUsageError

    try:
        return build()
    except AclUsageError as exc:
        args.usage_error(str(exc))
        raise  # usage_error exits; for the type checker


def _print_listing(bindings: list[Any]) -> None:
    from odradek.admin.acl_command import format_acls

    print(format_acls(bindings) if bindings else "no ACLs")


def cmd_acls_add(args: argparse.Namespace) -> None:
    """Kafka's --add: says what it adds, adds it, then lists the resources' ACLs."""
    from odradek.admin.acl_command import AclAdmin, binding_json, bindings_to_add, format_acls, list_filters

    spec = _spec(args)
    bindings = _usage(args, lambda: bindings_to_add(spec))
    probe_cluster(args)
    admin = AclAdmin(args.bootstrap_server, args.timeout_s)
    if not args.json:
        print(format_acls(bindings, "Adding ACLs for resource") + "\n")
    admin.create(bindings)
    current = admin.describe(list_filters(_without_entries(spec)))
    if args.json:
        print(json.dumps({"added": [binding_json(b) for b in bindings], "acls": [binding_json(b) for b in current]}))
    else:
        _print_listing(current)


def cmd_acls_list(args: argparse.Namespace) -> None:
    from odradek.admin.acl_command import AclAdmin, binding_json, format_by_principal, list_filters

    spec = _spec(args)
    filters = _usage(args, lambda: list_filters(spec))
    probe_cluster(args)
    bindings = AclAdmin(args.bootstrap_server, args.timeout_s).describe(filters)
    if spec.principals:
        bindings = [b for b in bindings if b.entry.principal in spec.principals]
    if args.json:
        print(json.dumps([binding_json(b) for b in bindings]))
    elif spec.principals:
        print(format_by_principal(bindings, spec.principals))
    else:
        _print_listing(bindings)


def cmd_acls_remove(args: argparse.Namespace) -> None:
    """Kafka's --remove: asks first (unless --force), removes, then lists the resources' ACLs."""
    from odradek.admin.acl_command import AclAdmin, binding_json, filters_to_remove, format_acls, list_filters

    spec = _spec(args)
    filters = _usage(args, lambda: filters_to_remove(spec))
    if not args.force:
        _confirm(filters)
    probe_cluster(args)
    admin = AclAdmin(args.bootstrap_server, args.timeout_s)
    removed = admin.delete(filters)
    current = admin.describe(list_filters(_without_entries(spec)))
    if args.json:
        print(json.dumps({"removed": [binding_json(b) for b in removed], "acls": [binding_json(b) for b in current]}))
        return
    print(format_acls(removed, "Removed ACLs for resource") + "\n" if removed else "no ACLs matched: none removed\n")
    _print_listing(current)


def _without_entries(spec: Any) -> Any:
    """The spec of the listing that follows add and remove: the same resources, every entry."""
    from dataclasses import replace

    return replace(spec, allow_principals=(), deny_principals=(), allow_hosts=(), deny_hosts=(), operations=(),
                   producer=False, consumer=False, idempotent=False, cluster=spec.cluster or spec.idempotent,
                   principals=())


def _confirm(filters: list[Any]) -> None:
    """kafka-acls.sh's question before a removal; on no terminal, --force is the answer."""
    from odradek.admin.acl_command import kafka_entry, kafka_filter

    if not sys.stdin.isatty():
        raise UserError("remove asks before removing ACLs: add --force to remove without being asked")
    lines = [f"{kafka_filter(f.pattern)}: "
             + ("every ACL" if f.entry.principal is None else kafka_entry(_entry_of(f))) for f in filters]
    print("Are you sure you want to remove these ACLs?\n" + "\n".join(f" \t{line}" for line in lines))
    answer = input("(y/n) ").strip().lower()
    if answer != "y":
        raise UserError("nothing removed")


def _entry_of(filter_: Any) -> Any:
    from odradek.security.acl import AccessControlEntry

    e = filter_.entry
    return AccessControlEntry(e.principal, e.host, e.operation, e.permission_type)
