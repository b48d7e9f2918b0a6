"""odradek's murmur2 against a real client's: librdkafka's `murmur2` partitioner (the Java
client's default placement) must put every key where common/linear_hashing.py's
default_partition says, since an ordered topic maps keys exactly so until its first expansion."""
from __future__ import annotations

import pytest
from clients import consume_all, create_topic

from client_helpers import produce
from odradek.cluster.local_cluster import LocalCluster
from odradek.common.linear_hashing import default_partition, partition_for_key

pytestmark = pytest.mark.integration
#: `cluster` is the shared one (conftest.py): this module's topics, groups and transactional
#: ids are its own, and it neither kills nor reconfigures that cluster's brokers
SHARE_CLUSTER = True

KEYS = ([f"key-{i}".encode() for i in range(150)]
        + [f"ключ-{i}".encode() for i in range(20)]  # non-ASCII UTF-8
        + [f"キー🔑{i}".encode() for i in range(20)]
        + [b"", b"21", b"foobar", b"naive-caf\xc3\xa9", bytes([0xFF, 0xFE, 0x80, 0x00, 0x01, 0x7F, 0x81]),
           bytes(range(256)), b"k" * 1001, b"abc", b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8",
           b"a-little-bit-longer-string"])


@pytest.mark.parametrize("partitions", [5, 8])
def test_librdkafka_murmur2_partitioner_places_keys_where_default_partition_says(
        cluster: LocalCluster, partitions: int) -> None:
    topic = f"murmur2-{partitions}"
    bootstrap = cluster.bootstrap_servers
    create_topic(bootstrap, topic, partitions, 3)
    expected = {key: default_partition(key, partitions) for key in KEYS}
    assert set(expected.values()) == set(range(partitions))  # the keys reach every partition
    assert all(partition_for_key(key, partitions, partitions) == p for key, p in expected.items())

    acked = produce(bootstrap, topic, [(key, b"v", None) for key in KEYS], partitioner="murmur2")
    assert {key: partition for partition, _, key, _ in acked} == expected
    stored = consume_all(bootstrap, topic, partitions, len(KEYS))  # where the brokers hold each one
    assert sorted(stored_key for _, _, stored_key, _ in stored) == sorted(KEYS)
    assert {key: partition for partition, _, key, _ in stored} == expected
