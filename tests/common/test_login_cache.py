"""Remembered logins (common/login_cache.py): kept for their time, bounded, keyed by an HMAC of
the password so a wrong password never finds a right one's entry."""
from __future__ import annotations

from odradek.common.login_cache import LoginCache


def test_an_entry_lasts_its_time_and_only_for_the_same_password() -> None:
    now = [0.0]
    cache: LoginCache[int] = LoginCache(60.0, 10, lambda: now[0])
    right = cache.key("alice", "secret")
    cache.put(right, 200)
    assert cache.get(cache.key("alice", "secret")) == 200
    assert cache.get(cache.key("alice", "Secret")) is None and cache.get(cache.key("bob", "secret")) is None
    assert b"secret" not in right[1]
    now[0] = 61.0
    assert cache.get(right) is None


def test_the_map_is_bounded_dropping_the_expired_then_the_oldest() -> None:
    now = [0.0]
    cache: LoginCache[str] = LoginCache(10.0, 3, lambda: now[0])
    for i in range(3):
        cache.put(cache.key(f"u{i}", "p"), f"v{i}")
        now[0] += 1
    cache.put(cache.key("u3", "p"), "v3")  # none expired: the oldest (u0) goes
    assert len(cache) == 3 and cache.get(cache.key("u0", "p")) is None and cache.get(cache.key("u3", "p")) == "v3"
    now[0] = 12.5  # u1 and u2 expired
    cache.put(cache.key("u4", "p"), "v4")
    assert len(cache) == 2
    cache.forget(cache.key("u4", "p"))
    assert cache.get(cache.key("u4", "p")) is None
