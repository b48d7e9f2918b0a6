"""Kafka's DynamicBrokerConfig: a broker's settings as layers, and which of them may change
while the broker runs.

A broker setting's value comes from the first layer that has it, as in Kafka:
/config/brokers/<id> (DYNAMIC_BROKER_CONFIG), /config/brokers/<default> (the cluster default,
DYNAMIC_DEFAULT_BROKER_CONFIG), the broker's config file or flags (STATIC_BROKER_CONFIG), its
built-in default (DEFAULT_CONFIG). A topic config a topic does not set comes from its broker
synonym (Kafka's LogConfig.TopicConfigSynonyms, topic_config_synonyms.py: retention.ms from
log.retention.ms) through the same layers, so a cluster-default log.retention.ms reaches every
topic without its own.

The dynamic configs are those Kafka's DynamicLogConfig, LogCleaner and the replication quotas
accept at runtime and odradek honours; every other broker setting is read-only (a restart).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, fields

from odradek.broker.config import FIELD_DOCS, KAFKA_NAMES, BrokerConfig
from odradek.broker.replication_quota import FOLLOWER_RATE, LEADER_RATE
from odradek.broker.topic_admin import TOPIC_CONFIG_DEFAULTS, TopicError
from odradek.broker.topic_config_synonyms import (
    BOOLEAN,
    LONG,
    STRING,
    TOPIC_CONFIGS,
    TOPIC_OF_SYNONYM,
    check_synonym_value,
)
from odradek.log.log import LogConfig
from odradek.protocol.errors import ErrorCode

# Kafka's DescribeConfigsResponse ConfigSource numbers
DYNAMIC_TOPIC_CONFIG = 1
DYNAMIC_BROKER_CONFIG = 2
DYNAMIC_DEFAULT_BROKER_CONFIG = 3
STATIC_BROKER_CONFIG = 4
DEFAULT_CONFIG = 5

#: the znode name of the cluster-wide broker default (Kafka's ConfigEntityName.Default)
DEFAULT_ENTITY = "<default>"

_LONG_MAX = str(2**63 - 1)

# (not `security`: the listeners' raw keys, passwords among them, which DescribeConfigs does not show)
_FIELD_OF = {KAFKA_NAMES.get(f.name, f.name.replace("_", ".")): f for f in fields(BrokerConfig) if f.name != "security"}
# every topic config's broker default is a BrokerConfig field, so a config file can set it
assert set(TOPIC_OF_SYNONYM) <= set(_FIELD_OF)

#: the replication throttles (Kafka's DynamicConfig.Broker), enforced by replication_quota.py
THROTTLES = {LEADER_RATE: _LONG_MAX, FOLLOWER_RATE: _LONG_MAX}

#: broker configs that may change at runtime, per broker or cluster-wide
DYNAMIC = frozenset(set(TOPIC_OF_SYNONYM) | {"log.cleaner.backoff.ms"} | set(THROTTLES))


def broker_config_names() -> list[str]:
    return sorted(set(_FIELD_OF) | set(THROTTLES))


def _config_type(name: str) -> int:
    topic = TOPIC_OF_SYNONYM.get(name)
    if topic is not None:
        return TOPIC_CONFIGS[topic][1]
    f = _FIELD_OF.get(name)
    kind = str(f.type) if f is not None else "int"
    return {"int": LONG, "bool": BOOLEAN, "bool | None": BOOLEAN, "str": STRING, "Path": STRING}.get(kind, STRING)


def config_type(name: str, topic: bool) -> int:
    return TOPIC_CONFIGS[name][1] if topic else _config_type(name)


def documentation(name: str, topic: bool) -> str | None:
    if topic:
        return TOPIC_CONFIGS[name][2]
    synonym_of = TOPIC_OF_SYNONYM.get(name)
    if synonym_of is not None:
        return f"The default of the topic config {synonym_of}: {TOPIC_CONFIGS[synonym_of][2]}"
    if name in THROTTLES:
        side = "leader" if name == LEADER_RATE else "follower"
        return (f"The upper bound (bytes/s) on this broker's replication traffic as {side} for the "
                f"replicas listed in each topic's {side}.replication.throttled.replicas")
    f = _FIELD_OF.get(name)
    return FIELD_DOCS.get(f.name) if f is not None else None


@dataclass(frozen=True, slots=True)
class BrokerConfigDefinition:
    """One broker config as an operator sets it: its Kafka name (as DescribeConfigs lists it), the
    key a --config file gives it (None: only dynamically, `odradek configs alter --broker ...`),
    its built-in default (None: unset), whether a broker refuses to start without it, and
    whether it changes while the broker runs."""
    name: str
    file_key: str | None
    default: str | None
    required: bool
    dynamic: bool
    documentation: str


def broker_config_definitions() -> list[BrokerConfigDefinition]:
    """Every broker config, sorted by name: what docs/operations.md's generated table lists."""
    out = []
    for name in broker_config_names():
        f = _FIELD_OF.get(name)
        required = f is not None and f.default is dataclasses.MISSING
        if f is not None:
            default = None if required else f.default
            text = None if default is None else str(default).lower() if isinstance(default, bool) else str(default)
            key: str | None = name
        else:
            text, key = THROTTLES[name], None
        out.append(BrokerConfigDefinition(name, key, text, required, name in DYNAMIC,
                                          documentation(name, False) or ""))
    return out


