"""A partition leader's KIP-890 part 1 bookkeeping: the checks with the transaction coordinator
under way for producers' first transactional batches here (Kafka's VerificationStateEntry and
VerificationGuard, kept by its ProducerStateManager).

Two things are kept per producer, both for as long as a check is under way:

- **The guard** (per producer id): an answer counts only if no marker for the producer was
  written here while the coordinator was asked, so a check that raced with the end of its
  transaction lets nothing in (KAFKA-17754's late batch would otherwise open a transaction no
  marker ends). Checks under way together share the guard: a producer's requests to one
  partition are pipelined (up to five in flight), and a new guard per request voided the one
  before it, refusing a batch of an open transaction with INVALID_TXN_STATE (bench
  transactions, linger.ms 0).
- **The turn** (per producer id and epoch): the requests of a producer that wait on a check
  here are appended in the order they came. A request checked on its own overtook the one
  before it (whose check was slower), and the producer died of OUT_OF_ORDER_SEQUENCE_NUMBER
  (bench transactions, linger.ms 0, five requests in flight). Kafka keeps the order by reading
  no further request from a connection until the current one is answered.

Nothing here reads the producer state: whether a batch needs a check at all is the partition's
question (a transaction of the producer already open here needs none).
"""
from __future__ import annotations

import asyncio

from odradek.protocol.errors import ErrorCode


class VerificationState:
    def __init__(self) -> None:
        #: producer id -> the guard of the checks under way for its next transaction here
        self._guards: dict[int, object] = {}
        #: (producer id, epoch) -> the completion of its last request waiting on a check here:
        #: its verdict, set once its batches were appended or refused
        self._last_turn: dict[tuple[int, int], asyncio.Future[ErrorCode]] = {}

    def start(self, producer_id: int) -> object:
        """The guard for a check about to be asked (shared with the checks already under way)."""
        guard = self._guards.get(producer_id)
        if guard is None:
            guard = self._guards[producer_id] = object()
        return guard

    def holds(self, producer_id: int, guard: object) -> bool:
        """Whether no marker for the producer was written since ``guard`` was handed out."""
        return self._guards.get(producer_id) is guard

    def transaction_ended(self, producer_id: int) -> None:
        """A marker for the producer was written: the checks under way were for a transaction
        now ended, and their answers must let nothing in."""
        self._guards.pop(producer_id, None)

    def take_turn(self, producer_id: int, producer_epoch: int
                  ) -> tuple[asyncio.Future[ErrorCode] | None, asyncio.Future[ErrorCode]]:
        """A produce request's place among the producer's requests waiting on a check here: (the
        one before it, to be waited for; its own, to be finished with ``turn_done``)."""
        key = (producer_id, producer_epoch)
        previous = self._last_turn.get(key)
        mine: asyncio.Future[ErrorCode] = asyncio.get_running_loop().create_future()
        self._last_turn[key] = mine
        return previous, mine

    def waiting(self, producer_id: int, producer_epoch: int) -> bool:
        """Whether a request of the producer waits on a check here: a batch arriving now must
        not be appended before it, even if the transaction opened meanwhile (the waiting ones
        resume only after the one that opened it)."""
        return (producer_id, producer_epoch) in self._last_turn

    def turn_done(self, producer_id: int, producer_epoch: int, mine: asyncio.Future[ErrorCode],
                  verdict: ErrorCode) -> None:
        """The request's batches are appended (or refused with ``verdict``): the next may go."""
        if not mine.done():
            mine.set_result(verdict)
        key = (producer_id, producer_epoch)
        if self._last_turn.get(key) is mine:
            del self._last_turn[key]
