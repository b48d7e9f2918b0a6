"""How the request handlers authorize: the checks of security/authorization_table.py, made for
the principal of the current request's session (broker/session.py), with Kafka's error codes in
Kafka's places of the answer (Kafka 3.x's KafkaApis and AuthHelper).

Each handler module declares, at import, that it makes its API's checks: ``wire(api_key)`` gives
the table row's wiring, and ``wiring.check(operation, resource_type)`` the row's Check, which the
handler then asks about. A Check the row does not have fails the import; the registry (WIRED)
lets tests/broker/test_request_authorization.py require that every API the broker serves is
wired and takes every check of its row, so an API cannot be added without its authorization.

The three scopes of the table, and the helper each has:

- REQUEST (one check for the whole request): ``wiring.requires(check, name_of)`` or
  ``wiring.gate(function)``; KafkaApis runs an API's gates before its handler (``check_request``)
  and answers a denial as Kafka's getErrorResponse does (error_responses.py: the error in every
  place the response has one). A handler whose denied answer is not that shape asks ``allowed``.
- EACH (one check per named resource; a denied one answers the error, the rest go on):
  ``denied(ctx, check, names)``, the denied names, each distinct name asked once.
- HIDDEN (a denied resource is left out of the answer): ``visible(ctx, check, items, name_of)``.

A check's ``unless`` permissions (CreateTopics' CREATE on the cluster) are asked once per call
before any name; ``any_resource`` permissions go to authorize_by_resource_type (KIP-679).

Without an authorizer (authorizer.class.name empty, the default) every helper answers "allowed"
after one attribute test; Produce and Fetch do not even call them (KafkaApis routes them to their
authorizing entry points only when an authorizer is configured).
"""
from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from odradek.broker.connection import CloseConnection
from odradek.broker.context import BrokerContext
from odradek.broker.error_responses import error_response
from odradek.broker.session import Session, current_session
from odradek.protocol import kio_util
from odradek.protocol.errors import ErrorCode
from odradek.security.acl import CLUSTER_NAME, AclOperation, ResourceType, supported_operations
from odradek.security.acl_authorizer import AclAuthorizer
from odradek.security.authorization_table import API_AUTHORIZATION, ApiAuthorization, Check, Permission, Scope

T = TypeVar("T")

#: Kafka's Int.MinValue: authorized operations (Metadata v8+, DescribeCluster, DescribeGroups v3+)
#: not asked for
NOT_REQUESTED = -2147483648

#: Kafka's Errors messages, for the answers that carry one
MESSAGES: dict[ErrorCode, str] = {
    ErrorCode.TOPIC_AUTHORIZATION_FAILED: "Topic authorization failed.",
    ErrorCode.GROUP_AUTHORIZATION_FAILED: "Group authorization failed.",
    ErrorCode.CLUSTER_AUTHORIZATION_FAILED: "Cluster authorization failed.",
    ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED: "Transactional Id authorization failed.",
}

#: a gate: the error a request is denied with as a whole, or None (go on to the handler)
Gate = Callable[[BrokerContext, Any, int], "ErrorCode | None"]


@dataclass(eq=False)
class Wiring:
    """What one API's handler authorizes: the checks of its table row it makes (``taken``), those
    it cannot meet in odradek and why (``moot``), and its request-wide gates."""

    row: ApiAuthorization
    taken: set[Check] = field(default_factory=set)
    moot: dict[Check, str] = field(default_factory=dict)
    gates: list[Gate] = field(default_factory=list)

    def check(self, operation: AclOperation, resource_type: ResourceType, scope: Scope | None = None) -> Check:
        """The row's check of ``operation`` on ``resource_type`` (``scope`` tells two apart);
        LookupError when the row has none, or more than one, so a handler asking what its row
        does not say fails at import."""
        found = [c for c in self.row.checks if c.permission.operation is operation
                 and c.permission.resource_type is resource_type and (scope is None or c.scope is scope)]
        if len(found) != 1:
            raise LookupError(f"{self.row.name}: {len(found)} checks of {operation.name} on {resource_type.name}"
                              f"{'' if scope is None else f' ({scope.name})'} in the authorization table")
        self.taken.add(found[0])
        return found[0]

    def not_applicable(self, check: Check, reason: str) -> None:
        """A check of the row that odradek never reaches, and why (DeleteTopics names topics by
        id, which odradek answers UNKNOWN_TOPIC_ID before any check)."""
        self.moot[check] = reason

    def gate(self, function: Gate) -> Gate:
        """Register a request-wide check, run in order before the handler (a decorator)."""
        self.gates.append(function)
        return function

    def requires(self, check: Check, name_of: Callable[[Any, int], str | None] | None = None) -> None:
        """The common gate: ``check`` on the resource ``name_of(request, version)`` names (the
        cluster without it); ``name_of`` answering None means the check's ``when`` does not hold."""
        assert check in self.taken and check.error is not None

        def gate(ctx: BrokerContext, request: Any, version: int) -> ErrorCode | None:
            name = CLUSTER_NAME if name_of is None else name_of(request, version)
            if name is None or allowed(ctx, check, name):
                return None
            return check.error

        self.gates.append(gate)


