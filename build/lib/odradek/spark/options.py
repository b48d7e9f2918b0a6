"""Options of the `odradek` Spark data source: the names and meanings of Spark's Kafka source.

Pure Python (no pyspark, no network), so the driver validates a query before any task runs and
unit tests can check every rule.
"""
from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

EARLIEST = -2   # Spark's (and Kafka's ListOffsets) sentinel for "earliest" in offset JSON
LATEST = -1     # ... and for "latest"

# Offsets as Spark's Kafka source writes them: {"topic": {"0": 23, "1": 7}}. String partition keys
# survive the JSON round trip through Spark's offset log unchanged.
Offsets = dict[str, dict[str, int]]

# Java-client settings that make no sense to librdkafka (Spark's Kafka source rejects most of them too).
_JAVA_ONLY = {"key.deserializer", "value.deserializer", "key.serializer", "value.serializer",
              "interceptor.classes", "auto.offset.reset", "enable.auto.commit"}


class OptionError(ValueError):
    """A bad or missing option; the message names the option."""


@dataclass(frozen=True)
class Subscription:
    kind: str                     # "subscribe" | "subscribePattern" | "assign"
    topics: tuple[str, ...] = ()  # subscribe
    pattern: str = ""             # subscribePattern
    assigned: tuple[tuple[str, int], ...] = ()  # assign

    def select(self, metadata: Mapping[str, list[int]]) -> list[tuple[str, int]]:
        """The (topic, partition)s this subscription names, given {topic: [partitions]}."""
        if self.kind == "assign":
            return sorted(self.assigned)
        if self.kind == "subscribe":
            names = [t for t in self.topics if t in metadata]
        else:
            rx = re.compile(self.pattern)
            # like the Java consumer's exclude.internal.topics: "__..." topics never match a pattern
            names = [t for t in metadata if rx.fullmatch(t) and not t.startswith("__")]
        return sorted((t, p) for t in names for p in metadata[t])


@dataclass(frozen=True)
class SourceOptions:
    bootstrap: str
    subscription: Subscription
    starting: str | Offsets               # "earliest" | "latest" | Offsets
    ending: str | Offsets                 # batch only
    max_offsets_per_trigger: int | None
    fail_on_data_loss: bool
    min_partitions: int | None
    include_headers: bool
    poll_timeout_s: float
    kafka_conf: dict[str, str] = field(default_factory=dict)  # librdkafka settings from kafka.*
    testing_pause_dir: str | None = None  # tests only: see reader.read_partition


def lower_keys(options: Mapping[str, str]) -> dict[str, str]:
    return {str(k).lower(): str(v) for k, v in options.items()}


def kafka_conf(opts: Mapping[str, str]) -> dict[str, str]:
    """librdkafka settings from `kafka.`-prefixed options (bootstrap.servers included)."""
    conf = {k[len("kafka."):]: v for k, v in opts.items() if k.startswith("kafka.")}
    for k in _JAVA_ONLY & conf.keys():
        raise OptionError(f"option kafka.{k} is not supported: the source manages it")
    if "bootstrap.servers" not in conf:
        raise OptionError("option kafka.bootstrap.servers is required")
    return conf


def _bool(opts: Mapping[str, str], name: str, default: bool) -> bool:
    raw = opts.get(name.lower())
    if raw is None:
        return default
    if raw.lower() not in ("true", "false"):
        raise OptionError(f"option {name} must be true or false, not {raw!r}")
    return raw.lower() == "true"


def _positive_int(opts: Mapping[str, str], name: str) -> int | None:
    raw = opts.get(name.lower())
    if raw is None:
        return None
    try:
        value = int(raw)
    except ValueError:
        raise OptionError(f"option {name} must be an integer, not {raw!r}") from None
    if value < 1:
        raise OptionError(f"option {name} must be positive, not {value}")
    return value


def parse_offsets(name: str, raw: str, allowed: tuple[str, ...]) -> str | Offsets:
    text = raw.strip()
    if text.lower() in allowed:
        return text.lower()
    try:
        parsed = json.loads(text)
    except ValueError:
        raise OptionError(f"option {name} must be one of {', '.join(allowed)} or JSON like "
                          f'{{"topic":{{"0":23,"1":-2}}}}, not {raw!r}') from None
    if not isinstance(parsed, dict) or not all(isinstance(v, dict) for v in parsed.values()):
        raise OptionError(f'option {name}: JSON must map topics to {{"partition": offset}}, not {raw!r}')
    out: Offsets = {}
    for topic, parts in parsed.items():
        out[topic] = {}
        for p, off in parts.items():
            try:
                out[topic][str(int(p))] = int(off)
            except (TypeError, ValueError):
                raise OptionError(f"option {name}: bad partition/offset {p!r}: {off!r}") from None
            if int(off) < EARLIEST:
                raise OptionError(f"option {name}: offset {off} of {topic}-{p} is not valid")
    return out


