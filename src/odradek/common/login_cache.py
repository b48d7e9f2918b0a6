"""Remembered logins: what checking a user's password decided, kept for a while so that a client
asking every few seconds (a Prometheus scrape, a browser's requests to the dashboard) does not
pay for the check each time (PBKDF2 over a SCRAM credential, or a SASL login to a broker).

Entries are keyed by the user and an HMAC of the password under a key made for this process, so
the memory holds no password, and a wrong password never finds the entry of a right one. Each
entry lasts ``ttl_s``; the map holds at most ``max_entries`` (expired ones are dropped first,
then the oldest). Thread-safe.
"""
from __future__ import annotations

import hmac
import secrets
import threading
import time
from collections.abc import Callable
from typing import Generic, TypeVar

V = TypeVar("V")
LoginKey = tuple[str, bytes]


class LoginCache(Generic[V]):
    def __init__(self, ttl_s: float, max_entries: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.ttl_s = ttl_s
        self._max_entries = max_entries
        self._clock = clock
        self._key = secrets.token_bytes(32)
        self._lock = threading.Lock()
        self._entries: dict[LoginKey, tuple[float, V]] = {}

    def key(self, user: str, password: str) -> LoginKey:
        return user, hmac.digest(self._key, password.encode("utf-8", "surrogatepass"), "sha256")

    def get(self, key: LoginKey) -> V | None:
        """The remembered value, None when there is none or it has expired."""
        with self._lock:
            entry = self._entries.get(key)
        return entry[1] if entry is not None and entry[0] > self._clock() else None

    def put(self, key: LoginKey, value: V) -> None:
        now = self._clock()
        with self._lock:
            if len(self._entries) >= self._max_entries:
                self._entries = {k: e for k, e in self._entries.items() if e[0] > now}
                while len(self._entries) >= self._max_entries:
                    del self._entries[next(iter(self._entries))]
            self._entries[key] = (now + self.ttl_s, value)

    def __len__(self) -> int:
        return len(self._entries)

    def forget(self, key: LoginKey) -> None:
        with self._lock:
            self._entries.pop(key, None)
