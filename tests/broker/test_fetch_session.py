"""KIP-227 session bookkeeping on the leader, without a broker."""
from __future__ import annotations

import pytest

from odradek.broker.fetch_session import FetchSessionCache, FetchSessionError, FetchTarget
from odradek.common.metadata import TopicPartition
from odradek.protocol.errors import ErrorCode

A, B = TopicPartition("t", 0), TopicPartition("t", 1)


def target(tp: TopicPartition, offset: int) -> FetchTarget:
    return FetchTarget(tp, offset, 1 << 20, 0)


def test_initial_epoch_creates_a_session_holding_the_full_request() -> None:
    cache = FetchSessionCache()
    session, full = cache.resolve(0, 0, [target(A, 5), target(B, 7)], [])
    assert full and session is not None and session.id > 0 and session.epoch == 1
    assert {tp: t.fetch_offset for tp, t in session.targets.items()} == {A: 5, B: 7}


def test_incremental_request_updates_and_forgets() -> None:
    cache = FetchSessionCache()
    session, _ = cache.resolve(0, 0, [target(A, 5), target(B, 7)], [])
    assert session is not None
    again, full = cache.resolve(session.id, 1, [target(A, 9)], [B])
    assert again is session and not full and session.epoch == 2
    assert {tp: t.fetch_offset for tp, t in session.targets.items()} == {A: 9}


@pytest.mark.parametrize("session_id,epoch,code", [
    (12345, 1, ErrorCode.FETCH_SESSION_ID_NOT_FOUND),
    (None, 5, ErrorCode.INVALID_FETCH_SESSION_EPOCH),
])
def test_unknown_session_or_wrong_epoch_is_refused(session_id: int | None, epoch: int, code: ErrorCode) -> None:
    cache = FetchSessionCache()
    session, _ = cache.resolve(0, 0, [target(A, 0)], [])
    assert session is not None
    with pytest.raises(FetchSessionError) as err:
        cache.resolve(session.id if session_id is None else session_id, epoch, [], [])
    assert err.value.code == code


def test_final_epoch_closes_the_session_and_is_sessionless() -> None:
    cache = FetchSessionCache()
    session, _ = cache.resolve(0, 0, [target(A, 0)], [])
    assert session is not None
    assert cache.resolve(session.id, -1, [target(A, 0)], []) == (None, True)
    assert len(cache) == 0
    with pytest.raises(FetchSessionError):
        cache.resolve(session.id, 1, [], [])


def test_least_recently_used_session_is_evicted_at_capacity() -> None:
    cache = FetchSessionCache(max_sessions=2)
    first, _ = cache.resolve(0, 0, [target(A, 0)], [])
    second, _ = cache.resolve(0, 0, [target(A, 0)], [])
    assert first is not None and second is not None
    cache.resolve(first.id, 1, [], [])  # first is now the most recent
    cache.resolve(0, 0, [target(B, 0)], [])
    with pytest.raises(FetchSessionError):
        cache.resolve(second.id, 1, [], [])
    assert cache.resolve(first.id, 2, [], [])[0] is first
