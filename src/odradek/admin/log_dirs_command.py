"""`odradek log-dirs describe`: Kafka's kafka-log-dirs.sh (LogDirsCommand). Each broker answers
DescribeLogDirs (API 35, KIP-113) for the partition replicas it hosts: its log dir, each
replica's size on disk and offset lag (broker/describe_log_dirs.py says what the broker
counts), and the free and total bytes of the dir's volume.

The JSON is kafka-log-dirs.sh's ({"version": 1, "brokers": [{"broker", "logDirs": [{"logDir",
"error", "partitions": [{"partition", "size", "offsetLag", "isFuture"}]}]}]}), so scripts
written for Kafka's tool read it, plus "totalBytes" and "usableBytes" per log dir, and an
"error" per broker that could not be asked. Unlike Kafka's tool, a topic of --topic-list that
does not exist is a mistake reported as one, not an empty answer.
"""
from __future__ import annotations

from typing import Any

from odradek.admin.admin_client import connection_failure, format_table, metadata_request, send_request
from odradek.admin.errors import AdminError
from odradek.cli.output import plural
from odradek.protocol.errors import ErrorCode, error_name

DESCRIBE_LOG_DIRS, VERSION = 35, 4
CLIENT_ID = "log-dirs-tool"  # Kafka's tool's client.id


def describe(bootstrap: str, brokers: list[int] | None, topics: list[str] | None,
             timeout: float = 10.0) -> dict[str, Any]:
    """kafka-log-dirs.sh --describe: every live broker (or those of ``brokers``) asked for its
    log dirs, their partitions kept to ``topics`` when given. A broker that does not answer is
    reported with an "error" and no log dirs; unknown brokers or topics are refused first."""
    md = metadata_request(bootstrap, None, timeout)
    live = {int(b.node_id): f"{b.host}:{b.port}" for b in md.brokers}
    unknown_brokers = sorted(set(brokers or []) - set(live))
    if unknown_brokers:
        raise AdminError(f"{_brokers_text(unknown_brokers)} of --broker-list "
                         f"{'is not a live broker' if len(unknown_brokers) == 1 else 'are not live brokers'} of "
                         f"the cluster (live: {','.join(map(str, sorted(live)))})")
    existing = {t.name for t in md.topics}
    missing = [t for t in dict.fromkeys(topics or []) if t not in existing]
    if missing:
        raise AdminError(f"{ErrorCode.UNKNOWN_TOPIC_OR_PARTITION.name}: "
                         f"{plural(len(missing), 'topic')} of --topic-list "
                         f"{'does' if len(missing) == 1 else 'do'} not exist: {', '.join(missing)}")
    wanted = set(topics or [])
    answers = []
    for broker in sorted(set(brokers or live)):
        try:
            response = send_request(live[broker], DESCRIBE_LOG_DIRS, VERSION, {"topics": None}, timeout, CLIENT_ID)
        except (OSError, ValueError) as exc:
            answers.append({"broker": broker, "error": f"cannot reach {live[broker]}: {connection_failure(exc)}",
                            "logDirs": []})
            continue
        answers.append({"broker": broker, "logDirs": [_log_dir(result, wanted) for result in response.results]})
        if int(response.error_code):  # the request as a whole refused (v3+)
            answers[-1]["error"] = error_name(int(response.error_code))
    return {"version": 1, "brokers": answers}


def _log_dir(result: Any, wanted: set[str]) -> dict[str, Any]:
    """One log dir of a broker's answer in kafka-log-dirs.sh's shape, partitions sorted."""
    partitions = [{"partition": f"{t.name}-{int(p.partition_index)}", "size": int(p.partition_size),
                   "offsetLag": int(p.offset_lag), "isFuture": bool(p.is_future_key)}
                  for t in sorted(result.topics, key=lambda t: t.name) if not wanted or t.name in wanted
                  for p in sorted(t.partitions, key=lambda p: int(p.partition_index))]
    code = int(result.error_code)
    return {"logDir": result.log_dir, "error": error_name(code) if code else None, "partitions": partitions,
            "totalBytes": int(result.total_bytes), "usableBytes": int(result.usable_bytes)}


def failed_brokers(described: dict[str, Any]) -> list[str]:
    """`broker N: why` for each broker, or log dir of one, that answered with an error."""
    failed = [f"broker {b['broker']}: {b['error']}" for b in described["brokers"] if b.get("error")]
    failed += [f"broker {b['broker']}: {d['logDir']}: {d['error']}"
               for b in described["brokers"] for d in b["logDirs"] if d["error"]]
    return failed


def format_log_dirs(described: dict[str, Any], topics: list[str] | None) -> str:
    """A table of every partition replica (Broker LogDir Partition Size OffsetLag), then a
    line per broker: its replicas, their bytes and the volume's free space. Nothing found says
    so, naming where it looked."""
    rows: list[tuple[str, ...]] = [("Broker", "LogDir", "Partition", "Size", "OffsetLag")]
    rows += [(str(b["broker"]), d["logDir"], p["partition"], str(p["size"]), str(p["offsetLag"]))
             for b in described["brokers"] for d in b["logDirs"] for p in d["partitions"]]
    asked = [b["broker"] for b in described["brokers"]]
    where = _brokers_text(asked) + (f" for {plural(len(topics), 'topic')} {', '.join(topics)}" if topics else "")
    lines = [format_table(rows) if len(rows) > 1 else f"no partition replicas on {where}"]
    for b in described["brokers"]:
        if b.get("error"):
            lines.append(f"broker {b['broker']}: {b['error']}")
        for d in b["logDirs"]:
            size = sum(p["size"] for p in d["partitions"])
            disk = (f"; the volume has {_bytes(d['usableBytes'])} free of {_bytes(d['totalBytes'])}"
                    if d["totalBytes"] >= 0 and d["usableBytes"] >= 0 else "")
            error = f" ({d['error']})" if d["error"] else ""
            lines.append(f"broker {b['broker']}: {plural(len(d['partitions']), 'partition replica')}, "
                         f"{size:,} {'byte' if size == 1 else 'bytes'} in {d['logDir']}{error}{disk}")
    return "\n".join(lines)


def _brokers_text(ids: list[int]) -> str:
    return f"{'broker' if len(ids) == 1 else 'brokers'} {','.join(map(str, ids))}"


def _bytes(n: int) -> str:
    """A volume's size as a person reads it: `512 bytes`, `1.2 KiB` ... `3.4 TiB`."""
    size, unit = float(n), "bytes"
    for bigger in ("KiB", "MiB", "GiB", "TiB"):
        if size < 1024:
            break
        size, unit = size / 1024, bigger
    return f"{n:,} bytes" if unit == "bytes" else f"{size:.1f} {unit}"
