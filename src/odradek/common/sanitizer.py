"""Kafka's Sanitizer (org.apache.kafka.common.utils.Sanitizer): a user name or client id as a
ZooKeeper node name, the way Kafka's brokers and tools spell it.

Why: /config/users/<user> and /config/clients/<client-id> are read and written by Kafka's own
tools (kafka-configs.sh) as well as by ours, so a name must become the very same znode name in
both. Kafka URL-encodes it (java.net.URLEncoder, UTF-8: letters, digits and ``. - * _`` kept,
every other byte as %XX in upper case), then writes ``*`` as %2A and the space as %20 instead of
URLEncoder's ``+``. So "alice" stays "alice", "CN=alice,O=x" is "CN%3Dalice%2CO%3Dx", and a name
can never be a path of its own ("a/b" is "a%2Fb").

Where this differs from Kafka: the names "." and "..", which URLEncoder keeps and ZooKeeper
refuses as a path element (Kafka fails such a user with an IllegalArgumentException), are
spelled %2E and %2E%2E, which Kafka's desanitize reads back as "." and "..".
"""
from __future__ import annotations

from urllib.parse import unquote_plus

#: the ASCII characters java.net.URLEncoder leaves as they are, less "*" (Sanitizer's %2A)
_KEPT = frozenset(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-_")


def sanitize(name: str) -> str:
    """The znode name of a user name or client id (Kafka's Sanitizer.sanitize)."""
    if name in (".", ".."):
        return "%2E" * len(name)
    return "".join(chr(b) if b in _KEPT else f"%{b:02X}" for b in name.encode("utf-8"))


def desanitize(name: str) -> str:
    """The user name or client id a znode name stands for (Kafka's Sanitizer.desanitize, which
    is URLDecoder: %XX and "+" for a space). ValueError for %XX bytes that are not UTF-8."""
    return unquote_plus(name, encoding="utf-8", errors="strict")