def check_broker_config_name(name: str) -> None:
    """A TopicError(INVALID_CONFIG) unless `name` is a broker config that may change at runtime."""
    if name not in DYNAMIC:
        if name in _FIELD_OF:
            raise TopicError(ErrorCode.INVALID_CONFIG,
                             f"Cannot update these configs dynamically: {name} (a restart with a new "
                             f"config file changes it)")
        raise TopicError(ErrorCode.INVALID_CONFIG, f"Unknown broker config name: {name}")


def validate_broker_config(name: str, value: str | None) -> str:
    """The value of a dynamic broker config, or a TopicError(INVALID_CONFIG) naming the key."""
    check_broker_config_name(name)
    if value is None:
        raise TopicError(ErrorCode.INVALID_CONFIG, f"Null value for broker config {name}")
    if name in TOPIC_OF_SYNONYM:
        check_synonym_value(name, value)
        return value
    try:
        number = int(value)
    except ValueError:
        number = -1
    if number < 0:
        raise TopicError(ErrorCode.INVALID_CONFIG, f"Invalid value {value} for config {name}: "
                                                   f"a non-negative integer is expected")
    return value


def _static(config: BrokerConfig) -> dict[str, tuple[str, int]]:
    """Every broker config's static value: STATIC if it differs from the built-in default
    (odradek does not keep which keys a config file named, so a file repeating a default shows
    as DEFAULT_CONFIG where Kafka says STATIC_BROKER_CONFIG). A config without a value
    (broker.rack unset) has no layer at all, as Kafka lists no synonym for a null default:
    DescribeConfigs answers it as null, never the text "None"."""
    out: dict[str, tuple[str, int]] = {}
    for name, f in _FIELD_OF.items():
        value = getattr(config, f.name)
        if value is None:
            continue
        default = f.default if f.default is not dataclasses.MISSING else None
        text = str(value).lower() if isinstance(value, bool) else str(value)
        out[name] = (text, DEFAULT_CONFIG if value == default else STATIC_BROKER_CONFIG)
    for name, value in THROTTLES.items():
        out[name] = (value, DEFAULT_CONFIG)
    return out


@dataclass(frozen=True, slots=True)
class Synonym:
    name: str
    value: str
    source: int


class DynamicBrokerConfig:
    """The layered broker config of one broker; `update` swaps a dynamic layer."""

    def __init__(self, static: BrokerConfig) -> None:
        self.static = static
        self._static = _static(static)
        self.per_broker: dict[str, str] = {}
        self.cluster_default: dict[str, str] = {}

    def update(self, entity: str, config: dict[str, str]) -> None:
        """A new /config/brokers/<entity> (this broker's id or <default>); unknown or read-only
        keys (written by a newer broker or by hand) are ignored, as Kafka ignores them."""
        kept = {k: v for k, v in config.items() if k in DYNAMIC}
        if entity == DEFAULT_ENTITY:
            self.cluster_default = kept
        else:
            self.per_broker = kept

    def synonyms(self, name: str) -> list[Synonym]:
        """Every layer that has `name`, highest precedence first (Kafka's synonym order)."""
        out = []
        if name in self.per_broker:
            out.append(Synonym(name, self.per_broker[name], DYNAMIC_BROKER_CONFIG))
        if name in self.cluster_default:
            out.append(Synonym(name, self.cluster_default[name], DYNAMIC_DEFAULT_BROKER_CONFIG))
        if name in self._static:
            value, source = self._static[name]
            out.append(Synonym(name, value, source))
        return out

    def value(self, name: str) -> str:
        return self.synonyms(name)[0].value

    def topic_synonyms(self, topic_key: str) -> list[Synonym]:
        """Where a topic config without a topic override gets its value."""
        broker_name = TOPIC_CONFIGS[topic_key][0]
        found = self.synonyms(broker_name) if broker_name else []
        return found or [Synonym(topic_key, TOPIC_CONFIG_DEFAULTS[topic_key], DEFAULT_CONFIG)]

    def topic_defaults(self) -> dict[str, str]:
        """The value each topic config has for a topic that does not set it."""
        return {k: self.topic_synonyms(k)[0].value for k in TOPIC_CONFIGS}

    def log_config(self) -> LogConfig:
        """The LogConfig of a topic without overrides (Kafka's LogManager.currentDefaultConfig)."""
        return LogConfig.from_topic_config(self.topic_defaults(), LogConfig())

    @property
    def min_insync_replicas(self) -> int:
        return int(self.value("min.insync.replicas"))

    @property
    def unclean_leader_election_enable(self) -> bool:
        """The default of topics that do not set it, read by the controller at each election."""
        return self.value("unclean.leader.election.enable").strip().lower() == "true"

    @property
    def log_cleaner_backoff_ms(self) -> int:
        return int(self.value("log.cleaner.backoff.ms"))

    def describe(self, per_broker: bool) -> dict[str, list[Synonym]]:
        """name -> synonyms for DescribeConfigs: every config of this broker (an empty list for
        one without a value anywhere, broker.rack unset), or (the <default> resource) only the
        cluster-default dynamic configs set, as Kafka answers."""
        if not per_broker:
            return {k: [Synonym(k, v, DYNAMIC_DEFAULT_BROKER_CONFIG)] for k, v in self.cluster_default.items()}
        return {name: self.synonyms(name) for name in broker_config_names()}
