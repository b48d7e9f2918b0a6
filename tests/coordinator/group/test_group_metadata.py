"""Every legal and illegal group state transition of Kafka's GroupMetadata.transitionTo, and the
one way a waiting member is answered (maybeInvokeJoinCallback / maybeInvokeSyncCallback)."""
from __future__ import annotations

import asyncio
import itertools

import pytest

from odradek.coordinator.group.group_metadata import (
    VALID_PREVIOUS,
    GroupMetadata,
    GroupState,
    IllegalGroupStateError,
    JoinResult,
    MemberMetadata,
)
from odradek.protocol.errors import ErrorCode

G = GroupState

#: (from, to): Kafka's GroupMetadata.validPreviousStates, written out
LEGAL = {
    (G.PREPARING_REBALANCE, G.EMPTY),
    (G.EMPTY, G.PREPARING_REBALANCE),
    (G.STABLE, G.PREPARING_REBALANCE),
    (G.COMPLETING_REBALANCE, G.PREPARING_REBALANCE),
    (G.PREPARING_REBALANCE, G.COMPLETING_REBALANCE),
    (G.COMPLETING_REBALANCE, G.STABLE),
    (G.EMPTY, G.DEAD),
    (G.PREPARING_REBALANCE, G.DEAD),
    (G.COMPLETING_REBALANCE, G.DEAD),
    (G.STABLE, G.DEAD),
    (G.DEAD, G.DEAD),
}
ALL = list(itertools.product(GroupState, GroupState))


def test_the_table_is_kafkas() -> None:
    assert {(before, after) for after, befores in VALID_PREVIOUS.items() for before in befores} == LEGAL


@pytest.mark.parametrize(("before", "after"), sorted(LEGAL, key=str), ids=lambda s: s.value)
def test_a_legal_transition_changes_the_state_and_its_timestamp(before: GroupState, after: GroupState) -> None:
    group = GroupMetadata("g", before, now_ms=1)
    group.transition_to(after, now_ms=2)
    assert (group.state, group.state_timestamp_ms) == (after, 2)


@pytest.mark.parametrize(("before", "after"), sorted(set(ALL) - LEGAL, key=str), ids=lambda s: s.value)
def test_an_illegal_transition_raises_and_changes_nothing(before: GroupState, after: GroupState) -> None:
    group = GroupMetadata("g", before, now_ms=1)
    with pytest.raises(IllegalGroupStateError):
        group.transition_to(after, now_ms=2)
    assert (group.state, group.state_timestamp_ms) == (before, 1)


def test_the_state_changes_only_through_transition_to() -> None:
    group = GroupMetadata("g")
    with pytest.raises(AttributeError):
        group.state = GroupState.DEAD  # type: ignore[misc]


def _member() -> MemberMetadata:
    return MemberMetadata("m", None, "client", "/host", 1000, 10_000, "consumer", [("range", b"")])


def test_a_waiting_member_is_answered_once_and_waits_no_more() -> None:
    async def main() -> None:
        member = _member()
        member.awaiting_join = waiting = asyncio.get_running_loop().create_future()
        assert member.answer_join(JoinResult(ErrorCode.NONE, "m"))
        assert waiting.result().error == ErrorCode.NONE and member.awaiting_join is None
        assert not member.answer_join(JoinResult(ErrorCode.UNKNOWN_MEMBER_ID, "m"))
    asyncio.run(main())


def test_a_member_whose_request_was_given_up_is_not_answered() -> None:
    """The client went away: its JoinGroup's future was cancelled with the request."""
    async def main() -> None:
        member = _member()
        member.awaiting_join = waiting = asyncio.get_running_loop().create_future()
        waiting.cancel()
        assert not member.answer_join(JoinResult(ErrorCode.NONE, "m"))
        assert member.awaiting_join is None
    asyncio.run(main())