#: API key -> its wiring, filled as the handler modules are imported (kafka_apis imports them all)
WIRED: dict[int, Wiring] = {}


def wire(api_key: int) -> Wiring:
    """The wiring of ``api_key``'s authorization (KeyError: the table has no row for it)."""
    wiring = WIRED.get(api_key)
    if wiring is None:
        wiring = WIRED[api_key] = Wiring(API_AUTHORIZATION[api_key])
    return wiring


def refusal(check: Check) -> ErrorCode:
    """The error a denial of ``check`` answers (a HIDDEN check has none)."""
    if check.error is None:
        raise ValueError(f"a {check.scope.name} check answers no error")
    return check.error


# -- the questions --------------------------------------------------------------------------------

def _permits(authorizer: AclAuthorizer, session: Session, permission: Permission, name: str) -> bool:
    if permission.any_resource:
        return authorizer.authorize_by_resource_type(session.principal, session.client_host,
                                                     permission.operation, permission.resource_type)
    return authorizer.authorize(session.principal, session.client_host, permission.operation,
                                permission.resource_type, name)


def _exempt(authorizer: AclAuthorizer, session: Session, check: Check) -> bool:
    """One of the check's ``unless`` permissions holds (they name the cluster, or any resource)."""
    return any(_permits(authorizer, session, u, CLUSTER_NAME) for u in check.unless)


def allowed(ctx: BrokerContext, check: Check, name: str = CLUSTER_NAME) -> bool:
    """May the request's principal do what ``check`` asks on the resource ``name``?"""
    authorizer = ctx.authorizer
    if authorizer is None:
        return True
    session = current_session()
    return _permits(authorizer, session, check.permission, name) or _exempt(authorizer, session, check)


def denied(ctx: BrokerContext, check: Check, names: Iterable[str]) -> frozenset[str]:
    """The names the principal may not do ``check`` on (Kafka's filterByAuthorized, inverted): each
    distinct name is asked once, however often the request names it."""
    authorizer = ctx.authorizer
    if authorizer is None:
        return frozenset()
    session = current_session()
    distinct = set(names)
    if not distinct or (check.unless and _exempt(authorizer, session, check)):
        return frozenset()
    permission = check.permission
    return frozenset(n for n in distinct if not _permits(authorizer, session, permission, n))


def visible(ctx: BrokerContext, check: Check, items: Iterable[T], name_of: Callable[[T], str]) -> list[T]:
    """The items whose resource the principal may do ``check`` on, in their order (HIDDEN)."""
    kept = list(items)
    if ctx.authorizer is None:
        return kept
    hidden = denied(ctx, check, (name_of(i) for i in kept))
    return [i for i in kept if name_of(i) not in hidden] if hidden else kept


def authorized_operations(ctx: BrokerContext, resource_type: ResourceType, name: str) -> int:
    """Kafka's AuthHelper.authorizedOperations: the operations an ACL on ``resource_type`` can name
    that the principal may do on ``name``, as a bit field (1 << operation code); every one of them
    without an authorizer."""
    operations = supported_operations(resource_type)
    authorizer = ctx.authorizer
    if authorizer is not None:
        session = current_session()
        operations = frozenset(op for op in operations
                               if authorizer.authorize(session.principal, session.client_host, op, resource_type, name))
    return sum(1 << int(op) for op in operations)


def cluster_authorized_operations(ctx: BrokerContext, describe: Check) -> int:
    """IncludeClusterAuthorizedOperations (Metadata v8-10, DescribeCluster): the cluster's bit
    field if the principal may DESCRIBE the cluster, else 0."""
    return authorized_operations(ctx, ResourceType.CLUSTER, CLUSTER_NAME) if allowed(ctx, describe) else 0


# -- request-wide gates ---------------------------------------------------------------------------

def check_request(ctx: BrokerContext, api_key: int, version: int, correlation_id: int,
                  request: Any) -> kio_util.EncodedResponse | None:
    """Run ``api_key``'s gates (an authorizer is configured): None to go on to the handler, else
    the answer to the denied request, the error in every place its response has one (Kafka's
    getErrorResponse); a response with no place for it closes the connection instead."""
    wiring = WIRED.get(api_key)
    if wiring is None:
        return None
    for gate in wiring.gates:
        error = gate(ctx, request, version)
        if error is not None:
            response = error_response(api_key, version, correlation_id, request, error, MESSAGES.get(error))
            if response is None:
                raise CloseConnection(f"{wiring.row.name} v{version} denied ({error.name}), and its response "
                                      f"has no place for the error")
            return response
    return None
