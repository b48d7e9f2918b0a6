"""KIP-890's bookkeeping at a leader, alone: the order of a producer's requests waiting on a
check (the guard is tested through Partition, with the marker that voids it)."""
from __future__ import annotations

import asyncio

from odradek.broker.verification_state import VerificationState
from odradek.protocol.errors import ErrorCode


def test_a_producers_waiting_requests_go_in_the_order_they_came_and_take_a_refusal_along() -> None:
    async def main() -> None:
        state = VerificationState()
        first_before, first = state.take_turn(7, 0)
        second_before, second = state.take_turn(7, 0)
        other_before, other = state.take_turn(8, 0)  # another producer queues apart
        assert first_before is None and second_before is first and other_before is None
        assert state.waiting(7, 0) and not state.waiting(7, 1)
        state.turn_done(7, 0, first, ErrorCode.NOT_ENOUGH_REPLICAS)
        assert await second_before == ErrorCode.NOT_ENOUGH_REPLICAS  # the second learns the first's refusal
        assert state.waiting(7, 0)  # the second still waits on its own check
        state.turn_done(7, 0, second, ErrorCode.NONE)
        state.turn_done(8, 0, other, ErrorCode.NONE)
        assert not state.waiting(7, 0) and not state.waiting(8, 0)

    asyncio.run(main())


def test_a_request_done_out_of_turn_leaves_the_later_ones_queued() -> None:
    async def main() -> None:
        state = VerificationState()
        _, first = state.take_turn(7, 0)
        _, second = state.take_turn(7, 0)
        state.turn_done(7, 0, first, ErrorCode.NONE)
        assert state.waiting(7, 0)  # the last turn is the second's, not the first's
        state.turn_done(7, 0, second, ErrorCode.NONE)
        assert not state.waiting(7, 0)

    asyncio.run(main())
