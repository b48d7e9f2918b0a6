"""The dashboard's transactions section from hand-made answers: what a round reads and how much
it may ask (txn_reader.read_transactions, with a fake cluster), and what the page shows of it
(model.transactions_view): open times, overdue transactions, each partition's last stable
offset lag from the brokers' scrapes, and the plain-words notices pointing at
`odradek transactions find-hanging`."""
from __future__ import annotations

import time
from collections.abc import Iterable
from types import SimpleNamespace
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest

from odradek.broker.metrics import TransactionsCollector
from odradek.broker.txn_admin_apis import DescribedTransaction
from odradek.common.metadata import TopicPartition
from odradek.protocol.errors import ErrorCode
from odradek.ui import model, plain_words
from odradek.ui.txn_reader import read_transactions, to_describe

NOW_MS = 1_700_000_000_000.0


# -- the reader ---------------------------------------------------------------------------------


class FakeCluster:
    """ListTransactions and DescribeTransactions answered from ``ids`` (id -> (coordinator,
    state)); ``unreachable`` coordinators raise as a refused connection does; ``not_coordinator``
    ids are answered with NOT_COORDINATOR. Records each DescribeTransactions."""

    def __init__(self, ids: dict[str, tuple[int, str]], unreachable: Iterable[int] = (),
                 not_coordinator: Iterable[str] = (), list_errors: Iterable[str] = ()) -> None:
        self.ids, self.unreachable, self.not_coordinator = ids, set(unreachable), set(not_coordinator)
        self.list_errors = list(list_errors)
        self.described: list[tuple[str, list[str]]] = []

    def list_transactions(self) -> tuple[list[dict[str, Any]], list[str]]:
        return [{"transactional_id": i, "coordinator": c, "producer_id": 1000 + n, "state": s}
                for n, (i, (c, s)) in enumerate(sorted(self.ids.items()))], self.list_errors

    def addresses(self) -> dict[int, str]:
        return {1: "h:9001", 2: "h:9002", 3: "h:9003"}

    def describe(self, address: str, transactional_ids: list[str]) -> list[DescribedTransaction]:
        self.described.append((address, list(transactional_ids)))
        if int(address[-1]) in self.unreachable:
            raise ConnectionRefusedError(111, "Connection refused")
        out = []
        for i in transactional_ids:
            if i in self.not_coordinator:
                out.append(DescribedTransaction(ErrorCode.NOT_COORDINATOR, i, "", 0, -1, 0, 0, ()))
            else:
                state = self.ids[i][1]
                start = int(NOW_MS) - 5000 if state in model.OPEN_STATES else -1
                out.append(DescribedTransaction(0, i, state, 60000, start, 7, 3, (("t", 1), ("t", 0))))
        return out


def _later() -> float:
    return time.monotonic() + 60


def test_a_round_describes_at_most_its_cap_open_ones_first_one_request_per_coordinator() -> None:
    ids = {f"idle-{n:02d}": (1 + n % 3, "CompleteCommit") for n in range(40)}
    ids |= {"open-a": (2, "Ongoing"), "open-b": (3, "PrepareCommit"), "open-c": (2, "Ongoing")}
    cluster = FakeCluster(ids)
    read = read_transactions(cluster, _later(), limit=10)
    described = [i for _, batch in cluster.described for i in batch]
    assert len(described) == 10 and len(cluster.described) == 3  # one DescribeTransactions per coordinator
    assert {"open-a", "open-b", "open-c"} <= set(described)
    assert [t["transactional_id"] for t in read["transactions"]][:3] == ["open-a", "open-b", "open-c"]
    assert (read["listed"], read["open"], read["undescribed_open"], read["errors"]) == (43, 3, 0, [])
    a = next(t for t in read["transactions"] if t["transactional_id"] == "open-a")
    assert a == {"transactional_id": "open-a", "state": "Ongoing", "coordinator": 2, "producer_id": 7,
                 "producer_epoch": 3, "timeout_ms": 60000, "start_time_ms": int(NOW_MS) - 5000,
                 "partitions": [["t", 0], ["t", 1]], "error": None}
    assert read["started_ms"] <= read["ended_ms"]


