"""Which partition of a coordinator's internal topic a key lives in, and so which broker is its
coordinator (the partition's leader): Kafka's GroupMetadataManager.partitionFor for group ids on
`__consumer_offsets` and TransactionStateManager.partitionFor for transactional ids on
`__transaction_state`, the same function, Utils.abs(key.hashCode) % partitions, over Java's
String.hashCode, so the mapping and FindCoordinator's answers are Apache Kafka's.
"""
from __future__ import annotations

import functools


def java_string_hash(s: str) -> int:
    """Java's String.hashCode: s[0]*31^(n-1) + ... over UTF-16 code units, as a signed int32."""
    h = 0
    data = s.encode("utf-16-be", "surrogatepass")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


@functools.lru_cache(maxsize=65536)
def partition_for(key: str, partitions: int) -> int:
    """Utils.abs(key.hashCode) % partitions: the partition of a group id or transactional id."""
    h = java_string_hash(key)
    return (0 if h == -(1 << 31) else abs(h)) % partitions
