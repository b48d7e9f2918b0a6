"""The dashboard's transactions reads (KIP-98, KIP-664): ListTransactions to every live broker,
as `odradek transactions list` asks (admin/transactions_command.py), then DescribeTransactions
to each coordinator, as `odradek transactions describe` asks.

No child process, unlike the consumer groups (kafka_reader.py): these are the admin tools' raw
requests, each on a connection of its own with its own socket timeout, and no librdkafka handle
is involved, so the poller runs them on a worker thread as it runs the reassignments' requests.

A round's cost is bounded as the groups reader's is: one Metadata and one ListTransactions per
live broker, then at most MAX_DESCRIBED ids described (the open transactions first, then by
id), in one DescribeTransactions per coordinator: the ListTransactions
answers already say which broker coordinates each id, so no FindCoordinator is sent per id. A
coordinator is not asked once the round's budget has passed; its ids then carry why, as a group
left undescribed does.
"""
from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from typing import Any, Protocol

from odradek.admin.admin_client import connection_failure, metadata_request, send_request_raw
from odradek.admin.transactions_command import CLIENT_ID, DESCRIBE_TRANSACTIONS, TransactionsAdmin
from odradek.broker.txn_admin_apis import DescribedTransaction, read_describe_transactions_response
from odradek.protocol.errors import ErrorCode, error_name
from odradek.ui.model import OPEN_STATES

#: transactional ids described per round (one DescribeTransactions per coordinator carries them)
MAX_DESCRIBED = 50
#: why an id's coordinator could not describe it, in an operator's words
_DESCRIBE_HINTS: dict[int, str] = {
    ErrorCode.NOT_COORDINATOR: "its coordinator is moving to another broker",
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS: "its coordinator is still loading __transaction_state",
    ErrorCode.COORDINATOR_NOT_AVAILABLE: "its coordinator is not available",
    ErrorCode.TRANSACTIONAL_ID_NOT_FOUND: "its coordinator no longer holds it (it expired)",
}


class TransactionSource(Protocol):
    """What read_transactions asks of the cluster (a fake one in the unit tests)."""

    def list_transactions(self) -> tuple[list[dict[str, Any]], list[str]]:
        """TransactionsAdmin.list_transactions: the ids each broker coordinates, and the brokers
        that could not answer."""

    def addresses(self) -> dict[int, str]:
        """host:port of each live broker."""

    def describe(self, address: str, transactional_ids: list[str]) -> list[DescribedTransaction]:
        """One DescribeTransactions to the broker at ``address``; OSError or ValueError when it
        gave no readable answer."""


class ClusterTransactions:
    """The cluster's answers, each request waiting at most ``timeout`` seconds."""

    def __init__(self, bootstrap: str, timeout: float) -> None:
        self.bootstrap, self.timeout = bootstrap, timeout

    def list_transactions(self) -> tuple[list[dict[str, Any]], list[str]]:
        return TransactionsAdmin(self.bootstrap, self.timeout).list_transactions()

    def addresses(self) -> dict[int, str]:
        md = metadata_request(self.bootstrap, [], self.timeout)
        return {int(b.node_id): f"{b.host}:{b.port}" for b in md.brokers}

    def describe(self, address: str, transactional_ids: list[str]) -> list[DescribedTransaction]:
        frame = send_request_raw(address, DESCRIBE_TRANSACTIONS, 0, {"transactional_ids": transactional_ids},
                                 self.timeout, CLIENT_ID)
        return read_describe_transactions_response(frame)[1]


def to_describe(listed: Iterable[Mapping[str, Any]], limit: int) -> list[Mapping[str, Any]]:
    """The ids a round describes: each id once (while its coordinator moves two brokers may list
    it: the one listing it open wins), open transactions first, then by id; at most ``limit``."""
    by_id: dict[str, Mapping[str, Any]] = {}
    for t in listed:
        kept = by_id.get(t["transactional_id"])
        if kept is None or (t["state"] in OPEN_STATES and kept["state"] not in OPEN_STATES):
            by_id[t["transactional_id"]] = t
    ordered = sorted(by_id.values(), key=lambda t: (t["state"] not in OPEN_STATES, t["transactional_id"]))
    return ordered[:limit]


def read_transactions(source: TransactionSource, deadline: float, limit: int = MAX_DESCRIBED) -> dict[str, Any]:
    """One round: {"transactions": [...], "listed": ids listed, "open": of them open,
    "undescribed_open": of those not described (past ``limit``, or their coordinator did not
    answer), "errors": the brokers that could not list theirs, "started_ms" and "ended_ms" (the
    wall clock's, to judge the brokers' lag samples by: model.transactions_view)}. Each
    transaction is {"transactional_id", "state", "coordinator", "producer_id",
    "producer_epoch", "timeout_ms", "start_time_ms" (None: none started), "partitions"
    [[topic, partition]], "error" (None, or why it was not described; the row keeps what
    ListTransactions said)}. ``deadline`` is time.monotonic()'s: no coordinator is asked after it."""
    started_ms = time.time() * 1000
    listed, errors = source.list_transactions()
    every = to_describe(listed, len(listed))
    chosen = every[:limit]
    rows: dict[str, dict[str, Any]] = {
        t["transactional_id"]: {"transactional_id": t["transactional_id"], "state": t["state"],
                                "coordinator": t["coordinator"], "producer_id": t["producer_id"],
                                "producer_epoch": None, "timeout_ms": None, "start_time_ms": None,
                                "partitions": [], "error": None} for t in chosen}
    by_coordinator: dict[int, list[str]] = {}
    for t in chosen:
        by_coordinator.setdefault(t["coordinator"], []).append(t["transactional_id"])
    addresses = source.addresses() if chosen else {}
    for coordinator, ids in sorted(by_coordinator.items()):
        address = addresses.get(coordinator)
        if time.monotonic() > deadline:
            why = "not described: this round ran out of time"
        elif address is None:
            why = f"not described: its coordinator, broker {coordinator}, is not live"
        else:
            try:
                described = source.describe(address, ids)
            except (OSError, ValueError) as exc:
                why = f"not described: cannot reach its coordinator, broker {coordinator} at {address}: " \
                      f"{connection_failure(exc)}"
            else:
                why = f"not described: broker {coordinator} did not answer for it"
                for d in described:
                    row = rows.get(d.transactional_id)
                    if row is not None:
                        _fill(row, d, coordinator)
        for transactional_id in ids:
            if rows[transactional_id]["producer_epoch"] is None and rows[transactional_id]["error"] is None:
                rows[transactional_id]["error"] = why
    listed_open = [t["transactional_id"] for t in every if t["state"] in OPEN_STATES]
    return {"transactions": list(rows.values()), "listed": len(every), "open": len(listed_open),
            "undescribed_open": sum(1 for i in listed_open if i not in rows or rows[i]["error"] is not None),
            "errors": errors, "started_ms": started_ms, "ended_ms": time.time() * 1000}


def _fill(row: dict[str, Any], d: DescribedTransaction, coordinator: int) -> None:
    if d.error_code:
        name = error_name(d.error_code)
        hint = _DESCRIBE_HINTS.get(d.error_code)
        row["error"] = f"not described: {name} from broker {coordinator}" + (f" ({hint})" if hint else "")
        return
    row.update(state=d.state, producer_id=d.producer_id, producer_epoch=d.producer_epoch, timeout_ms=d.timeout_ms,
               start_time_ms=d.start_ms if d.start_ms >= 0 else None,
               partitions=[[topic, partition] for topic, partition in sorted(d.partitions)])
