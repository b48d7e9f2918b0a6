"""Client quotas as kafka-configs.sh sets and shows them (--entity-type users / clients,
--entity-name or --entity-default, --add-config producer_byte_rate=..., --delete-config ...,
--describe), behind `odradek quotas alter|describe`.

Only the Kafka protocol, as Kafka's AdminClient sends it (KIP-546): AlterClientQuotas and
DescribeClientQuotas to any broker (the first of the bootstrap servers that answers), so it works
against Apache Kafka 2.6+ brokers as well. Version 0 of both, which every such broker speaks
(v1 only makes the encoding flexible).

An entity names a user, a client id or both; each part is a name or the default (``DEFAULT``:
Kafka's <default> entity, null on the wire). Describing, a part may also be ``ANY`` (every name,
the default included), and the filter is strict (kafka-configs.sh's ClientQuotaFilter.containsOnly):
only entities made of exactly the parts given. Without any part, every entity is described.
"""
from __future__ import annotations

import enum
from typing import Any

from odradek.admin.admin_client import format_table, request_first
from odradek.admin.errors import AdminError
from odradek.protocol.errors import error_name

DESCRIBE_CLIENT_QUOTAS, ALTER_CLIENT_QUOTAS = 48, 49
VERSION = 0
CLIENT_ID = "odradek-quotas"
USER, CLIENT = "user", "client-id"
#: DescribeClientQuotas' match types
EXACT, MATCH_DEFAULT, MATCH_ANY = 0, 1, 2
#: the quota keys Kafka's users and clients entities take, and which hold whole numbers
QUOTA_KEYS = ("producer_byte_rate", "consumer_byte_rate", "request_percentage", "controller_mutation_rate")
LONG_KEYS = frozenset({"producer_byte_rate", "consumer_byte_rate"})
DEFAULT_NAME = "<default>"


class Part(enum.Enum):
    """An entity part that is not a name: the default entity, or (describing) any name."""

    DEFAULT = "default"
    ANY = "any"


DEFAULT = Part.DEFAULT
ANY = Part.ANY

#: a user or client id part: a name, DEFAULT, ANY, or None (not part of the entity)
Selector = str | Part | None


def error_text(code: int, message: str | None) -> str:
    return f"{error_name(code)}: {message}" if message else error_name(code)


def entity_text(user: Selector, client_id: Selector) -> str:
    """``user alice, client-id <default>``: an entity as the commands name it."""
    parts = []
    for kind, value in ((USER, user), (CLIENT, client_id)):
        if value is ANY:
            parts.append(f"every {kind}")
        elif value is DEFAULT:
            parts.append(f"{kind} {DEFAULT_NAME}")
        elif value is not None:
            parts.append(f"{kind} {value}")
    return ", ".join(parts)


def format_value(key: str, value: float) -> str:
    """A byte rate as the whole number it is stored as, a percentage as a decimal."""
    return str(int(value)) if key in LONG_KEYS and float(value).is_integer() else repr(float(value))


class ClientQuotaAdmin:
    """The requests of one command, each allowed ``timeout`` seconds."""

    def __init__(self, bootstrap: str, timeout: float) -> None:
        self.bootstrap, self.timeout = bootstrap, timeout

    def _send(self, api_key: int, body: dict[str, Any]) -> Any:
        return request_first(self.bootstrap.split(","), self.bootstrap, api_key, VERSION, body, self.timeout,
                             CLIENT_ID)

    def describe(self, user: Selector = None, client_id: Selector = None) -> list[dict[str, Any]]:
        """The quotas of the entities selected: [{"entity": {"user": name or None for the
        default, "client-id": ...} (only the parts it has), "quotas": {key: value}}], users
        first, then by name. AdminError when the broker refuses the request."""
        components = []
        for kind, value in ((USER, user), (CLIENT, client_id)):
            if value is ANY:
                components.append({"entity_type": kind, "match_type": MATCH_ANY, "match": None})
            elif value is DEFAULT:
                components.append({"entity_type": kind, "match_type": MATCH_DEFAULT, "match": None})
            elif value is not None:
                components.append({"entity_type": kind, "match_type": EXACT, "match": value})
        response = self._send(DESCRIBE_CLIENT_QUOTAS, {"components": components, "strict": bool(components)})
        if int(response.error_code):
            raise AdminError(f"cannot describe client quotas: "
                             f"{error_text(int(response.error_code), response.error_message)}")
        rows = [{"entity": {e.entity_type: e.entity_name for e in entry.entity},
                 "quotas": {v.key: float(v.value) for v in entry.values}} for entry in response.entries or ()]

        def order(row: dict[str, Any]) -> tuple[Any, ...]:
            """Users (each: its own quotas, then its client ids), then client ids; names, then
            the default."""
            entity = row["entity"]
            user, client = entity.get(USER), entity.get(CLIENT)
            return (USER not in entity, user is None, user or "", CLIENT in entity, client is None, client or "")

        return sorted(rows, key=order)

    def alter(self, user: Selector, client_id: Selector, add: dict[str, float], delete: list[str],
              validate_only: bool = False) -> None:
        """Set the quotas ``add`` and remove those ``delete`` names of one entity (its user and
        client id each a name, DEFAULT, or None for not part of it), in one AlterClientQuotas.
        AdminError with the broker's reason when it refuses."""
        if user is ANY or client_id is ANY:
            raise ValueError("an alteration names its entity: a name or the default")
        entity = [{"entity_type": kind, "entity_name": None if value is DEFAULT else value}
                  for kind, value in ((USER, user), (CLIENT, client_id)) if value is not None]
        ops = [{"key": k, "value": float(v), "remove": False} for k, v in add.items()]
        ops += [{"key": k, "value": 0.0, "remove": True} for k in delete]
        response = self._send(ALTER_CLIENT_QUOTAS, {"entries": [{"entity": entity, "ops": ops}],
                                                    "validate_only": validate_only})
        for entry in response.entries:
            if int(entry.error_code):
                raise AdminError(f"cannot alter the quotas of {entity_text(user, client_id)}: "
                                 f"{error_text(int(entry.error_code), entry.error_message)}")


def format_describe(rows: list[dict[str, Any]]) -> str:
    """One row per entity: User, Client-Id (blank when not part of it, <default> for the
    default), and its quotas."""
    if not rows:
        return "no client quotas"

    def shown(entity: dict[str, str | None], kind: str) -> str:
        if kind not in entity:
            return ""
        name = entity[kind]
        return DEFAULT_NAME if name is None else name

    table: list[tuple[str, ...]] = [("User", "Client-Id", "Quotas")]
    table += [(shown(r["entity"], USER), shown(r["entity"], CLIENT),
               ", ".join(f"{k}={format_value(k, v)}" for k, v in r["quotas"].items())) for r in rows]
    return format_table(table)
