"""`odradek topics delete` and `odradek topics alter --partitions`: Kafka's TopicCommand
(kafka-topics.sh --delete / --alter --partitions) over the Kafka protocol only (DeleteTopics,
CreatePartitions, Metadata), so they work against Apache Kafka too.

A deletion is asynchronous in Kafka (the controller deletes every replica, and waits for
brokers that are down). DeleteTopics is given the whole timeout: odradek answers it once the
deletion completed (Kafka once the broker's metadata dropped the topic), REQUEST_TIMED_OUT
otherwise; ``delete_topics`` then polls Metadata until no broker it reaches lists the topic,
and names the topics whose deletion did not complete in time.
"""
from __future__ import annotations

import concurrent.futures
import time
from typing import Any

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import NewPartitions

from odradek.admin.admin_client import (
    MAX_REQUEST_TIMEOUT_S,
    ProgressFn,
    ZooKeeperProgress,
    admin_client,
    kafka_error_text,
    metadata_request,
    timed_out,
    zookeeper_progress,
)
from odradek.admin.errors import AdminError
from odradek.cli.output import duration
from odradek.protocol.errors import ErrorCode


def delete_topics(bootstrap: str, names: list[str], timeout: float = 60.0, progress: ProgressFn | None = None,
                  zookeeper: str | None = None) -> None:
    """Delete ``names`` and wait until no broker ``bootstrap`` reaches lists them; AdminError
    naming every topic that does not exist, was refused, or is not gone in time.
    ``progress`` is told how many of the topics are deleted: where ``zookeeper`` is given,
    those whose deletion completed (admin.ZooKeeperProgress), else those the brokers no
    longer list, which they stop doing when the deletion starts; so without ZooKeeper the
    count stays below the total until DeleteTopics is answered."""
    deadline = time.monotonic() + timeout
    request_timeout = max(1.0, min(timeout, MAX_REQUEST_TIMEOUT_S))
    admin = admin_client(bootstrap, request_timeout=request_timeout)
    futures = admin.delete_topics(list(dict.fromkeys(names)), request_timeout=request_timeout,
                                  operation_timeout=request_timeout)
    errors: list[str] = []
    failed: set[str] = set()
    unfinished: list[str] = []
    if progress is not None:
        zk = zookeeper_progress(zookeeper)
        try:
            _report_while_pending(bootstrap, list(futures), futures.values(), request_timeout + 5, progress, zk)
        finally:
            if zk is not None:
                zk.close()
    for name, future in futures.items():
        try:
            future.result(timeout=request_timeout + 5)
        except KafkaException as exc:
            err = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
            if err is not None and err.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
                errors.append(f"topic {name!r} does not exist")
                failed.add(name)
            elif not timed_out(exc):
                errors.append(f"{name}: {kafka_error_text(exc)}")
                failed.add(name)
            else:
                unfinished.append(name)  # asked, maybe (the wait below tells whether at all)
        except TimeoutError:
            unfinished.append(name)
    waiting = [n for n in futures if n not in failed]
    still = _wait_until_gone(bootstrap, waiting, deadline, progress, len(futures))
    still += [n for n in unfinished if n not in still]
    if still:
        errors.append(f"deletion of {', '.join(still)} asked for but not complete after {duration(timeout)} "
                      f"(a broker holding a replica may be down: it completes when the broker is back)")
    if errors:
        raise AdminError("; ".join(errors))


def _report_while_pending(bootstrap: str, names: list[str], futures: Any, timeout: float,
                          progress: ProgressFn, zk: ZooKeeperProgress | None) -> None:
    """While DeleteTopics is unanswered, count the topics deleted, twice a second."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        deleted = zk.deleted(names) if zk is not None else None
        try:
            if deleted is None:
                deleted = len(names) - len(_still_listed(bootstrap, names, 5.0))
            progress(min(deleted, len(names) - 1), len(names))  # the total once DeleteTopics is answered
        except AdminError:
            pass
        if not concurrent.futures.wait(list(futures), timeout=0.5).not_done:
            return


def _still_listed(bootstrap: str, names: list[str], timeout: float) -> list[str]:
    known = metadata_request(bootstrap, names, timeout)
    return [t.name for t in known.topics if t.error_code != ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]


def _wait_until_gone(bootstrap: str, names: list[str], deadline: float, progress: ProgressFn | None = None,
                     total: int = 0) -> list[str]:
    """The topics still listed at the deadline; AdminError if no broker ever answered."""
    pending = list(names)
    unreachable: AdminError | None = None
    reached = False
    while pending:
        try:
            pending = _still_listed(bootstrap, pending, max(1.0, deadline - time.monotonic()))
            reached = True
            if progress is not None:
                progress(total - len(pending), total)
        except AdminError as exc:
            unreachable = exc  # a broker restarting meanwhile: asked again until the deadline
        if not pending:
            return pending
        if time.monotonic() > deadline:
            if not reached and unreachable is not None:
                raise unreachable
            return pending
        time.sleep(0.1)
    return pending


def create_partitions(bootstrap: str, name: str, count: int, timeout: float = 30.0) -> None:
    """Grow ``name`` to ``count`` partitions (CreatePartitions); AdminError with Kafka's error
    (INVALID_PARTITIONS for a count that does not grow it, UNKNOWN_TOPIC_OR_PARTITION...)."""
    request_timeout = max(1.0, min(timeout, MAX_REQUEST_TIMEOUT_S))
    admin = admin_client(bootstrap, request_timeout=request_timeout)
    future = admin.create_partitions([NewPartitions(name, count)], request_timeout=request_timeout,
                                     operation_timeout=request_timeout)[name]
    try:
        future.result(timeout=request_timeout + 5)
    except KafkaException as exc:
        raise AdminError(kafka_error_text(exc)) from None
    except TimeoutError:
        raise AdminError(f"CreatePartitions of {name!r} got no answer within {duration(timeout)}") from None
