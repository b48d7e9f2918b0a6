"""The choices `odradek topics` makes without a cluster: which topics a describe names (names,
regular expressions, kafka-topics.sh's comma lists, --exclude-internal), and the names errors
carry (Kafka's, from odradek.protocol.errors, not librdkafka's abbreviations)."""
from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException

from odradek.admin.admin_client import kafka_error_text
from odradek.admin.errors import AdminError
from odradek.admin.topic_command import select_topics
from odradek.common.internal_topics import is_internal

LISTING = [{"name": n, "internal": is_internal(n)}
           for n in ("__consumer_offsets", "a.b", "aXb", "events", "events-eu", "events-us", "orders")]


@pytest.mark.parametrize("requested, exclude_internal, selected, unmatched", [
    (None, False, [t["name"] for t in LISTING], []),
    (None, True, ["a.b", "aXb", "events", "events-eu", "events-us", "orders"], []),
    (["events"], False, ["events"], []),  # a name, not the prefix of others
    (["a.b"], False, ["a.b"], []),  # a name: its '.' is no wildcard (kafka-topics.sh's would be)
    (["events-.*"], False, ["events-eu", "events-us"], []),
    (["ev.*ts"], False, ["events"], []),  # a regex matches whole names only
    (["orders,events-eu"], False, ["events-eu", "orders"], []),
    (["orders", "nosuch", "zz.*"], False, ["orders"], ["nosuch", "zz.*"]),
    (["__consumer_offsets"], True, [], []),  # left out, as kafka-topics.sh --exclude-internal does
    ([".*"], True, ["a.b", "aXb", "events", "events-eu", "events-us", "orders"], []),
])
def test_select_topics(requested: list[str] | None, exclude_internal: bool, selected: list[str],
                       unmatched: list[str]) -> None:
    assert select_topics(LISTING, requested, exclude_internal) == (selected, unmatched)


def test_a_broken_pattern_is_an_operator_error() -> None:
    with pytest.raises(AdminError, match="neither a topic name nor a regular expression"):
        select_topics(LISTING, ["events-("])


@pytest.mark.parametrize("code, name", [
    (3, "UNKNOWN_TOPIC_OR_PARTITION"), (10, "MESSAGE_TOO_LARGE"), (17, "INVALID_TOPIC_EXCEPTION"),
    (6, "NOT_LEADER_OR_FOLLOWER"), (-1, "UNKNOWN_SERVER_ERROR"), (36, "TOPIC_ALREADY_EXISTS"),
    (KafkaError._TIMED_OUT, "_TIMED_OUT"),  # librdkafka's own error keeps librdkafka's name
])
def test_error_names_are_kafkas(code: int, name: str) -> None:
    assert kafka_error_text(KafkaException(KafkaError(code, "why"))) == f"{name}: why"
