"""The broker's one question to its authorizer: may the current request's principal do this?

Kafka's AuthHelper.authorize: with no authorizer configured (authorizer.class.name empty, the
default) everything is allowed; otherwise the ACL authorizer decides for the session of the
connection the request came on (broker/session.py).
"""
from __future__ import annotations

from odradek.broker.context import BrokerContext
from odradek.broker.session import current_session
from odradek.security.acl import AclOperation, ResourceType


def authorize(ctx: BrokerContext, operation: AclOperation, resource_type: ResourceType, name: str) -> bool:
    authorizer = ctx.authorizer
    if authorizer is None:
        return True
    session = current_session()
    return authorizer.authorize(session.principal, session.client_host, operation, resource_type, name)


def authorize_by_resource_type(ctx: BrokerContext, operation: AclOperation, resource_type: ResourceType) -> bool:
    """May the principal do ``operation`` on at least one resource of the type (Kafka's
    authorizeByResourceType, as InitProducerId asks for IDEMPOTENT_WRITE without a cluster ACL)?"""
    authorizer = ctx.authorizer
    if authorizer is None:
        return True
    session = current_session()
    return authorizer.authorize_by_resource_type(session.principal, session.client_host, operation, resource_type)
