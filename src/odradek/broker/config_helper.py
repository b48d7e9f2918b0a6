"""Kafka's ConfigHelper: DescribeConfigs for topics and brokers.

Every config the broker honours is listed with its value and where the value comes from (the
ConfigSource numbers in dynamic_broker_config.py); with include_synonyms, every layer that has
it, highest precedence first, as Kafka lists them (a topic's retention.ms: the topic's own,
then log.retention.ms of this broker, of the cluster default, of the config file, the default).

The dynamic layers are read from ZooKeeper for each request rather than taken from this
broker's applied copy, so a describe right after an alter shows the alter on every broker.

With an authorizer, as Kafka's ConfigHelper: a topic needs DESCRIBE_CONFIGS on it (else
TOPIC_AUTHORIZATION_FAILED), a broker (or broker logger) DESCRIBE_CONFIGS on the cluster (else
CLUSTER_AUTHORIZATION_FAILED); a denied resource is answered without configs and not read.
"""
from __future__ import annotations

import asyncio
from typing import Any

from odradek.broker import api_keys
from odradek.broker.context import BrokerContext
from odradek.broker.dynamic_broker_config import (
    DEFAULT_CONFIG,
    DEFAULT_ENTITY,
    DYNAMIC,
    DYNAMIC_TOPIC_CONFIG,
    DynamicBrokerConfig,
    Synonym,
    config_type,
    documentation,
)
from odradek.broker.request_authorization import MESSAGES, allowed, denied, refusal, wire
from odradek.broker.topic_admin import TOPIC_CONFIG_DEFAULTS, is_legal_topic_name
from odradek.protocol import kio_util
from odradek.protocol.errors import ErrorCode
from odradek.security.acl import AclOperation, ResourceType
from odradek.security.authorization_table import Check
from odradek.zk import admin_zk_client as azk

TOPIC_RESOURCE, BROKER_RESOURCE, BROKER_LOGGER_RESOURCE = 2, 4, 8

_DESCRIBE_CONFIGS = wire(api_keys.DESCRIBE_CONFIGS)
_DESCRIBE_BROKER = _DESCRIBE_CONFIGS.check(AclOperation.DESCRIBE_CONFIGS, ResourceType.CLUSTER)
_DESCRIBE_TOPIC = _DESCRIBE_CONFIGS.check(AclOperation.DESCRIBE_CONFIGS, ResourceType.TOPIC)


def unauthorized_resources(ctx: BrokerContext, resources: Any, broker: Check, topic: Check,
                           broker_types: tuple[int, ...] = (BROKER_RESOURCE, BROKER_LOGGER_RESOURCE)
                           ) -> dict[int, ErrorCode]:
    """By position in ``resources``, the config resources the principal may not see or change:
    those of ``broker_types`` without the ``broker`` check on the cluster, the topics without the
    ``topic`` check on them (Kafka's ConfigHelper and processAlterConfigsRequest). Each topic
    and the cluster are asked once."""
    if ctx.authorizer is None:
        return {}
    topics = denied(ctx, topic, (r.resource_name for r in resources if r.resource_type == TOPIC_RESOURCE))
    brokers_denied = any(r.resource_type in broker_types for r in resources) and not allowed(ctx, broker)
    out = {}
    for i, r in enumerate(resources):
        if r.resource_type == TOPIC_RESOURCE and r.resource_name in topics:
            out[i] = refusal(topic)
        elif r.resource_type in broker_types and brokers_denied:
            out[i] = refusal(broker)
    return out


def current_broker_config(ctx: BrokerContext) -> DynamicBrokerConfig:
    """On a thread: this broker's layered config with the dynamic layers as ZooKeeper has them."""
    config = DynamicBrokerConfig(ctx.config)
    entities = [str(ctx.config.broker_id), DEFAULT_ENTITY]
    for entity, stored in ctx.zk.get_entity_configs(azk.BROKERS, entities).items():
        config.update(entity, stored)
    return config


def created_topic_configs(config: DynamicBrokerConfig, own: dict[str, str]) -> list[dict[str, Any]]:
    """CreateTopics' configs of a new topic (v5+): its own, else where its broker takes them."""
    out = []
    for k in sorted(TOPIC_CONFIG_DEFAULTS):
        layer = Synonym(k, own[k], DYNAMIC_TOPIC_CONFIG) if k in own else config.topic_synonyms(k)[0]
        out.append({"name": k, "value": layer.value, "read_only": False, "config_source": layer.source,
                    "is_sensitive": False})
    return out


