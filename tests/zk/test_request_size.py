"""Sizing ZooKeeper requests under jute.maxbuffer (zk/request_size.py)."""
from __future__ import annotations

import json

import pytest

from odradek.zk.request_size import JUTE_MAXBUFFER, ops_per_multi, payload_budget, split_to_fit


def _encode(items: list[int]) -> bytes:
    return json.dumps(items).encode()


def test_split_to_fit_keeps_order_and_every_part_under_the_limit() -> None:
    items = list(range(50_000))
    parts = split_to_fit(items, _encode, 20_000)
    assert len(parts) > 1 and all(len(p) <= 20_000 for p in parts)
    assert [i for p in parts for i in json.loads(p)] == items
    assert split_to_fit(items[:10], _encode, 20_000) == [_encode(items[:10])]


def test_split_to_fit_refuses_an_item_that_cannot_fit() -> None:
    with pytest.raises(ValueError):
        split_to_fit(["x" * 100], lambda items: json.dumps(items).encode(), 50)


def test_ops_per_multi_is_the_op_count_until_the_bytes_bind() -> None:
    assert ops_per_multi(999, 300) == 999  # state writes of a 249-character topic
    big = ops_per_multi(999, 2_000)
    assert big < 999 and big * (2_000 + 48) <= payload_budget(JUTE_MAXBUFFER)
    assert ops_per_multi(999, 10 * JUTE_MAXBUFFER) == 1
