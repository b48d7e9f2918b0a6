"""kafka-transactions.sh's decisions in admin/transactions_command.py without a cluster: which
open transactions find-hanging reports (Kafka's FindHangingTransactionsCommand rules), what an
abort sends, and the text the commands print. The requests are faked; the real ones run in
tests/integration/test_transactions_cli.py."""
from __future__ import annotations

import time
from typing import Any

import pytest

from odradek.admin import transactions_command as tc
from odradek.admin.errors import AdminError
from odradek.broker.txn_admin_apis import DescribedTransaction
from odradek.cli import transactions as cli_transactions
from odradek.protocol.errors import ErrorCode

MINUTE_MS = 60_000


def producer(producer_id: int, start: int, age_ms: float, epoch: int = 0, coordinator_epoch: int = -1) -> dict[str, Any]:
    return {"producer_id": producer_id, "producer_epoch": epoch, "last_sequence": 4,
            "last_timestamp": int(time.time() * 1000 - age_ms), "coordinator_epoch": coordinator_epoch,
            "current_txn_start_offset": start}


class FakeAdmin(tc.TransactionsAdmin):
    """TransactionsAdmin whose requests answer from dicts: partitions' producers, the listed
    ids (producer id -> transactional id) and each id's description (None: not found)."""

    def __init__(self, producers: dict[tc.Partition, list[dict[str, Any]]], ids: dict[int, str],
                 owed: dict[str, list[tc.Partition] | None]) -> None:
        super().__init__("unused:1", 1.0)
        self._producers, self._ids, self._owed = producers, ids, owed
        self.listed_for: list[list[int]] = []
        self.markers: list[dict[str, Any]] = []

    def _partitions_to_search(self, topic: str | None, partition: int | None, broker: int | None) -> list[tc.Partition]:
        return sorted(self._producers)

    def producers(self, partitions: list[tc.Partition], broker: int | None = None) -> Any:
        return {tp: self._producers[tp] for tp in partitions if tp in self._producers}, {}

    def list_transactions(self, states: Any = (), producer_ids: Any = (), duration_ms: int | None = None) -> Any:
        self.listed_for.append(list(producer_ids))
        return [{"transactional_id": t, "coordinator": 1, "producer_id": p, "state": "Ongoing"}
                for p, t in self._ids.items()], []

    def _describe(self, transactional_id: str) -> tuple[int, DescribedTransaction]:
        owed = self._owed[transactional_id]
        if owed is None:
            return 1, DescribedTransaction(ErrorCode.TRANSACTIONAL_ID_NOT_FOUND, transactional_id, "", 0, 0, 0, 0, ())
        return 1, DescribedTransaction(0, transactional_id, "Ongoing", 60_000, 1, 5, 0, tuple(owed))

    def _check_partition(self, tp: tc.Partition) -> None:
        pass

    def _write_marker(self, tp: tc.Partition, body: dict[str, Any]) -> int:
        self.markers.append(body)
        return ErrorCode.NONE


def test_hanging_are_the_old_open_transactions_no_coordinator_will_end() -> None:
    old = 20 * MINUTE_MS
    admin = FakeAdmin(
        producers={("t", 0): [producer(1, 10, old), producer(2, 11, old), producer(3, 12, old),
                              producer(4, -1, old),              # nothing open
                              producer(5, 14, 10 * MINUTE_MS)],  # open, but younger than the largest timeout
                   ("t", 1): [producer(3, 7, old, epoch=2, coordinator_epoch=4)]},
        ids={2: "lost", 3: "live", 5: "young", 9: "other"},
        owed={"lost": None, "live": [("t", 1)], "young": None, "other": []})
    rows, failed = admin.find_hanging("t", None, None, 15 * MINUTE_MS)
    assert failed == []
    # 1: no transactional id has its producer id; 2: its coordinator does not hold the id;
    # 3 on t-0: the coordinator's transaction does not name t-0 (it does name t-1)
    assert [(r["partition"], r["producer_id"], r["start_offset"]) for r in rows] == [(0, 1, 10), (0, 2, 11), (0, 3, 12)]
    assert admin.listed_for == [[1, 2, 3]]  # ListTransactions asked about the candidates only
    assert all(r["duration_min"] == 20 for r in rows)
    rows, _ = admin.find_hanging("t", None, None, 5 * MINUTE_MS)  # a shorter timeout: 5 is old enough too
    assert [r["producer_id"] for r in rows] == [1, 2, 3, 5]


def test_no_open_transaction_asks_no_coordinator() -> None:
    admin = FakeAdmin(producers={("t", 0): [producer(1, -1, 0)]}, ids={}, owed={})
    assert admin.find_hanging("t", None, None, 0) == ([], [])
    assert admin.listed_for == []


def test_abort_by_start_offset_finds_the_producer_and_sends_a_negative_coordinator_epoch_as_0() -> None:
    admin = FakeAdmin(producers={("t", 3): [producer(8, 40, 0, epoch=6), producer(9, 12, 0, epoch=1)]}, ids={},
                      owed={})
    spec = admin.abort("t", 3, start_offset=12)
    assert spec == {"topic": "t", "partition": 3, "producer_id": 9, "producer_epoch": 1, "coordinator_epoch": 0}
    assert admin.markers == [{"markers": [{"producer_id": 9, "producer_epoch": 1, "transaction_result": False,
                                           "coordinator_epoch": 0,
                                           "topics": [{"name": "t", "partition_indexes": [3]}]}]}]
    admin.abort("t", 3, producer_id=8, producer_epoch=6, coordinator_epoch=5)
    assert admin.markers[-1]["markers"][0]["coordinator_epoch"] == 5
    with pytest.raises(AdminError, match="no open transaction starts at offset 13 on t-3 .open ones start at 12, 40"):
        admin.abort("t", 3, start_offset=13)


def test_a_refused_marker_is_one_error_with_what_to_do() -> None:
    admin = FakeAdmin(producers={}, ids={}, owed={})
    admin._write_marker = lambda tp, body: ErrorCode.TRANSACTION_COORDINATOR_FENCED  # type: ignore[method-assign]
    with pytest.raises(AdminError, match="TRANSACTION_COORDINATOR_FENCED .a later coordinator epoch"):
        admin.abort("t", 0, producer_id=1, producer_epoch=0, coordinator_epoch=0)


def test_text_is_kafkas_tables_and_empty_answers_say_so() -> None:
    assert tc.format_list([]) == "no transactional ids"
    assert tc.format_hanging([]) == "no hanging transactions"
    assert tc.format_list([{"transactional_id": "a", "coordinator": 2, "producer_id": 7, "state": "Ongoing"}]) == (
        "TransactionalId  Coordinator  ProducerId  TransactionState\n"
        "a                2            7           Ongoing")
    described = tc._description(3, DescribedTransaction(0, "a", "Empty", 60_000, -1, 7, 0, ()), 1_000)
    assert (described["start_time_ms"], described["duration_ms"]) == (None, None)
    assert tc.format_describe(described).splitlines()[1].split() == ["3", "a", "7", "0", "Empty", "60000", "None",
                                                                      "None"]
    described = tc._description(3, DescribedTransaction(0, "a", "Ongoing", 60_000, 400, 7, 0,
                                                        (("t", 1), ("s", 0))), 1_000)
    assert described["duration_ms"] == 600
    assert tc.format_describe(described).splitlines()[1].split()[-1] == "s-0,t-1"


def test_the_command_lines_states_are_kafkas() -> None:
    assert sorted(cli_transactions.STATES) == sorted(tc.STATES)