def parse_subscription(opts: Mapping[str, str]) -> Subscription:
    given = [k for k in ("subscribe", "subscribepattern", "assign") if opts.get(k)]
    if len(given) != 1:
        raise OptionError("exactly one of the options subscribe, subscribePattern, assign is required")
    kind = given[0]
    raw = opts[kind]
    if kind == "subscribe":
        topics = tuple(t.strip() for t in raw.split(",") if t.strip())
        if not topics:
            raise OptionError("option subscribe names no topic")
        return Subscription("subscribe", topics=topics)
    if kind == "subscribepattern":
        try:
            re.compile(raw)
        except re.error as exc:
            raise OptionError(f"option subscribePattern is not a regular expression: {exc}") from None
        return Subscription("subscribePattern", pattern=raw)
    try:
        parsed = json.loads(raw)
        assigned = tuple(sorted((str(t), int(p)) for t, ps in parsed.items() for p in ps))
    except (ValueError, TypeError, AttributeError):
        raise OptionError(f'option assign must be JSON like {{"topic":[0,1]}}, not {raw!r}') from None
    if not assigned:
        raise OptionError("option assign names no partition")
    return Subscription("assign", assigned=assigned)


def parse_source_options(options: Mapping[str, str], streaming: bool) -> SourceOptions:
    opts = lower_keys(options)
    conf = kafka_conf(opts)
    starting = parse_offsets("startingOffsets", opts.get("startingoffsets", "latest" if streaming else "earliest"),
                             ("earliest", "latest"))
    ending = parse_offsets("endingOffsets", opts.get("endingoffsets", "latest"), ("latest",))
    if not streaming and starting == "latest":
        raise OptionError("startingOffsets=latest is for streaming queries only (a batch query would read nothing)")
    if streaming and "endingoffsets" in opts:
        raise OptionError("endingOffsets is for batch queries only")
    if isinstance(ending, dict) and any(o == EARLIEST for ps in ending.values() for o in ps.values()):
        raise OptionError("endingOffsets: earliest (-2) is not allowed as an ending offset")
    timeout_ms = opts.get("kafkaconsumer.polltimeoutms", "180000")
    try:
        poll_timeout_s = int(timeout_ms) / 1000
    except ValueError:
        raise OptionError(f"option kafkaConsumer.pollTimeoutMs must be an integer, not {timeout_ms!r}") from None
    return SourceOptions(
        bootstrap=conf["bootstrap.servers"],
        subscription=parse_subscription(opts),
        starting=starting,
        ending=ending,
        max_offsets_per_trigger=_positive_int(opts, "maxOffsetsPerTrigger"),
        fail_on_data_loss=_bool(opts, "failOnDataLoss", True),
        min_partitions=_positive_int(opts, "minPartitions"),
        include_headers=_bool(opts, "includeHeaders", False),
        poll_timeout_s=poll_timeout_s,
        kafka_conf=conf,
        testing_pause_dir=opts.get("odradek.testing.pausedir"),
    )


@dataclass(frozen=True)
class SinkOptions:
    bootstrap: str
    topic: str | None
    exactly_once: bool
    marker_topic: str
    kafka_conf: dict[str, str]
    testing_fail_after_commit: int | None = None  # tests only: see sink.StreamWriter.commit


MARKER_TOPIC = "__odradek_spark_commits"


def parse_sink_options(options: Mapping[str, str]) -> SinkOptions:
    opts = lower_keys(options)
    conf = kafka_conf(opts)
    fail_after = opts.get("odradek.testing.failaftercommit")
    return SinkOptions(
        bootstrap=conf["bootstrap.servers"],
        topic=opts.get("topic") or None,
        exactly_once=_bool(opts, "exactlyOnce", True),
        marker_topic=opts.get("exactlyonce.markertopic", MARKER_TOPIC),
        kafka_conf=conf,
        testing_fail_after_commit=int(fail_after) if fail_after is not None else None,
    )


def resolve(spec: str | Offsets, tps: list[tuple[str, int]], default: int) -> dict[tuple[str, int], int]:
    """Offsets (or EARLIEST/LATEST sentinels) for each (topic, partition) from an option value.

    Partitions a JSON spec does not name get `default` (Spark's rule for new partitions)."""
    if spec == "earliest":
        return {tp: EARLIEST for tp in tps}
    if spec == "latest":
        return {tp: LATEST for tp in tps}
    assert isinstance(spec, dict)
    return {(t, p): spec.get(t, {}).get(str(p), default) for t, p in tps}


def to_json_offsets(offsets: Mapping[tuple[str, int], int]) -> Offsets:
    out: Offsets = {}
    for (t, p), off in sorted(offsets.items()):
        out.setdefault(t, {})[str(p)] = int(off)
    return out


def from_json_offsets(offsets: Offsets) -> dict[tuple[str, int], int]:
    return {(t, int(p)): int(o) for t, ps in offsets.items() for p, o in ps.items()}
