"""KIP-253's count in a produce request: the undeleted_partition_count a producer routed its
records with, carried as a suffix of the request header's client id.

KIP-253 adds the producer's count to ProduceRequest so that a partition leader can refuse
records routed with a count that is no longer the topic's. odradek's OrderedProducer sends its
records through librdkafka, whose requests cannot carry a field it does not know (not even a
tagged one); the one free-form string it sends in every request is the client id. So the count
travels there, after the user's client id:

    <client.id>|odradek.counts=<topic>:<count>[,<topic>:<count>...]

Topic names are made of ``[a-zA-Z0-9._-]`` only (Kafka's rule, which odradek enforces), so
``|``, ``=``, ``:`` and ``,`` cannot occur inside one and the suffix parses unambiguously. A
client id without the suffix (every stock client) declares nothing, and a malformed suffix is
treated the same way: the leader then checks every record's key itself. A declared count equal
to the topic's is trusted without looking at the keys; that is the promise the OrderedProducer
makes (it partitions with exactly that count), and it keeps the key check off its hot path.
"""
from __future__ import annotations

from functools import lru_cache
from typing import Mapping

MARK = "|odradek.counts="


def with_declared_counts(client_id: str, counts: Mapping[str, int]) -> str:
    """``client_id`` with the counts of ``counts`` declared (sorted by topic, so one set of
    counts always gives one string)."""
    if not counts:
        return client_id
    return client_id + MARK + ",".join(f"{topic}:{count}" for topic, count in sorted(counts.items()))


@lru_cache(maxsize=1024)
def declared_counts(client_id: str | None) -> Mapping[str, int]:
    """The counts a request's client id declares, by topic; empty when it declares none or the
    suffix does not parse. Cached: a producer sends the same client id with every request."""
    if not client_id:
        return {}
    at = client_id.rfind(MARK)
    if at < 0:
        return {}
    counts: dict[str, int] = {}
    for entry in client_id[at + len(MARK):].split(","):
        topic, sep, count = entry.rpartition(":")
        if not sep or not topic or not (count.isascii() and count.isdigit()):
            return {}
        counts[topic] = int(count)
    return counts


def base_client_id(client_id: str | None) -> str | None:
    """The client id the user configured, without a declaration (what metrics and logs show)."""
    if client_id is None:
        return None
    at = client_id.rfind(MARK)
    return client_id if at < 0 else client_id[:at]
