"""The controller's state-change log: one JSON line per transition and per election.

Kafka keeps a separate ``state.change.logger`` because reconstructing who decided what, in which
controller epoch, is how split-brain and lost-leader bugs get diagnosed. A JSON line per fact
keeps that greppable and lets the simulation's checkers parse it. Each line carries the
wall-clock time its record was made (``time_ms``): lines are written after the decisions.
"""
from __future__ import annotations

import json
import logging
import time
from functools import lru_cache
from typing import Any, Callable, Iterable, Iterator, TextIO

from odradek.common.metadata import LeaderAndIsr, TopicPartition

LOGGER_NAME = "odradek.state_change"


class StateChangeLog:
    """Writes each record to ``sink`` when given (tests, files), else to the logger.

    Records are kept until ``flush`` and only then formatted and written in one call: a
    failover at 10,000 partitions makes ~43,000 lines, and formatting them while deciding
    delayed every broker's LeaderAndIsr by that much (see Controller for when it flushes)."""

    def __init__(self, sink: TextIO | None = None) -> None:
        self._sink = sink
        self._logger = logging.getLogger(LOGGER_NAME)
        #: (format function, its arguments, keyword arguments) per record, or per batch of
        #: replica records; each function gives the lines of its record(s)
        self._records: list[tuple[Callable[..., Iterable[str]], tuple[Any, ...], dict[str, Any]]] = []
        self._pending = 0  # lines in _records

    @property
    def pending(self) -> int:
        """Lines recorded and not yet flushed."""
        return self._pending

    def partition_transitions(
        self,
        controller_id: int,
        controller_epoch: int,
        tps: Iterable[TopicPartition],
        from_states: Iterable[str],
        to_state: str,
        leaderships: Iterable[LeaderAndIsr] | None = None,
    ) -> None:
        """One line per partition moved to ``to_state``, with its new leadership if given."""
        tps = tuple(tps)
        lais = tuple(leaderships) if leaderships is not None else (None,) * len(tps)
        self._records.append((_partition_lines, (controller_id, controller_epoch, tps,
                                                 tuple(from_states), to_state, lais,
                                                 _now_ms()), {}))
        self._pending += len(tps)

    def replica_transitions(
        self,
        controller_id: int,
        controller_epoch: int,
        replicas: Iterable[tuple[TopicPartition, int]],
        from_states: Iterable[str],
        to_state: str,
    ) -> None:
        """One line per replica moved to ``to_state``."""
        replicas = tuple(replicas)
        self._records.append((_replica_lines, (controller_id, controller_epoch, replicas,
                                               tuple(from_states), to_state, _now_ms()), {}))
        self._pending += len(replicas)

    def elections(
        self,
        controller_id: int,
        controller_epoch: int,
        strategy: str,
        tps: Iterable[TopicPartition],
        from_states: Iterable[str],
        leaderships: Iterable[LeaderAndIsr],
    ) -> None:
        """Per partition, a line for its election (``strategy``, new leadership) and one
        for its transition to OnlinePartition; one record for the thousands of elections
        of a failover."""
        tps = tuple(tps)
        self._records.append((_election_lines, (controller_id, controller_epoch, strategy, tps,
                                                tuple(from_states), tuple(leaderships),
                                                _now_ms()), {}))
        self._pending += 2 * len(tps)

    def failed_transition(
        self,
        controller_id: int,
        controller_epoch: int,
        tp: TopicPartition,
        from_state: str,
        to_state: str,
        error: Exception,
        replica: int | None = None,
    ) -> None:
        """Invalid or failed transitions are logged too: they are the interesting ones."""
        self._write("failed", controller_id, controller_epoch, tp, from_state, to_state,
                    None, replica=replica, error=f"{type(error).__name__}: {error}")

    def flush(self) -> None:
        """Format and write every pending line, in one write."""
        records, self._records = self._records, []
        self._pending = 0
        lines = [line for format_, args, kwargs in records for line in format_(*args, **kwargs)]
        if self._sink is not None:
            if lines:
                self._sink.write("\n".join(lines) + "\n")
            self._sink.flush()
        else:
            for line in lines:
                self._logger.info(line)

    def _write(self, *args: Any, **kwargs: Any) -> None:
        self._records.append((_line, args, {**kwargs, "time_ms": _now_ms()}))
        self._pending += 1