def test_open_transactions_past_the_cap_are_counted_as_not_described() -> None:
    cluster = FakeCluster({f"open-{n}": (1, "Ongoing") for n in range(5)})
    read = read_transactions(cluster, _later(), limit=3)
    assert len(read["transactions"]) == 3 and read["open"] == 5 and read["undescribed_open"] == 2


def test_a_round_past_its_budget_asks_no_coordinator() -> None:
    cluster = FakeCluster({"a": (1, "Ongoing"), "b": (2, "Empty")})
    read = read_transactions(cluster, time.monotonic() - 1)
    assert cluster.described == []
    assert {t["transactional_id"]: (t["state"], t["error"]) for t in read["transactions"]} == {
        "a": ("Ongoing", "not described: this round ran out of time"),
        "b": ("Empty", "not described: this round ran out of time")}
    assert read["undescribed_open"] == 1


def test_a_coordinator_that_does_not_answer_costs_only_its_own_ids() -> None:
    cluster = FakeCluster({"a": (1, "Ongoing"), "b": (2, "Ongoing"), "c": (2, "Ongoing"), "gone": (4, "Ongoing")},
                          unreachable=[1], not_coordinator=["c"], list_errors=["broker 3: cannot reach h:9003"])
    read = read_transactions(cluster, _later())
    rows = {t["transactional_id"]: t for t in read["transactions"]}
    assert rows["a"]["error"] == "not described: cannot reach its coordinator, broker 1 at h:9001: Connection refused"
    assert rows["a"]["state"] == "Ongoing" and rows["a"]["producer_epoch"] is None  # what ListTransactions said
    assert rows["b"]["error"] is None and rows["b"]["producer_epoch"] == 3
    assert rows["c"]["error"] == ("not described: NOT_COORDINATOR from broker 2 (its coordinator is moving to "
                                  "another broker)")
    assert rows["gone"]["error"] == "not described: its coordinator, broker 4, is not live"
    assert read["undescribed_open"] == 3 and read["errors"] == ["broker 3: cannot reach h:9003"]


def test_an_id_two_brokers_list_is_described_once_where_it_is_open() -> None:
    listed = [{"transactional_id": "x", "coordinator": 1, "producer_id": 5, "state": "CompleteCommit"},
              {"transactional_id": "x", "coordinator": 2, "producer_id": 5, "state": "Ongoing"},
              {"transactional_id": "w", "coordinator": 1, "producer_id": 6, "state": "Empty"}]
    assert [(t["transactional_id"], t["coordinator"]) for t in to_describe(listed, 10)] == [("x", 2), ("w", 1)]


# -- the view -------------------------------------------------------------------------------------


def txn(transactional_id: str, state: str = "Ongoing", open_s: float | None = 5.0, timeout_s: float = 60.0,
        partitions: list[tuple[str, int]] | None = None, coordinator: int = 2, error: str | None = None) -> dict:
    return {"transactional_id": transactional_id, "state": state, "coordinator": coordinator, "producer_id": 9,
            "producer_epoch": 1, "timeout_ms": int(timeout_s * 1000),
            "start_time_ms": None if open_s is None else NOW_MS - open_s * 1000,
            "partitions": [list(p) for p in (partitions if partitions is not None else [("t", 0)])], "error": error}


def a_read(*transactions: dict, started_ms: float = NOW_MS - 1000, ended_ms: float = NOW_MS - 900,
           undescribed_open: int = 0, errors: list[str] | None = None) -> dict:
    return {"transactions": list(transactions), "listed": len(transactions),
            "open": sum(t["state"] in model.OPEN_STATES for t in transactions), "undescribed_open": undescribed_open,
            "errors": errors or [], "started_ms": started_ms, "ended_ms": ended_ms}


