"""Kafka's ConfigCommand (kafka-configs.sh) behind `odradek configs describe|alter` and
`odradek topics alter --config`: DescribeConfigs and IncrementalAlterConfigs (KIP-339) over
plain Kafka requests, so they work against Apache Kafka too.

Raw requests rather than confluent-kafka's AdminClient: librdkafka refuses the empty broker
name that means the cluster-wide broker default, and a broker's own resource must be sent to
that broker (its address comes from one Metadata request).
"""
from __future__ import annotations

from typing import Any

from odradek.admin.admin_client import describe_topics, metadata_request, request_first, send_request
from odradek.admin.errors import AdminError
from odradek.protocol.errors import error_name

DESCRIBE_CONFIGS, INCREMENTAL_ALTER_CONFIGS = 32, 44
TOPIC, BROKER = 2, 4
SET, DELETE = 0, 1
SOURCES = {0: "UNKNOWN", 1: "DYNAMIC_TOPIC_CONFIG", 2: "DYNAMIC_BROKER_CONFIG", 3: "DYNAMIC_DEFAULT_BROKER_CONFIG",
           4: "STATIC_BROKER_CONFIG", 5: "DEFAULT_CONFIG", 6: "DYNAMIC_BROKER_LOGGER_CONFIG"}


def own_source(resource_type: int, name: str) -> str:
    """The source of the configs a resource sets itself, the only ones kafka-configs.sh
    --describe lists without --all: a topic's DYNAMIC_TOPIC_CONFIG, broker N's
    DYNAMIC_BROKER_CONFIG, the cluster default's DYNAMIC_DEFAULT_BROKER_CONFIG. A topic's value
    inherited from a dynamic broker default carries that default's source, as in Kafka, and is
    not the topic's own."""
    if resource_type == TOPIC:
        return "DYNAMIC_TOPIC_CONFIG"
    return "DYNAMIC_BROKER_CONFIG" if name else "DYNAMIC_DEFAULT_BROKER_CONFIG"


def shown_configs(entries: list[dict[str, Any]], resource_type: int, name: str,
                  show_all: bool) -> list[dict[str, Any]]:
    """What `configs describe` shows, sorted by name: every entry with --all, else the
    resource's own (ConfigCommand.getResourceConfig's filter)."""
    source = own_source(resource_type, name)
    return sorted((e for e in entries if show_all or e["source"] == source), key=lambda e: e["name"])


def entity(topic: str | None, broker: int | None, broker_defaults: bool) -> tuple[int, str, str]:
    """(resource type, resource name, how to name it to the operator)."""
    if topic is not None:
        return TOPIC, topic, f"topic {topic}"
    if broker is not None:
        return BROKER, str(broker), f"broker {broker}"
    assert broker_defaults
    return BROKER, "", "the cluster-wide broker defaults"


def _send(server: str, api_key: int, version: int, body: dict[str, Any], timeout: float) -> Any:
    """One request to ``server`` as this tool (admin_client.send_request; reassign_client sends through it)."""
    return send_request(server, api_key, version, body, timeout, "odradek-configs")


def _request(bootstrap: str, resource_type: int, name: str, api_key: int, version: int,
             body: dict[str, Any], timeout: float) -> Any:
    """To broker N for its own resource, else to the first bootstrap server that answers."""
    if resource_type == BROKER and name:
        brokers = {int(b.node_id): f"{b.host}:{b.port}" for b in metadata_request(bootstrap, [], timeout).brokers}
        if int(name) not in brokers:
            live = ", ".join(map(str, sorted(brokers)))
            raise AdminError(f"broker {name} is not a live broker of the cluster (live: {live})")
        servers = [brokers[int(name)]]
    else:
        servers = [s.strip() for s in bootstrap.split(",")]
    return request_first(servers, bootstrap, api_key, version, body, timeout, "odradek-configs")


def _error(code: Any, message: str | None, what: str) -> AdminError:
    """A refusal in Kafka's words: the error's protocol name from odradek.protocol.errors (the
    one registry), then the broker's message."""
    return AdminError(f"{error_name(int(code))}: {message or what}")


def describe(bootstrap: str, resource_type: int, name: str, timeout: float = 10.0,
             keys: list[str] | None = None) -> list[dict[str, Any]]:
    """Every config of the resource: name, value, source, read_only, sensitive, synonyms."""
    response = _request(bootstrap, resource_type, name, DESCRIBE_CONFIGS, 4, {
        "resources": [{"resource_type": resource_type, "resource_name": name, "configuration_keys": keys}],
        "include_synonyms": True, "include_documentation": False}, timeout)
    result = response.results[0]
    if result.error_code != 0:
        raise _error(result.error_code, result.error_message, f"cannot describe {name!r}")
    return [{"name": c.name, "value": c.value, "source": SOURCES.get(int(c.config_source), "UNKNOWN"),
             "read_only": c.read_only, "sensitive": c.is_sensitive,
             "synonyms": [{"name": s.name, "value": s.value, "source": SOURCES.get(int(s.source), "UNKNOWN")}
                          for s in c.synonyms]}
            for c in result.configs]


def topic_overrides(bootstrap: str, topics: list[str], timeout: float = 10.0) -> dict[str, dict[str, str]]:
    """Each topic's own configs (DYNAMIC_TOPIC_CONFIG), in one DescribeConfigs request."""
    return {t: {name: value for name, (value, source) in configs.items() if source == 1}
            for t, configs in topic_configs(bootstrap, topics, timeout).items()}


