"""The ACL admin APIs as Kafka 3.x's AclApis answers them: DescribeAcls (29), CreateAcls (30) and
DeleteAcls (31), versions 1-3, what kafka-acls.sh, `odradek acls` and every Admin client's
describeAcls / createAcls / deleteAcls send.

Kafka's order of checks: the caller must be allowed DESCRIBE (DescribeAcls) or ALTER
(CreateAcls, DeleteAcls) on the cluster, else every entry of the answer is
CLUSTER_AUTHORIZATION_FAILED; then a broker without an authorizer (authorizer.class.name empty)
answers SECURITY_DISABLED. DescribeAcls reads this broker's AclAuthorizer; CreateAcls and
DeleteAcls write ZooKeeper through the AclManager (broker/acl_manager.py), which applies what it
wrote here at once and on the other brokers through the change notifications.

Where Kafka closes the connection (a request whose bindings or filters hold UNKNOWN values
fails to parse there, security/acl.py's create_request_error and filter_request_error), this
answers INVALID_REQUEST in every entry instead: the client learns why and nothing is stored.
A binding refused on its own (a creation with ANY in it, a principal without "Type:", a CLUSTER
resource not named kafka-cluster, an empty name) gets INVALID_REQUEST while the others of the
request are stored, as in Kafka.
"""
from __future__ import annotations

from collections.abc import Awaitable
from typing import Any

from odradek.broker import api_keys
from odradek.broker.acl_manager import AclManager
from odradek.broker.context import BrokerContext
from odradek.broker.request_authorization import allowed, wire
from odradek.protocol import kio_util
from odradek.protocol.errors import ErrorCode
from odradek.security.acl import (
    AccessControlEntry,
    AccessControlEntryFilter,
    AclBinding,
    AclBindingFilter,
    AclError,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourcePatternFilter,
    ResourceType,
    create_request_error,
    filter_request_error,
    normalized_filter,
)
from odradek.security.authorization_table import Check

