"""The count a produce request declares in its client id (KIP-253's count in ProduceRequest)."""
from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from odradek.protocol.declared_partition_counts import base_client_id, declared_counts, with_declared_counts

topic_names = st.text(alphabet="abcXYZ019._-", min_size=1, max_size=20)


@given(client_id=st.text(max_size=30), counts=st.dictionaries(topic_names, st.integers(0, 2**31 - 1), max_size=4))
def test_declared_counts_round_trip_and_the_users_client_id_survives(client_id: str, counts: dict[str, int]) -> None:
    declared = with_declared_counts(client_id, counts)
    assert declared_counts(declared) == counts
    assert base_client_id(declared) == client_id if counts else declared == client_id


def test_stock_and_malformed_client_ids_declare_nothing() -> None:
    for client_id in (None, "", "rdkafka", "x|odradek.counts=", "x|odradek.counts=t", "x|odradek.counts=t:five",
                      "x|odradek.counts=t:1,:2", "x|odradek.counts=t:-1", "x|odradek.counts=t:\u00b2"):
        assert declared_counts(client_id) == {}, client_id
