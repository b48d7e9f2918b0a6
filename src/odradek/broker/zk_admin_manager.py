"""Kafka's ZkAdminManager for configs: AlterConfigs (the whole config of a resource replaced)
and IncrementalAlterConfigs (KIP-339: SET, DELETE, APPEND and SUBTRACT per key).

Each resource is checked on its own (an unknown key, a bad value, a key given twice, a
read-only broker config) and answers its own error; nothing of a refused resource is stored.
The accepted resources are written together, each with its change notification, in one
ZooKeeper multi (zk/admin_zk_client.py), which also checks that each topic exists; the brokers
apply them when the notification reaches them (dynamic_config_manager.py). validate_only
checks everything and writes nothing.

With an authorizer, as Kafka's KafkaApis: a topic needs ALTER_CONFIGS on it (else
TOPIC_AUTHORIZATION_FAILED), a broker ALTER_CONFIGS on the cluster (else
CLUSTER_AUTHORIZATION_FAILED; IncrementalAlterConfigs checks broker loggers so too), before
anything else about the resource is looked at; a denied resource is not written.
"""
from __future__ import annotations

import asyncio
from typing import Any, Callable

from odradek.broker import api_keys
from odradek.broker.config_helper import BROKER_LOGGER_RESOURCE, BROKER_RESOURCE, TOPIC_RESOURCE, unauthorized_resources
from odradek.broker.context import BrokerContext
from odradek.broker.dynamic_broker_config import (
    DEFAULT_ENTITY,
    check_broker_config_name,
    config_type,
    validate_broker_config,
)
from odradek.broker.request_authorization import wire
from odradek.broker.topic_admin import TOPIC_CONFIG_DEFAULTS, TopicError, validate_configs, validate_topic_name
from odradek.broker.topic_config_synonyms import LIST
from odradek.protocol import kio_util
from odradek.protocol.errors import ErrorCode
from odradek.security.acl import AclOperation, ResourceType
from odradek.security.authorization_table import Check
from odradek.zk import admin_zk_client as azk

SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
_OPERATIONS = {SET: "SET", DELETE: "DELETE", APPEND: "APPEND", SUBTRACT: "SUBTRACT"}

Entity = tuple[str, str]  # (azk.TOPICS or azk.BROKERS, name)

_ALTER_CONFIGS, _INCREMENTAL = wire(api_keys.ALTER_CONFIGS), wire(api_keys.INCREMENTAL_ALTER_CONFIGS)
#: (the cluster's check for broker resources, the topics' check) of each API
_CHECKS: dict[int, tuple[Check, Check]] = {
    api_keys.ALTER_CONFIGS: (_ALTER_CONFIGS.check(AclOperation.ALTER_CONFIGS, ResourceType.CLUSTER),
                             _ALTER_CONFIGS.check(AclOperation.ALTER_CONFIGS, ResourceType.TOPIC)),
    api_keys.INCREMENTAL_ALTER_CONFIGS: (_INCREMENTAL.check(AclOperation.ALTER_CONFIGS, ResourceType.CLUSTER),
                                         _INCREMENTAL.check(AclOperation.ALTER_CONFIGS, ResourceType.TOPIC)),
}


def _entity(ctx: BrokerContext, res: Any) -> Entity:
    if res.resource_type == TOPIC_RESOURCE:
        validate_topic_name(res.resource_name)  # never a ZooKeeper path of its own ("../x")
        return azk.TOPICS, res.resource_name
    if res.resource_type == BROKER_RESOURCE:
        name = res.resource_name
        if name != "" and not (name.isdigit() and name.isascii()):
            raise TopicError(ErrorCode.INVALID_REQUEST, f"Broker id must be an integer or empty, got {name!r}")
        return azk.BROKERS, DEFAULT_ENTITY if name == "" else str(int(name))
    raise TopicError(ErrorCode.INVALID_REQUEST, f"Unsupported resource type {res.resource_type}")


def _validate(entity: Entity, config: dict[str, str | None]) -> dict[str, str]:
    if entity[0] == azk.TOPICS:
        return validate_configs(config)
    return {k: validate_broker_config(k, v) for k, v in config.items()}


def _no_duplicates(names: list[str]) -> None:
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise TopicError(ErrorCode.INVALID_REQUEST, f"Error due to duplicate config keys: {name}")
        seen.add(name)


def _check_name(entity: Entity, name: str) -> None:
    if entity[0] == azk.BROKERS:
        check_broker_config_name(name)
    elif name not in TOPIC_CONFIG_DEFAULTS:
        raise TopicError(ErrorCode.INVALID_CONFIG, f"Unknown topic config name: {name}")


