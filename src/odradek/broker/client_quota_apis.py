"""DescribeClientQuotas (API 48) and AlterClientQuotas (API 49), KIP-546: client quotas kept in
ZooKeeper as Kafka's ZkAdminManager keeps them, so Kafka's tools (kafka-configs.sh
--entity-type users/clients) and brokers read ours and we read theirs.

Where they live (names sanitized, common/sanitizer.py; <default> for a default entity):

    /config/users/<user>                      user, and user <default>
    /config/users/<user>/clients/<client-id>  user and client id (either may be <default>)
    /config/clients/<client-id>               client id, and client id <default>

each {"version":1,"config":{"producer_byte_rate":"1048576","request_percentage":"200.0"}}: the
byte rates as longs, request_percentage and controller_mutation_rate as doubles
(client_quota_manager.quota_config_string). /config/users/<user> also holds the user's SCRAM
credentials (scram_credential_apis.py): an alteration changes only the quota keys it names and
keeps every other key. Each changed node is announced with a change notification
(users/alice/clients/app for a nested one, as Kafka writes it), which every broker's
DynamicConfigManager follows into its client quotas (client_quotas.py).

As Kafka's KafkaApis and ZkAdminManager:
- Describe needs DESCRIBE_CONFIGS on the cluster, Alter ALTER_CONFIGS (else
  CLUSTER_AUTHORIZATION_FAILED, at the top of Describe, for every entity of Alter). Any broker
  answers both, reading ZooKeeper (not its own copy), so a change shows at once everywhere.
- Describe's filter: a component per entity type ("user", "client-id"), matching one name
  (match_type 0), the default (1) or any name, the default included (2); ``strict`` leaves out
  entities with a type no component names. An empty entity type, a type named twice, an exact
  match without a name, or an unknown match type is INVALID_REQUEST; a type Kafka does not know
  is UNSUPPORTED_VERSION. Entities without quota keys (a user with only SCRAM credentials) are
  not described.
- Alter answers each entity once, and refuses it as a whole with INVALID_REQUEST: no entity
  component, an unknown entity type, a type given twice, an empty name, an unknown key, a
  key given twice, a value a byte rate cannot hold (not a whole number), the same entity twice
  in the request. The other entities of the request are still altered; validate_only checks
  without writing.

Where this differs from Kafka, and why:
- The accepted entities are written in one ZooKeeper multi, each node with its notification and
  conditional on the version read (zk/admin_zk_client.update_entity_configs), so they are all
  stored or none is, and a concurrent change of the same node (a SCRAM credential set on another
  broker) is read again rather than overwritten; Kafka writes entity after entity, node and then
  notification, the last writer winning.
- A negative or non-finite value is INVALID_REQUEST (Kafka stores it; a negative bound throttles
  every request of the client for as long as a response can say). Removing a key that is not a
  quota key is INVALID_REQUEST too: Kafka's ZooKeeper mode removes any key, a SCRAM credential
  included.
- IP quotas (KIP-612, connection_creation_rate) are not kept: an "ip" entity is INVALID_REQUEST,
  a filter on "ip" describes nothing. An alteration that changes nothing writes nothing.
- A stored value that is not a number is left out of Describe's answer (logged); Kafka fails the
  whole request.
"""
from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from odradek.broker import api_keys
from odradek.broker.client_quota_manager import (
    CLIENT_ID,
    DEFAULT,
    QUOTA_CONFIG_TYPES,
    USER,
    EntityName,
    FilterComponent,
    MatchType,
    QuotaEntity,
    entity_matches,
    parse_quota_value,
    quota_config_string,
)
from odradek.broker.client_quotas import DEFAULT_ZNODE, entity_of_znode, znode_of
from odradek.broker.context import BrokerContext
from odradek.broker.request_authorization import allowed, wire
from odradek.common.sanitizer import sanitize
from odradek.protocol import kio_util
from odradek.protocol.errors import ErrorCode
from odradek.security.acl import AclOperation, ResourceType
from odradek.zk import admin_zk_client as azk
from odradek.zk import paths
from odradek.zk.request_size import MULTI_OP_OVERHEAD, payload_budget

