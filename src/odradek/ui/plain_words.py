"""Why a read of the cluster failed, in the words the dashboard shows an operator.

The page is read by someone deciding what to restart, so it names what does not answer and
where ("ZooKeeper at 127.0.0.1:2181 does not answer", "broker 2 does not answer on
127.0.0.1:9093") instead of the exception that carried the news: a Python class name
(ClientConnectorError, KazooTimeoutError) or errno text ("[Errno 111]") means nothing to it,
and differs between the client libraries that noticed the same outage.

The transactions view's notices are written the same way: what holds the operator's consumers
back, and the command that tells more (`odradek transactions find-hanging`).
"""
from __future__ import annotations

import asyncio
import re
from collections.abc import Iterable
from urllib.parse import urlsplit

import aiohttp
from kazoo.exceptions import KazooException
from kazoo.handlers.threading import KazooTimeoutError

#: "[Errno 111] " and the like, as OSError's str() starts
_ERRNO = re.compile(r"\[Errno -?\d+\]\s*")
#: a Python class name leading a message or a clause: "AdminError: ...", "...; KeyError: 'x'"
_CLASS_PREFIX = re.compile(r"(^|[;:(]\s*)(?:[A-Za-z_][\w]*\.)*[A-Z][A-Za-z0-9]*(?:Error|Exception|Timeout|Warning)"
                           r"(?::\s*|(?=\s*$))")
#: librdkafka's codes for what happened in the client ("_TIMED_OUT: Local: Timed out"): not
#: Kafka's error names, and the description beside them says it already
_LIBRDKAFKA_LOCAL = re.compile(r"(?<![\w])_[A-Z][A-Z_]*:\s*|\bLocal:\s*")


class ZooKeeperSilent(Exception):
    """The dashboard's kazoo client is not connected (it reconnects by itself meanwhile), so
    nothing is asked: a request sent now would wait in kazoo's queue until ZooKeeper returns."""


def zookeeper_hosts(connect: str) -> str:
    """The servers of a connect string, without its chroot ("h1:2181,h2:2181")."""
    return connect.split("/", 1)[0]


def zookeeper_silent(connect: str) -> str:
    return f"ZooKeeper at {zookeeper_hosts(connect)} does not answer"


def broker_silent(broker: int, address: str) -> str:
    return f"broker {broker} does not answer on {address}"


def plain(text: str) -> str:
    """``text`` without errno markers and Python class names in front of its clauses; the
    first line only (a traceback's later lines are the log's, not the page's)."""
    first = text.strip().splitlines()[0] if text.strip() else ""
    first = _ERRNO.sub("", first)
    first = _CLASS_PREFIX.sub(lambda m: m.group(1), first)
    first = _LIBRDKAFKA_LOCAL.sub("", first)
    return first.strip(" :;") or "failed for a reason the dashboard could not tell"


def describe(exc: BaseException, zookeeper: str | None = None) -> str:
    """One line for the page about ``exc``, raised by a read of the cluster."""
    if zookeeper is not None and isinstance(exc, (ZooKeeperSilent, KazooException, KazooTimeoutError)):
        return zookeeper_silent(zookeeper)
    if isinstance(exc, (asyncio.TimeoutError, TimeoutError, KazooTimeoutError)):
        return "no answer in time"
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror[:1].lower() + exc.strerror[1:]
    return plain(str(exc))


def http_failure(broker: int, url: str, exc: BaseException) -> str:
    """Why broker ``broker``'s HTTP endpoint at ``url`` (metrics, state-change log) gave
    nothing: it does not answer on its address, or it answered with an HTTP error."""
    address = urlsplit(url).netloc or url
    if isinstance(exc, aiohttp.ClientResponseError):
        return f"broker {broker} answered HTTP {exc.status} on {address}"
    if isinstance(exc, (aiohttp.ClientConnectionError, asyncio.TimeoutError, TimeoutError, OSError)):
        return broker_silent(broker, address)
    return f"broker {broker} on {address}: {describe(exc)}"


# -- transactions -----------------------------------------------------------------------------------


def duration(seconds: float) -> str:
    """"45 s", "12 min", "3.5 h"."""
    if seconds < 120:
        return f"{max(0, round(seconds))} s"
    if seconds < 7200:
        return f"{round(seconds / 60)} min"
    return f"{seconds / 3600:.1f} h"


def find_hanging(topics: Iterable[str]) -> str:
    """The find-hanging command for a transaction's topics: ``--topic T`` for one topic, else
    every partition."""
    names = sorted(set(topics))
    return f"`odradek transactions find-hanging --topic {names[0]}`" if len(names) == 1 else \
        "`odradek transactions find-hanging`"


def transaction_overdue(transactional_id: str, state: str, coordinator: int, open_s: float, timeout_s: float,
                        topics: Iterable[str]) -> str:
    """Why a transaction open past its timeout is a problem, and what to run."""
    head = f"the transaction of {transactional_id!r} has been open for {duration(open_s)}, past its timeout of " \
           f"{duration(timeout_s)}"
    command = find_hanging(topics)
    if state == "Ongoing":
        return (f"{head}: its coordinator, broker {coordinator}, aborts such a transaction at its next check "
                f"(transaction.abort.timed.out.transaction.cleanup.interval.ms, 10 s by default); if it stays "
                f"open, {command} tells whether it hangs")
    return (f"{head} and is still {state}: its coordinator, broker {coordinator}, has not had every partition's "
            f"marker written (is a partition's leader down?); {command} tells whether a partition is left hanging")


def lso_unexplained(topic: str, partition: int, lag: int, lagging_s: float) -> str:
    """A partition whose last stable offset lags with no open transaction holding it."""
    return (f"partition {topic}-{partition}: its read_committed consumers have been held back for {duration(lagging_s)} "
            f"or more ({lag} records past its last stable offset) and no open transaction includes it: "
            f"`odradek transactions find-hanging --topic {topic}` tells whether a transaction hangs there (one open "
            f"past --max-transaction-timeout, 15 min by default), and `odradek transactions abort` ends one it finds")