LEADERS = {("t", 0): 1, ("t", 1): 2, ("t", 2): 3, ("u", 0): 1}


def test_open_times_and_a_transaction_open_past_its_timeout() -> None:
    view = model.transactions_view([a_read(
        txn("fresh", open_s=30), txn("late", open_s=75, partitions=[("t", 0), ("t", 1)], coordinator=3),
        txn("done", state="CompleteCommit", open_s=500, partitions=[]),
        txn("committing", state="PrepareCommit", open_s=61, partitions=[("t", 2), ("u", 0)]))], LEADERS, None, NOW_MS)
    rows = {r["transactional_id"]: r for r in view["transactions"]}
    assert [r["transactional_id"] for r in view["transactions"]] == ["late", "committing", "fresh", "done"]
    assert rows["late"]["open_s"] == 75 and rows["late"]["overdue"]
    assert rows["fresh"]["open_s"] == 30 and not rows["fresh"]["overdue"]
    assert rows["done"]["open_s"] is None and not rows["done"]["overdue"] and not rows["done"]["open"]
    assert rows["committing"]["overdue"]
    assert view["problems"] == [
        "the transaction of 'late' has been open for 75 s, past its timeout of 60 s: its coordinator, broker 3, "
        "aborts such a transaction at its next check (transaction.abort.timed.out.transaction.cleanup.interval.ms, "
        "10 s by default); if it stays open, `odradek transactions find-hanging --topic t` tells whether it hangs",
        "the transaction of 'committing' has been open for 61 s, past its timeout of 60 s and is still "
        "PrepareCommit: its coordinator, broker 2, has not had every partition's marker written (is a "
        "partition's leader down?); `odradek transactions find-hanging` tells whether a partition is left hanging"]
    # no broker's metrics read: no lag is known, and the page says so
    assert not view["lso_known"] and view["lagging"] == []
    assert {p["name"]: p["lso_lag"] for p in rows["late"]["partitions"]} == {"t-0": None, "t-1": None}


def test_each_partition_has_its_last_stable_offset_lag_where_its_leader_was_scraped() -> None:
    lso = model.LsoLags({("t", 0): 12}, frozenset({1, 2}), NOW_MS, {("t", 0): NOW_MS - 3000})
    view = model.transactions_view([a_read(txn("a", partitions=[("t", 0), ("t", 1), ("t", 2)]))], LEADERS, lso,
                                   NOW_MS)
    assert {p["name"]: p["lso_lag"] for p in view["transactions"][0]["partitions"]} == \
        {"t-0": 12, "t-1": 0, "t-2": None}  # broker 3, t-2's leader, was not scraped
    assert view["lagging"] == [{"topic": "t", "partition": 0, "name": "t-0", "lso_lag": 12, "lagging_s": 3.0,
                                "held_by": ["a"]}]
    assert view["lso_known"] and view["problems"] == []


def test_a_partition_lagging_with_no_open_transaction_is_named_with_find_hanging() -> None:
    lso = model.LsoLags({("u", 0): 40, ("t", 0): 5}, frozenset({1, 2, 3}), NOW_MS,
                        {("u", 0): NOW_MS - 30_000, ("t", 0): NOW_MS - 30_000})
    view = model.transactions_view([a_read(txn("a"))], LEADERS, lso, NOW_MS)
    assert view["problems"] == [
        "partition u-0: its read_committed consumers have been held back for 30 s or more (40 records past its "
        "last stable offset) and no open transaction includes it: `odradek transactions find-hanging --topic u` "
        "tells whether a transaction hangs there (one open past --max-transaction-timeout, 15 min by default), "
        "and `odradek transactions abort` ends one it finds"]
    assert [(p["name"], p["held_by"]) for p in view["lagging"]] == [("u-0", []), ("t-0", ["a"])]  # furthest first


