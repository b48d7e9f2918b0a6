"""The controller's state-change log: one JSON line per transition and per election.

Kafka keeps a separate ``state.change.logger`` because reconstructing who decided what, in which
controller epoch, is how split-brain and lost-leader bugs get diagnosed. A JSON line per fact
keeps that greppable and lets the simulation's checkers parse it.
"""
from __future__ import annotations

import json
import logging
from typing import TextIO

from odradek.metadata import LeaderAndIsr, TopicPartition

LOGGER_NAME = "odradek.state_change"


class StateChangeLog:
    """Writes each record to ``sink`` when given (tests, files), else to the logger."""

    def __init__(self, sink: TextIO | None = None) -> None:
        self._sink = sink
        self._logger = logging.getLogger(LOGGER_NAME)

    def partition_transition(
        self,
        controller_id: int,
        controller_epoch: int,
        tp: TopicPartition,
        from_state: str,
        to_state: str,
        leader_and_isr: LeaderAndIsr | None = None,
    ) -> None:
        self._write("partition", controller_id, controller_epoch, tp, from_state, to_state,
                    leader_and_isr)

    def replica_transition(
        self,
        controller_id: int,
        controller_epoch: int,
        tp: TopicPartition,
        replica: int,
        from_state: str,
        to_state: str,
    ) -> None:
        self._write("replica", controller_id, controller_epoch, tp, from_state, to_state,
                    None, replica=replica)

    def leader_election(
        self,
        controller_id: int,
        controller_epoch: int,
        tp: TopicPartition,
        strategy: str,
        leader_and_isr: LeaderAndIsr,
    ) -> None:
        self._write("election", controller_id, controller_epoch, tp, None, None,
                    leader_and_isr, strategy=strategy)

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
        extra: dict[str, object] = {"error": f"{type(error).__name__}: {error}"}
        if replica is not None:
            extra["replica"] = replica
        self._write("failed", controller_id, controller_epoch, tp, from_state, to_state,
                    None, **extra)

    def flush(self) -> None:
        """The controller calls this once per event: a sink may buffer the event's lines."""
        if self._sink is not None:
            self._sink.flush()

    def _write(
        self,
        kind: str,
        controller_id: int,
        controller_epoch: int,
        tp: TopicPartition,
        from_state: str | None,
        to_state: str | None,
        leader_and_isr: LeaderAndIsr | None,
        **extra: object,
    ) -> None:
        record: dict[str, object] = {
            "kind": kind,
            "controller_id": controller_id,
            "controller_epoch": controller_epoch,
            "topic": tp.topic,
            "partition": tp.partition,
            "from": from_state,
            "to": to_state,
            "leader": leader_and_isr.leader if leader_and_isr else None,
            "isr": list(leader_and_isr.isr) if leader_and_isr else None,
            "leader_epoch": leader_and_isr.leader_epoch if leader_and_isr else None,
        }
        record.update(extra)
        line = json.dumps(record, sort_keys=True)
        if self._sink is not None:
            self._sink.write(line + "\n")
        else:
            self._logger.info(line)