def topic_configs(bootstrap: str, topics: list[str], timeout: float = 10.0) -> dict[str, dict[str, tuple[str, int]]]:
    """Every config of each topic as (value, config source), in one DescribeConfigs request:
    its own settings and the defaults it inherits (e.g. min.insync.replicas)."""
    if not topics:
        return {}
    response = _request(bootstrap, TOPIC, "", DESCRIBE_CONFIGS, 4, {
        "resources": [{"resource_type": TOPIC, "resource_name": t, "configuration_keys": None} for t in topics],
        "include_synonyms": False, "include_documentation": False}, timeout)
    return {r.resource_name: {c.name: (c.value, int(c.config_source)) for c in r.configs}
            for r in response.results if r.error_code == 0}


def unset_keys(entries: list[dict[str, Any]], resource_type: int, name: str, keys: list[str]) -> list[str]:
    """The keys of `keys` the resource does not set itself (entries: describe()'s answer).
    kafka-configs.sh refuses to delete those ("Invalid config(s): ...") rather than report a
    change that changes nothing: the broker's incremental DELETE of an unset key succeeds."""
    own = {e["name"] for e in entries if e["source"] == own_source(resource_type, name)}
    return [k for k in keys if k not in own]


def refuse_unset_deletes(bootstrap: str, resource_type: int, name: str, keys: list[str], what: str,
                         timeout: float) -> None:
    """AdminError if a key of ``keys`` is not set on the resource itself (kafka-configs.sh's
    "Invalid config(s)"), before anything is changed; `configs alter --delete` and
    `topics alter --delete-config` both ask this."""
    if not keys:
        return
    missing = unset_keys(describe(bootstrap, resource_type, name, timeout), resource_type, name, keys)
    if missing:
        raise AdminError(f"Invalid config(s): {', '.join(missing)}: not set on {what}, nothing changed "
                         f"(`odradek configs describe` lists what is set)")


def alter(bootstrap: str, resource_type: int, name: str, set_configs: dict[str, str], delete: list[str],
          timeout: float = 10.0) -> None:
    """IncrementalAlterConfigs: SET each of set_configs, DELETE each of delete (back to its default)."""
    alter_many(bootstrap, [(resource_type, name, set_configs, delete)], timeout)


def alter_many(bootstrap: str, changes: list[tuple[int, str, dict[str, str], list[str]]],
               timeout: float = 10.0) -> None:
    """alter() for several resources: topics (and the broker defaults) in one request, each
    broker's own configs in one request to that broker. Raises on the first resource refused;
    the requests before it have been applied."""
    batches: dict[str, list[dict[str, Any]]] = {}
    for resource_type, name, set_configs, delete in changes:
        ops = ([{"name": k, "config_operation": SET, "value": v} for k, v in set_configs.items()]
               + [{"name": k, "config_operation": DELETE, "value": None} for k in delete])
        target = name if resource_type == BROKER and name else ""
        batches.setdefault(target, []).append({"resource_type": resource_type, "resource_name": name, "configs": ops})
    for target, resources in batches.items():
        response = _request(bootstrap, BROKER if target else TOPIC, target, INCREMENTAL_ALTER_CONFIGS, 1,
                            {"resources": resources, "validate_only": False}, timeout)
        for result in response.responses:
            if result.error_code != 0:
                raise _error(result.error_code, result.error_message, f"cannot alter {result.resource_name!r}")


def _text(value: str | None) -> str:
    """A config value as kafka-configs.sh prints it: an unset one is null."""
    return "null" if value is None else value


def format_configs(what: str, shown: list[dict[str, Any]], show_all: bool, resource_type: int, name: str) -> str:
    """kafka-configs.sh's layout: a heading, then `name=value sensitive=... synonyms={...}` for
    each of `shown` (shown_configs()); one line saying so when there is none (the cluster-wide
    broker defaults hold only dynamic configs, so --all shows no more of them)."""
    if not shown:
        if resource_type == BROKER and not name:
            return "no cluster-wide broker defaults set"
        dynamic = "" if resource_type == TOPIC else "dynamic "
        return f"no {dynamic}configs set on {what}" + ("" if show_all else "; --all shows every config")
    lines = [f"{'All' if show_all else 'Dynamic'} configs for {what} are:"]
    for e in shown:
        synonyms = ", ".join(f"{s['source']}:{s['name']}={_text(s['value'])}" for s in e["synonyms"])
        lines.append(f"  {e['name']}={_text(e['value'])} sensitive={str(e['sensitive']).lower()} "
                     f"synonyms={{{synonyms}}}")
    return "\n".join(lines)


def describe_topics_with_configs(bootstrap: str, names: list[str] | None,
                                 timeout: float = 10.0) -> list[dict[str, Any]]:
    """``admin_client.describe_topics`` plus, per topic, the configs it sets itself ("configs", as
    kafka-topics.sh --describe shows them) and the min.insync.replicas it has, set or
    inherited ("min_insync_replicas", which ``admin_client.filter_partitions`` reads): one
    DescribeConfigs for all the topics."""
    topics = describe_topics(bootstrap, names, timeout)
    configs = topic_configs(bootstrap, [t["name"] for t in topics], timeout)
    for topic in topics:
        own = configs.get(topic["name"], {})
        topic["configs"] = {k: v for k, (v, source) in own.items() if source == 1}
        min_isr = own.get("min.insync.replicas", ("1", 0))[0]
        topic["min_insync_replicas"] = int(min_isr) if str(min_isr).isdigit() else 1
    return topics