def test_a_lag_is_named_only_against_a_read_made_wholly_while_it_lagged() -> None:
    def problems(since_ms: float, reads: list[dict], at_ms: float = NOW_MS) -> list[str]:
        lso = model.LsoLags({("u", 0): 40}, frozenset({1}), at_ms, {("u", 0): since_ms})
        return model.transactions_view(reads, LEADERS, lso, NOW_MS)["problems"]

    held = a_read(txn("holder", partitions=[("u", 0)]), started_ms=NOW_MS - 4000, ended_ms=NOW_MS - 3900)
    released = a_read(txn("holder", state="CompleteCommit", partitions=[]))
    assert problems(NOW_MS - 60_000, [held, released])  # still lagging after the holder committed
    # the newest read ended after the last scrape: the one before it is the one judged
    assert not problems(NOW_MS - 60_000, [held, released], at_ms=NOW_MS - 950)
    # lagging for less than LAG_NOTICE_S, or only since the read started
    assert not problems(NOW_MS - 5_000, [released])
    assert not problems(NOW_MS - 15_000, [a_read(started_ms=NOW_MS - 20_000, ended_ms=NOW_MS - 900)])
    # an open transaction not described may be the one holding it; a broker did not list its own
    assert not problems(NOW_MS - 60_000, [a_read(undescribed_open=1)])
    assert not problems(NOW_MS - 60_000, [a_read(errors=["broker 3: cannot reach h:9003"])])
    assert problems(NOW_MS - 60_000, [a_read()])


def test_notices_are_capped() -> None:
    late = [txn(f"late-{n:02d}", open_s=120) for n in range(model.MAX_NOTICES + 5)]
    view = model.transactions_view([a_read(*late)], LEADERS, None, NOW_MS)
    assert len(view["problems"]) == model.MAX_NOTICES + 1 and view["problems"][-1] == "and 5 more"


def test_nothing_read_yet() -> None:
    view = model.transactions_view([], {}, None, NOW_MS)
    assert not view["read"] and view["transactions"] == [] and view["problems"] == [] and view["read_at"] is None


# -- the brokers' scrape ----------------------------------------------------------------------------


def test_lso_lags_come_from_the_brokers_laststableoffsetlag_series() -> None:
    partitions = [SimpleNamespace(tp=TopicPartition("t", 0), is_leader=True, high_watermark=50, last_stable_offset=38),
                  SimpleNamespace(tp=TopicPartition("t", 1), is_leader=True, high_watermark=9, last_stable_offset=9),
                  SimpleNamespace(tp=TopicPartition("u", 3), is_leader=False, high_watermark=9, last_stable_offset=1)]
    registry = CollectorRegistry()
    registry.register(TransactionsCollector(lambda: 1, lambda: {"timeout": 2}, lambda: partitions))
    text = generate_latest(registry).decode()
    assert model.lso_lags(text) == {("t", 0): 12}
    assert model.metric_sample(text)["leaders"] == 0  # the charts are not thrown by the new series


def test_lagging_since_keeps_a_partition_first_seen_lagging_until_a_scrape_without_it() -> None:
    first = model.lagging_since({}, {("t", 0): 3}, 1000.0)
    second = model.lagging_since(first, {("t", 0): 9, ("t", 1): 1}, 3000.0)
    assert second == {("t", 0): 1000.0, ("t", 1): 3000.0}
    assert model.lagging_since(second, {("t", 1): 2}, 5000.0) == {("t", 1): 3000.0}
    assert model.lagging_since(second, {("t", 0): 2}, 7000.0) == {("t", 0): 1000.0}


def test_plain_durations_and_find_hanging_commands() -> None:
    assert [plain_words.duration(s) for s in (0.4, 75, 119.6, 600, 9000)] == ["0 s", "75 s", "120 s", "10 min", "2.5 h"]
    assert plain_words.find_hanging(["t", "t"]) == "`odradek transactions find-hanging --topic t`"
    assert plain_words.find_hanging(["t", "u"]) == "`odradek transactions find-hanging`"