_CLUSTER_DENIED = AclError(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed.")
_NO_MANAGER = AclError(ErrorCode.UNKNOWN_SERVER_ERROR, "This broker keeps no ACLs in ZooKeeper")


def _encode(api_key: int, version: int, header: Any, body: dict[str, Any]) -> bytes:
    return kio_util.encode_response(api_key, version, header.correlation_id, {"throttle_time": 0, **body})


_DESCRIBE_CHECK = wire(api_keys.DESCRIBE_ACLS).check(AclOperation.DESCRIBE, ResourceType.CLUSTER)
_CREATE_CHECK = wire(api_keys.CREATE_ACLS).check(AclOperation.ALTER, ResourceType.CLUSTER)
_DELETE_CHECK = wire(api_keys.DELETE_ACLS).check(AclOperation.ALTER, ResourceType.CLUSTER)


def _cluster_error(ctx: BrokerContext, check: Check, disabled: str) -> AclError | None:
    """Kafka's checks before any ACL is looked at: the cluster permission, then an authorizer."""
    if not allowed(ctx, check):
        return _CLUSTER_DENIED
    if ctx.authorizer is None:
        return AclError(ErrorCode.SECURITY_DISABLED, disabled)
    return None


def binding_of(creation: Any) -> AclBinding:
    """A CreateAcls creation as a binding, codes this broker does not know read as UNKNOWN."""
    return AclBinding(
        ResourcePattern(ResourceType.from_code(creation.resource_type), creation.resource_name,
                        PatternType.from_code(creation.resource_pattern_type)),
        AccessControlEntry(creation.principal, creation.host, AclOperation.from_code(creation.operation),
                           AclPermissionType.from_code(creation.permission_type)))


def filter_of(entry: Any) -> AclBindingFilter:
    """A DescribeAcls request or one DeleteAcls filter as a binding filter (same field names)."""
    return AclBindingFilter(
        ResourcePatternFilter(ResourceType.from_code(entry.resource_type_filter), entry.resource_name_filter,
                              PatternType.from_code(entry.pattern_type_filter)),
        AccessControlEntryFilter(entry.principal_filter, entry.host_filter, AclOperation.from_code(entry.operation),
                                 AclPermissionType.from_code(entry.permission_type)))


def _entry_fields(entry: AccessControlEntry) -> dict[str, Any]:
    return {"principal": entry.principal, "host": entry.host, "operation": int(entry.operation),
            "permission_type": int(entry.permission_type)}


def _error_fields(error: AclError | None) -> dict[str, Any]:
    return {"error_code": ErrorCode.NONE if error is None else error.code,
            "error_message": None if error is None else error.message}


# -- DescribeAcls (API 29) ------------------------------------------------------------------------

def describe_acls(ctx: BrokerContext, header: Any, req: Any, version: int) -> bytes:
    """The ACLs the filter selects, grouped by resource pattern (DescribeAclsResponse.aclsResources)."""
    error = _cluster_error(ctx, _DESCRIBE_CHECK, "No Authorizer is configured on the broker")
    filter_ = filter_of(req)
    if error is None:
        error = filter_request_error(filter_, version)
    if error is not None or ctx.authorizer is None:
        return _encode(api_keys.DESCRIBE_ACLS, version, header, {**_error_fields(error), "resources": []})
    resources: dict[ResourcePattern, list[dict[str, Any]]] = {}
    for binding in ctx.authorizer.describe(normalized_filter(filter_, version)):
        resources.setdefault(binding.pattern, []).append(_entry_fields(binding.entry))
    return _encode(api_keys.DESCRIBE_ACLS, version, header, {
        **_error_fields(None),
        "resources": [{"resource_type": int(p.resource_type), "resource_name": p.name,
                       "pattern_type": int(p.pattern_type), "acls": acls} for p, acls in resources.items()]})


# -- CreateAcls (API 30) --------------------------------------------------------------------------

def create_acls(ctx: BrokerContext, header: Any, req: Any, version: int) -> bytes | Awaitable[bytes]:
    bindings = [binding_of(c) for c in req.creations]
    error = _cluster_error(ctx, _CREATE_CHECK, "No Authorizer is configured.")
    if error is None:
        error = create_request_error(bindings, version)
    if error is None and ctx.acl_manager is None:
        error = _NO_MANAGER
    if error is not None or ctx.acl_manager is None:
        return _create_response(version, header, [error] * len(bindings))
    return _create(ctx.acl_manager, header, bindings, version)


async def _create(manager: AclManager, header: Any, bindings: list[AclBinding], version: int) -> bytes:
    return _create_response(version, header, await manager.create_acls(bindings))


def _create_response(version: int, header: Any, results: list[AclError | None]) -> bytes:
    return _encode(api_keys.CREATE_ACLS, version, header, {"results": [_error_fields(r) for r in results]})


# -- DeleteAcls (API 31) --------------------------------------------------------------------------

def delete_acls(ctx: BrokerContext, header: Any, req: Any, version: int) -> bytes | Awaitable[bytes]:
    filters = [filter_of(f) for f in req.filters]
    error = _cluster_error(ctx, _DELETE_CHECK, "No Authorizer is configured.")
    if error is None:
        error = next((e for f in filters if (e := filter_request_error(f, version)) is not None), None)
    if error is None and ctx.acl_manager is None:
        error = _NO_MANAGER
    if error is not None or ctx.acl_manager is None:
        return _delete_response(version, header, [(error, [])] * len(filters))
    return _delete(ctx.acl_manager, header, [normalized_filter(f, version) for f in filters], version)


async def _delete(manager: AclManager, header: Any, filters: list[AclBindingFilter], version: int) -> bytes:
    return _delete_response(version, header, await manager.delete_acls(filters))


def _delete_response(version: int, header: Any, results: list[tuple[AclError | None, list[AclBinding]]]) -> bytes:
    return _encode(api_keys.DELETE_ACLS, version, header, {"filter_results": [
        {**_error_fields(error), "matching_acls": [
            {**_error_fields(None), "resource_type": int(b.pattern.resource_type), "resource_name": b.pattern.name,
             "pattern_type": int(b.pattern.pattern_type), **_entry_fields(b.entry)} for b in removed]}
        for error, removed in results]})


ROUTES = {
    api_keys.DESCRIBE_ACLS: describe_acls,
    api_keys.CREATE_ACLS: create_acls,
    api_keys.DELETE_ACLS: delete_acls,
}