log = logging.getLogger("odradek.broker.client_quotas")

# what the handlers authorize (security/authorization_table.py, broker/request_authorization.py)
_DESCRIBE_CONFIGS = wire(api_keys.DESCRIBE_CLIENT_QUOTAS).check(AclOperation.DESCRIBE_CONFIGS, ResourceType.CLUSTER)
_ALTER_CONFIGS = wire(api_keys.ALTER_CLIENT_QUOTAS).check(AclOperation.ALTER_CONFIGS, ResourceType.CLUSTER)

#: Kafka's ClientQuotaEntity.IP (KIP-612), which odradek does not keep
IP = "ip"
CLUSTER_AUTHORIZATION_FAILED = "Cluster authorization failed."
UNKNOWN_SERVER_ERROR = "The server experienced an unexpected error when processing the request."
IP_UNSUPPORTED = "IP quotas (connection_creation_rate, KIP-612) are not supported by this broker"

#: (error code, message) of one entity's answer
Outcome = tuple[ErrorCode, str | None]
OK: Outcome = (ErrorCode.NONE, None)


class QuotaRequestError(Exception):
    """A request (Describe's filter) or entity (Alter's) Kafka refuses: its error and message."""

    def __init__(self, error: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.error = error
        self.message = message


def _invalid(message: str) -> QuotaRequestError:
    return QuotaRequestError(ErrorCode.INVALID_REQUEST, message)


# -- DescribeClientQuotas (API 48) ---------------------------------------------------------

async def describe_client_quotas(ctx: BrokerContext, header: Any, req: Any, version: int) -> bytes:
    if not allowed(ctx, _DESCRIBE_CONFIGS):
        body = _describe_error(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, CLUSTER_AUTHORIZATION_FAILED)
    else:
        try:
            components = parse_filter([(c.entity_type, int(c.match_type), c.match) for c in req.components])
        except QuotaRequestError as exc:
            body = _describe_error(exc.error, exc.message)
        else:
            configs = {} if components is None else await asyncio.to_thread(
                read_quota_configs, ctx.zk, components, bool(req.strict))
            body = {"error_code": ErrorCode.NONE, "error_message": None,
                    "entries": describe_entries(configs, components or {}, bool(req.strict))}
    return kio_util.encode_response(api_keys.DESCRIBE_CLIENT_QUOTAS, version, header.correlation_id,
                                    {"throttle_time": 0, **body})


def _describe_error(error: ErrorCode, message: str) -> dict[str, Any]:
    """Kafka's DescribeClientQuotasRequest.getErrorResponse: the error, no entries (null)."""
    return {"error_code": error, "error_message": message, "entries": None}


def parse_filter(components: list[tuple[str, int, str | None]]) -> dict[str, FilterComponent] | None:
    """Describe's filter components ((entity type, match type, match) each) by entity type, as
    Kafka's DescribeClientQuotasRequest.filter and ZkAdminManager.describeClientQuotas read them;
    None for a filter on IP entities alone (there are none). QuotaRequestError when refused."""
    parsed: dict[str, FilterComponent] = {}
    for entity_type, match_type, match in components:
        if entity_type == "":
            raise _invalid("Unexpected empty filter component entity type")
        if entity_type not in (USER, CLIENT_ID, IP):
            raise QuotaRequestError(ErrorCode.UNSUPPORTED_VERSION, f"Custom entity type '{entity_type}' not supported")
        if entity_type in parsed:
            raise _invalid(f"Duplicate {entity_type} filter component entity type")
        if match_type == MatchType.EXACT:
            if match is None:
                raise _invalid(f"An exact {entity_type} filter component needs a name to match")
            parsed[entity_type] = FilterComponent(MatchType.EXACT, match)
        elif match_type in (MatchType.DEFAULT, MatchType.ANY):
            parsed[entity_type] = FilterComponent(MatchType(match_type))
        else:
            raise _invalid(f"Unexpected match type: {match_type}")
    if IP in parsed:
        if USER in parsed or CLIENT_ID in parsed:
            raise _invalid("Invalid entity filter component combination, IP filter component should not be used "
                           "with user or clientId filter component.")
        return None
    return parsed


def _names(component: FilterComponent | None) -> list[str] | None:
    """The znode names a component selects, None for all."""
    if component is None or component.match_type == MatchType.ANY:
        return None
    if component.match_type == MatchType.DEFAULT:
        return [DEFAULT_ZNODE]
    return [sanitize(component.name or "")]


def read_quota_configs(zk: Any, components: Mapping[str, FilterComponent],
                       strict: bool) -> dict[QuotaEntity, dict[str, str]]:
    """On a thread: the stored configs of every entity the filter may select, by entity, read
    as Kafka's handleDescribeClientQuotas reads them (only the kinds of entity the filter can
    select, the names it matches exactly without listing) in one batched read per entity type."""
    user, client = components.get(USER), components.get(CLIENT_ID)
    users_possible = user is not None or not strict  # entities with a user part
    clients_possible = client is not None or not strict  # entities with a client-id part
    user_names: list[str] = []
    if users_possible:
        user_names = _names(user) or zk.get_entity_names(azk.USERS)
    names: list[str] = []
    if users_possible and client is None:
        names += user_names  # /config/users/<user>
    if users_possible and clients_possible:
        exact = _names(client)
        if exact is None:
            names += zk.get_child_entity_names(azk.USERS, user_names, azk.CLIENTS)
        else:
            names += [f"{u}/{azk.CLIENTS}/{c}" for u in user_names for c in exact]
    client_names: list[str] = []
    if clients_possible and user is None:
        client_names = _names(client) or zk.get_entity_names(azk.CLIENTS)
    configs: dict[QuotaEntity, dict[str, str]] = {}
    for entity_type, read in ((azk.USERS, names), (azk.CLIENTS, client_names)):
        for name, config in (zk.get_entity_configs(entity_type, read) if read else {}).items():
            entity = entity_of_znode(entity_type, name)
            if entity is None:
                log.warning("ignoring /config/%s/%s: not a quota entity Kafka's tools write", entity_type, name)
            elif config:
                configs[entity] = config
    return configs


def quota_values(entity: QuotaEntity, config: Mapping[str, str]) -> dict[str, float]:
    """The quota keys of a stored config, as numbers (keys in Kafka's order); a value that is no
    number is left out, logged."""
    values = {}
    for key in QUOTA_CONFIG_TYPES:
        text = config.get(key)
        if text is None:
            continue
        try:
            values[key] = parse_quota_value(key, text)
        except ValueError:
            log.warning("describing %s: its %s=%r is not a number; left out", entity, key, text)
    return values


def _sort_key(entity: QuotaEntity) -> tuple[tuple[int, str], tuple[int, str]]:
    def part(name: EntityName | None) -> tuple[int, str]:
        return (2, "") if name is None else (1, "") if name is DEFAULT else (0, str(name))
    return part(entity.user), part(entity.client_id)


def entity_data(entity: QuotaEntity) -> list[dict[str, Any]]:
    """An entity as the responses describe it: a component per type, the default's name null."""
    return [{"entity_type": kind, "entity_name": None if name is DEFAULT else name}
            for kind, name in ((USER, entity.user), (CLIENT_ID, entity.client_id)) if name is not None]


def describe_entries(configs: Mapping[QuotaEntity, Mapping[str, str]], components: Mapping[str, FilterComponent],
                     strict: bool) -> list[dict[str, Any]]:
    """Describe's entries: each entity the filter selects that sets a quota, with its quotas."""
    entries = []
    for entity in sorted(configs, key=_sort_key):
        values = quota_values(entity, configs[entity])
        if values and entity_matches(entity, components, strict):
            entries.append({"entity": entity_data(entity),
                            "values": [{"key": k, "value": v} for k, v in values.items()]})
    return entries


# -- AlterClientQuotas (API 49) ------------------------------------------------------------

#: an entity as the request names it: its (type, name) components, in the request's order
RawEntity = tuple[tuple[str, str | None], ...]


@dataclass
class Alteration:
    """One entity of an AlterClientQuotas request: the quota keys to set (a stored string) or
    remove (None), or why it is refused."""

    raw: RawEntity
    entity: QuotaEntity | None = None
    ops: dict[str, str | None] | None = None
    refused: Outcome | None = None


async def alter_client_quotas(ctx: BrokerContext, header: Any, req: Any, version: int) -> bytes:
    raws = [tuple((c.entity_type, c.entity_name) for c in entry.entity) for entry in req.entries]
    if not allowed(ctx, _ALTER_CONFIGS):
        outcomes: dict[RawEntity, Outcome] = dict.fromkeys(
            raws, (ErrorCode.CLUSTER_AUTHORIZATION_FAILED, CLUSTER_AUTHORIZATION_FAILED))
    else:
        alterations = check_alterations(
            [(raw, [(op.key, float(op.value), bool(op.remove)) for op in entry.ops])
             for raw, entry in zip(raws, req.entries)])
        outcomes = await asyncio.to_thread(_alter, ctx.zk, alterations, bool(req.validate_only),
                                           ctx.config.zookeeper_jute_maxbuffer)
    entries = [{"error_code": code, "error_message": message,
                "entity": [{"entity_type": t, "entity_name": n} for t, n in raw]}
               for raw, (code, message) in outcomes.items()]
    return kio_util.encode_response(api_keys.ALTER_CLIENT_QUOTAS, version, header.correlation_id,
                                    {"throttle_time": 0, "entries": entries})


def parse_entity(raw: RawEntity) -> QuotaEntity:
    """The quota entity a request names (Kafka's parseAndSanitizeQuotaEntity); QuotaRequestError
    (INVALID_REQUEST) for one it refuses."""
    if not raw:
        raise _invalid("Invalid empty client quota entity")
    seen: dict[str, str | None] = {}
    for entity_type, name in raw:
        if entity_type not in (USER, CLIENT_ID, IP):
            raise _invalid(f"Unhandled client quota entity type: {entity_type}")
        if entity_type in seen:
            raise _invalid(f"The {entity_type} entity type is named twice in one entity")
        if name is not None and not name:
            raise _invalid(f"Empty {entity_type} not supported")
        seen[entity_type] = name
    if IP in seen:
        if len(seen) > 1:
            raise _invalid("Invalid quota entity combination, IP entity should not be used with user/client ID entity.")
        raise _invalid(IP_UNSUPPORTED)

    def part(kind: str) -> EntityName | None:
        if kind not in seen:
            return None
        name = seen[kind]
        return DEFAULT if name is None else name

    return QuotaEntity(part(USER), part(CLIENT_ID))


def parse_ops(entity: QuotaEntity, ops: list[tuple[str, float, bool]]) -> dict[str, str | None]:
    """The keys to set (their stored strings) and remove (None); QuotaRequestError
    (INVALID_REQUEST) for an unknown key, a key named twice, a value the key cannot hold."""
    parsed: dict[str, str | None] = {}
    for key, value, remove in ops:
        if key in parsed:
            raise _invalid(f"Duplicate quota key {key} not updating quota for this entity {entity}")
        if key not in QUOTA_CONFIG_TYPES:
            raise _invalid(f"Invalid configuration key {key}")
        if remove:
            parsed[key] = None
            continue
        if math.isfinite(value) and value < 0:
            raise _invalid(f"Quota {key} must not be negative, got {value}")
        try:
            parsed[key] = quota_config_string(key, value)
        except ValueError as exc:
            raise _invalid(str(exc)) from None
    return parsed


def check_alterations(entries: list[tuple[RawEntity, list[tuple[str, float, bool]]]]) -> list[Alteration]:
    """Each distinct entity of the request (as named: one answer each, in request order), parsed
    and checked; an entity named twice is refused."""
    alterations: dict[RawEntity, Alteration] = {}
    by_entity: dict[QuotaEntity, Alteration] = {}
    for raw, ops in entries:
        if raw in alterations:
            alterations[raw].refused = (ErrorCode.INVALID_REQUEST, "Ignoring duplicate entity: it is altered more "
                                        "than once in the request")
            continue
        alteration = alterations[raw] = Alteration(raw)
        try:
            alteration.entity = parse_entity(raw)
            alteration.ops = parse_ops(alteration.entity, ops)
        except QuotaRequestError as exc:
            alteration.refused = (exc.error, exc.message)
            continue
        other = by_entity.get(alteration.entity)
        if other is not None:  # the same entity with its components in another order
            for twice in (other, alteration):
                twice.refused = (ErrorCode.INVALID_REQUEST, "Ignoring duplicate entity: it is altered more than "
                                 "once in the request")
        by_entity[alteration.entity] = alteration
    return list(alterations.values())


def altered_config(config: Mapping[str, str], ops: Mapping[str, str | None]) -> dict[str, str]:
    """A node's config after the alteration: the quota keys named set or removed, every other
    key (SCRAM credentials, quotas not named) kept."""
    out = dict(config)
    for key, value in ops.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = value
    return out


class _TooLarge(Exception):
    pass


def _multi_bytes(changes: Mapping[tuple[str, str], Mapping[str, str]]) -> int:
    notification = len(f"{paths.CONFIG_CHANGES}/{azk.CONFIG_CHANGE_PREFIX}")
    return sum(3 * MULTI_OP_OVERHEAD + 2 * len(azk.entity_path(*key)) + len(paths.encode_topic_config(config))
               + notification + len(azk.encode_notification(*key)) for key, config in changes.items())


def _alter(zk: Any, alterations: list[Alteration], validate_only: bool, jute_maxbuffer: int
           ) -> dict[RawEntity, Outcome]:
    """On a thread: the accepted entities' nodes read, altered and written back in one
    conditional multi (none with validate_only); each entity's outcome, in request order."""
    outcomes: dict[RawEntity, Outcome] = {a.raw: a.refused or OK for a in alterations}
    accepted = {znode_of(a.entity): a for a in alterations if a.refused is None and a.entity is not None}
    if not accepted:
        return outcomes
    budget = payload_budget(jute_maxbuffer)

    def update(current: dict[tuple[str, str], dict[str, str]]) -> dict[tuple[str, str], dict[str, str]]:
        changes = {}
        for key, alteration in accepted.items():
            config = altered_config(current[key], alteration.ops or {})
            if config != current[key]:
                changes[key] = config
        if _multi_bytes(changes) > budget:
            raise _TooLarge(f"The request's {len(changes)} entities take {_multi_bytes(changes)} bytes of ZooKeeper "
                            f"data, more than the {budget} one transaction may carry; send fewer per request")
        return changes

    failed: Outcome | None = None
    try:
        written = zk.update_entity_configs(list(accepted), update, validate_only)
    except _TooLarge as exc:
        failed = (ErrorCode.INVALID_REQUEST, str(exc))
    except Exception:  # noqa: BLE001 - ZooKeeper trouble: these entities fail, the refused keep their error
        log.exception("storing the client quotas of %s failed", sorted(accepted))
        failed = (ErrorCode.UNKNOWN_SERVER_ERROR, UNKNOWN_SERVER_ERROR)
    else:
        if written and not validate_only:
            log.info("client quotas altered: %s", "; ".join(
                f"{accepted[key].entity}: {_summary(accepted[key].ops or {})}" for key in written))
    if failed is not None:
        outcomes.update({a.raw: failed for a in accepted.values()})
    return outcomes


def _summary(ops: Mapping[str, str | None]) -> str:
    return ", ".join(f"-{k}" if v is None else f"{k}={v}" for k, v in ops.items())


ROUTES: dict[int, Callable[..., Any]] = {
    api_keys.DESCRIBE_CLIENT_QUOTAS: describe_client_quotas,
    api_keys.ALTER_CLIENT_QUOTAS: alter_client_quotas,
}