def _incremental(entity: Entity, current: dict[str, str], ops: Any) -> dict[str, str]:
    """Kafka's prepareIncrementalConfigs: the stored config after the operations, each checked.
    APPEND and SUBTRACT work on list configs only (cleanup.policy, the throttled-replica lists),
    starting from the default where the entity does not set the key, and keep each item once."""
    _no_duplicates([op.name for op in ops])
    out = dict(current)
    topic = entity[0] == azk.TOPICS
    for op in ops:
        name, value, operation = op.name, op.value, op.config_operation
        _check_name(entity, name)
        if operation == SET:
            out[name] = _validate(entity, {name: value})[name]
        elif operation == DELETE:
            out.pop(name, None)
        elif operation in (APPEND, SUBTRACT):
            if config_type(name, topic) != LIST:
                raise TopicError(ErrorCode.INVALID_CONFIG, f"Config value {_OPERATIONS[operation].lower()} "
                                                           f"is not allowed for config key: {name}")
            # a topic list's own default; the one broker list config is log.cleanup.policy
            default = TOPIC_CONFIG_DEFAULTS[name if topic else "cleanup.policy"]
            old = [v for v in out.get(name, default).split(",") if v]
            given = [v.strip() for v in (value or "").split(",") if v.strip()]
            new = (list(dict.fromkeys(old + given)) if operation == APPEND
                   else [v for v in old if v not in given])
            out[name] = _validate(entity, {name: ",".join(new)})[name]
        else:
            raise TopicError(ErrorCode.INVALID_REQUEST, f"Unknown config operation {operation} for {name}")
    return out


async def alter_configs(ctx: BrokerContext, header: Any, req: Any, version: int) -> bytes:
    def replace(entity: Entity, _current: dict[str, str], res: Any) -> dict[str, str]:
        _no_duplicates([c.name for c in res.configs])
        return _validate(entity, {c.name: c.value for c in res.configs})

    results = await _alter(ctx, req, replace, read_current=False, api_key=api_keys.ALTER_CONFIGS)
    return kio_util.encode_response(api_keys.ALTER_CONFIGS, version, header.correlation_id,
                                    {"throttle_time": 0, "responses": results})


async def incremental_alter_configs(ctx: BrokerContext, header: Any, req: Any, version: int) -> bytes:
    results = await _alter(ctx, req, lambda entity, current, res: _incremental(entity, current, res.configs),
                           read_current=True, api_key=api_keys.INCREMENTAL_ALTER_CONFIGS)
    return kio_util.encode_response(api_keys.INCREMENTAL_ALTER_CONFIGS, version, header.correlation_id,
                                    {"throttle_time": 0, "responses": results})


async def _alter(ctx: BrokerContext, req: Any,
                 new_config: Callable[[Entity, dict[str, str], Any], dict[str, str]],
                 read_current: bool, api_key: int) -> list[dict[str, Any]]:
    errors: dict[int, tuple[int, str | None]] = {}
    # AlterConfigs knows no broker loggers (refused below as an unsupported type)
    broker_types = (BROKER_RESOURCE,) if api_key == api_keys.ALTER_CONFIGS else (BROKER_RESOURCE, BROKER_LOGGER_RESOURCE)
    unauthorized = unauthorized_resources(ctx, req.resources, *_CHECKS[api_key], broker_types)
    errors.update((i, (code, None)) for i, code in unauthorized.items())
    entities: dict[int, Entity] = {}
    for i, res in enumerate(req.resources):
        if i in errors:
            continue
        try:
            entities[i] = _entity(ctx, res)
        except TopicError as exc:
            errors[i] = (exc.code, str(exc))
    if read_current:
        current = await asyncio.to_thread(_read_current, ctx, set(entities.values()))
    else:
        current = {}
    changes: dict[Entity, dict[str, str]] = {}
    owner: dict[Entity, int] = {}
    for i, entity in entities.items():
        res = req.resources[i]
        try:
            if entity in owner:
                raise TopicError(ErrorCode.INVALID_REQUEST, f"Resource {entity[1]} given more than once")
            changes[entity] = new_config(entity, current.get(entity, {}), res)
            owner[entity] = i
        except TopicError as exc:
            errors[i] = (exc.code, str(exc))
    unknown = await asyncio.to_thread(ctx.zk.change_entity_configs, changes, req.validate_only)
    for topic in unknown:
        errors[owner[(azk.TOPICS, topic)]] = (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic {topic} does not exist")
    return [{"error_code": errors.get(i, (0, None))[0], "error_message": errors.get(i, (0, None))[1],
             "resource_type": res.resource_type, "resource_name": res.resource_name}
            for i, res in enumerate(req.resources)]


def _read_current(ctx: BrokerContext, entities: set[Entity]) -> dict[Entity, dict[str, str]]:
    out: dict[Entity, dict[str, str]] = {}
    for entity_type in (azk.TOPICS, azk.BROKERS):
        names = [name for t, name in entities if t == entity_type]
        out.update(((entity_type, n), c) for n, c in ctx.zk.get_entity_configs(entity_type, names).items())
    return out