def broker_entity(ctx: BrokerContext, resource_name: str) -> str | None:
    """The /config/brokers child a BROKER resource names: "" is the cluster default; another
    broker's id is refused, as Kafka does (clients send a broker's resource to that broker)."""
    if resource_name == "":
        return DEFAULT_ENTITY
    if resource_name == str(ctx.config.broker_id):
        return resource_name
    return None


def _read(ctx: BrokerContext, topics: list[str]) -> tuple[DynamicBrokerConfig, dict[str, dict[str, str]],
                                                          set[str] | None]:
    config = current_broker_config(ctx)
    stored = ctx.zk.get_topic_configs(topics) if topics else {}
    # until the controller has spoken, which topics exist is ZooKeeper's word
    existing = None if not topics or ctx.metadata.initialized else ctx.zk.get_all_topics()
    return config, stored, existing


def _config_entry(name: str, layers: list[Synonym], read_only: bool, is_topic: bool, synonyms_wanted: bool,
                  docs_wanted: bool) -> dict[str, Any]:
    """One DescribeConfigs entry. A config no layer has (broker.rack unset) is answered as Kafka
    answers it: value null, source DEFAULT_CONFIG, no synonyms."""
    value, source = (layers[0].value, layers[0].source) if layers else (None, DEFAULT_CONFIG)
    return {"name": name, "value": value, "read_only": read_only, "config_source": source,
            "is_default": source == DEFAULT_CONFIG, "is_sensitive": False,
            "synonyms": [{"name": s.name, "value": s.value, "source": s.source} for s in layers]
            if synonyms_wanted else [],
            "config_type": config_type(name, is_topic),
            "documentation": documentation(name, is_topic) if docs_wanted else None}


async def describe_configs(ctx: BrokerContext, header: Any, req: Any, version: int) -> bytes:
    unauthorized = unauthorized_resources(ctx, req.resources, _DESCRIBE_BROKER, _DESCRIBE_TOPIC)
    topics = [r.resource_name for i, r in enumerate(req.resources)
              if r.resource_type == TOPIC_RESOURCE and is_legal_topic_name(r.resource_name) and i not in unauthorized]
    config, stored, existing = await asyncio.to_thread(_read, ctx, topics)
    synonyms_wanted = bool(getattr(req, "include_synonyms", False))
    docs_wanted = bool(getattr(req, "include_documentation", False))
    results = []
    for i, res in enumerate(req.resources):
        entry: dict[str, Any] = {"error_code": 0, "error_message": None, "resource_type": res.resource_type,
                                 "resource_name": res.resource_name, "configs": []}
        values: dict[str, list[Synonym]]
        if i in unauthorized:
            entry.update(error_code=unauthorized[i], error_message=MESSAGES[unauthorized[i]])
            results.append(entry)
            continue
        if res.resource_type == TOPIC_RESOURCE:
            name = res.resource_name
            if not is_legal_topic_name(name) or (
                    ctx.metadata.partitions(name) is None if existing is None else name not in existing):
                entry.update(error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                             error_message=f"Topic {name} does not exist")
                results.append(entry)
                continue
            own = stored.get(name, {})
            values = {k: ([Synonym(k, own[k], DYNAMIC_TOPIC_CONFIG)] if k in own else [])
                      + config.topic_synonyms(k) for k in TOPIC_CONFIG_DEFAULTS}
            read_only: set[str] = set()
            is_topic = True
        elif res.resource_type == BROKER_RESOURCE:
            entity = broker_entity(ctx, res.resource_name)
            if entity is None:
                entry.update(error_code=ErrorCode.INVALID_REQUEST,
                             error_message=f"Unexpected broker id, expected {ctx.config.broker_id} or empty "
                                           f"string, but received {res.resource_name}")
                results.append(entry)
                continue
            values = config.describe(per_broker=entity != DEFAULT_ENTITY)
            read_only = set(values) - DYNAMIC
            is_topic = False
        else:
            entry.update(error_code=ErrorCode.INVALID_REQUEST,
                         error_message=f"Unsupported resource type {res.resource_type}")
            results.append(entry)
            continue
        keys = res.configuration_keys
        entry["configs"] = [_config_entry(k, layers, k in read_only, is_topic, synonyms_wanted, docs_wanted)
                            for k, layers in sorted(values.items()) if keys is None or k in keys]
        results.append(entry)
    return kio_util.encode_response(api_keys.DESCRIBE_CONFIGS, version, header.correlation_id,
                                    {"throttle_time": 0, "results": results})
