"""Kafka's Sanitizer (common/sanitizer.py): the znode names Kafka's tools give user names, byte
for byte, and back."""
from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from odradek.common.sanitizer import desanitize, sanitize


@pytest.mark.parametrize("name, znode", [
    ("alice", "alice"),
    ("first.last-1_x", "first.last-1_x"),  # URLEncoder keeps . - _ and letters and digits
    ("*", "%2A"),  # Sanitizer's own: * is a JMX pattern
    ("a b", "a%20b"),  # URLEncoder's + becomes %20
    ("a+b", "a%2Bb"),
    ("CN=alice,O=x", "CN%3Dalice%2CO%3Dx"),
    ("a/b", "a%2Fb"),  # never a path of its own
    ("~", "%7E"),  # Java encodes ~ (Python's quote would not)
    ("é", "%C3%A9"),  # UTF-8 bytes, upper-case hex
    ("<default>", "%3Cdefault%3E"),  # a user so named is not the default entity
    (".", "%2E"), ("..", "%2E%2E"),  # ZooKeeper refuses them as path elements
    ("...", "..."),
])
def test_names_are_sanitized_as_kafka_does(name: str, znode: str) -> None:
    assert sanitize(name) == znode
    assert desanitize(znode) == name


def test_desanitize_reads_what_urlencoder_writes_and_refuses_bytes_that_are_not_utf8() -> None:
    assert desanitize("a+b") == "a b"  # URLDecoder: a name written by hand or an older Kafka
    assert desanitize("alice@EXAMPLE.COM") == "alice@EXAMPLE.COM"
    with pytest.raises(ValueError):
        desanitize("%FF")


@given(st.text(st.characters(exclude_categories=("Cs",))))
def test_sanitized_names_are_znode_names_and_read_back(name: str) -> None:
    znode = sanitize(name)
    assert "/" not in znode and znode not in (".", "..") and "*" not in znode and " " not in znode
    assert desanitize(znode) == name