def _replica_lines(controller_id: int, controller_epoch: int,
                   replicas: Iterable[tuple[TopicPartition, int]], from_states: Iterable[str],
                   to_state: str, time_ms: int) -> Iterator[str]:
    """The same JSON as ``_line`` makes, in one loop: a failover moves tens of thousands of
    replicas."""
    head = f'{{"controller_epoch": {controller_epoch}, "controller_id": {controller_id}, "from": '
    middle = ', "isr": null, "kind": "replica", "leader": null, "leader_epoch": null, "partition": '
    to = f', "time_ms": {time_ms}, "to": {_jstr(to_state)}, "topic": '
    return (f'{head}{_jstr(from_state)}{middle}{tp.partition}, "replica": {replica}{to}'
            f'{_jstr(tp.topic)}}}'
            for (tp, replica), from_state in zip(replicas, from_states))


def _partition_lines(controller_id: int, controller_epoch: int,
                     tps: tuple[TopicPartition, ...], from_states: tuple[str, ...],
                     to_state: str, leaderships: tuple[LeaderAndIsr | None, ...],
                     time_ms: int) -> Iterator[str]:
    for tp, from_state, lai in zip(tps, from_states, leaderships):
        yield from _line("partition", controller_id, controller_epoch, tp, from_state, to_state,
                         lai, time_ms=time_ms)


def _election_lines(controller_id: int, controller_epoch: int, strategy: str,
                    tps: tuple[TopicPartition, ...], from_states: tuple[str, ...],
                    leaderships: tuple[LeaderAndIsr, ...], time_ms: int) -> Iterator[str]:
    online = "OnlinePartition"
    for tp, from_state, lai in zip(tps, from_states, leaderships):
        yield from _line("election", controller_id, controller_epoch, tp, None, None, lai,
                         strategy=strategy, time_ms=time_ms)
        yield from _line("partition", controller_id, controller_epoch, tp, from_state, online,
                         lai, time_ms=time_ms)


def _line(
    kind: str,
    controller_id: int,
    controller_epoch: int,
    tp: TopicPartition,
    from_state: str | None,
    to_state: str | None,
    leader_and_isr: LeaderAndIsr | None,
    replica: int | None = None,
    strategy: str | None = None,
    error: str | None = None,
    time_ms: int = 0,
) -> tuple[str]:
    # One f-string with the keys in sorted order, not json.dumps of a dict: a failover at
    # 10,000 partitions writes ~40,000 lines, and json.dumps was a fifth of its time.
    if leader_and_isr is None:
        leadership = '"isr": null, "kind": "%s", "leader": null, "leader_epoch": null' % kind
    else:
        leadership = (f'"isr": {_jlist(leader_and_isr.isr)}, "kind": "{kind}", '
                      f'"leader": {leader_and_isr.leader}, '
                      f'"leader_epoch": {leader_and_isr.leader_epoch}')
    return (f'{{"controller_epoch": {controller_epoch}, "controller_id": {controller_id}, '
            f'{"" if error is None else f"{_ERROR}{json.dumps(error)}, "}'
            f'"from": {_jstr(from_state)}, {leadership}, "partition": {tp.partition}, '
            f'{"" if replica is None else f"{_REPLICA}{replica}, "}'
            f'{"" if strategy is None else f"{_STRATEGY}{_jstr(strategy)}, "}'
            f'"time_ms": {time_ms}, "to": {_jstr(to_state)}, "topic": {_jstr(tp.topic)}}}',)


def _now_ms() -> int:
    """When a record was made (its line is written later): wall-clock milliseconds."""
    return int(time.time() * 1000)


_ERROR, _REPLICA, _STRATEGY = '"error": ', '"replica": ', '"strategy": '


@lru_cache(maxsize=4096)
def _jstr(value: str | None) -> str:
    """A JSON string literal (topic and state names repeat, so they are cached)."""
    return json.dumps(value)


@lru_cache(maxsize=4096)
def _jlist(isr: tuple[int, ...]) -> str:
    return json.dumps(list(isr))
