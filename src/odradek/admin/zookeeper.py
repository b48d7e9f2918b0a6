"""ZooKeeper as the operator's tools read it: a quiet kazoo client, and pipelined reads.

`odradek status`, the dashboard, the benchmarks and `up`'s readiness poll read Kafka's znode
layout directly, because a broker that is down cannot say what it led.
"""
from __future__ import annotations

import logging
import warnings
from typing import Any, Mapping, TypeVar

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from odradek.admin.errors import ClusterError
from odradek.cli.output import duration
from odradek.zk.client import reconnect_retry
from odradek.zk.sasl import ZkSaslCredentials

K = TypeVar("K")


def collect_data(pending: Mapping[K, Any], timeout: float) -> dict[K, bytes | None]:
    """The data of pipelined kazoo ``get_async`` reads, by key (None: no such znode)."""
    out: dict[K, bytes | None] = {}
    for key, result in pending.items():
        try:
            out[key] = result.get(timeout=timeout)[0]
        except NoNodeError:
            out[key] = None
    return out


_credentials: ZkSaslCredentials | None = None


def use_credentials(credentials: ZkSaslCredentials | None) -> None:
    """The SASL login of this process's ZooKeeper clients (a secured cluster's tools: its
    ZooKeeper serves no client that has not logged in)."""
    global _credentials
    _credentials = credentials


def connect_zk(hosts: str, timeout: float = 10.0) -> KazooClient:
    """A started kazoo client whose connection-retry chatter does not reach the terminal. It
    reconnects at most zk.client's RECONNECT_MAX_DELAY_S apart, as the brokers do: kazoo's
    default doubles its delay up to an hour, so `status --watch` or the dashboard would stay
    stale for many minutes after a ZooKeeper outage of a few. It logs in with use_credentials'
    SASL credentials when there are any."""
    log = logging.getLogger("odradek.kazoo")
    if not log.handlers:
        log.addHandler(logging.NullHandler())
        log.propagate = False
    sasl = {"sasl_options": _credentials.kazoo_sasl_options()} if _credentials is not None else {}
    client = KazooClient(hosts=hosts, logger=log, connection_retry=reconnect_retry(), **sasl)
    try:
        with warnings.catch_warnings():  # kazoo warns of a missing chroot; callers check what they need
            warnings.simplefilter("ignore")
            client.start(timeout=timeout)
    except Exception as exc:  # kazoo raises its own timeout type, or socket errors for bad hosts
        client.stop()  # close() alone raises while the client is still started
        client.close()
        raise ClusterError(f"cannot reach ZooKeeper at {hosts} within {duration(timeout)} "
                           f"({zk_failure_text(exc)})") from None
    return client


def zk_failure_text(exc: BaseException) -> str:
    """Why kazoo could not connect, in words: "no answer" for its timeouts (whose class name
    would otherwise be the message), the system's text for socket errors."""
    if "Timeout" in type(exc).__name__:
        return "no answer"
    return getattr(exc, "strerror", None) or str(exc) or "connection failed"
