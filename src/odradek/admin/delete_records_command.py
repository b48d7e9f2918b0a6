"""`odradek topics delete-records`: Kafka's DeleteRecordsCommand (kafka-delete-records.sh) over
the Admin API's DeleteRecords (KIP-107), so it works against Apache Kafka too.

The client sends each partition's request to its leader; the answer is the partition's new low
watermark (its log start once every in-sync replica has moved to it).
"""
from __future__ import annotations

import concurrent.futures
from typing import Any

from confluent_kafka import KafkaException, TopicPartition

from odradek.admin.admin_client import admin_client, kafka_error_text
from odradek.admin.errors import AdminError
from odradek.cli.output import duration

HIGH_WATERMARK = -1  # DeleteRecordsRequest.HIGH_WATERMARK: everything up to the high watermark


def delete_records(bootstrap: str, topic: str, partitions: list[int], before: int,
                   timeout: float = 30.0) -> list[dict[str, Any]]:
    """Delete the records of each partition below ``before`` (-1: the high watermark). Returns
    [{"topic", "partition", "low_watermark", "error"}] with error None or `NAME: message`."""
    client = admin_client(bootstrap, timeout)
    requested = [TopicPartition(topic, p, before) for p in partitions]
    try:
        futures = client.delete_records(requested, request_timeout=timeout,
                                        operation_timeout=timeout)
    except KafkaException as exc:
        raise AdminError(f"delete-records failed: {kafka_error_text(exc)}") from None
    out = []
    for tp, future in sorted(futures.items(), key=lambda item: item[0].partition):
        row: dict[str, Any] = {"topic": tp.topic, "partition": tp.partition, "low_watermark": None,
                               "error": None}
        try:
            row["low_watermark"] = future.result(timeout=timeout + 10).low_watermark
        except KafkaException as exc:
            row["error"] = kafka_error_text(exc)
        except concurrent.futures.TimeoutError:
            row["error"] = f"REQUEST_TIMED_OUT: no answer within {duration(timeout)}"
        out.append(row)
    return out


def format_result(rows: list[dict[str, Any]]) -> str:
    lines = [f"{'Topic':<20} {'Partition':>9} {'LowWatermark':>12}  Error"]
    for r in rows:
        low = "-" if r["low_watermark"] is None else str(r["low_watermark"])
        lines.append(f"{r['topic']:<20} {r['partition']:>9} {low:>12}  {r['error'] or ''}".rstrip())
    return "\n".join(lines)
