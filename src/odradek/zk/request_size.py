"""ZooKeeper's request size limit (jute.maxbuffer) and keeping our requests under it.

A ZooKeeper server reads each request's 4-byte length first and, when it is larger than its
``jute.maxbuffer`` system property, logs "Len error ... greater than jute.maxbuffer" and closes
the client's connection (ZooKeeper 3.8, NIOServerCnxn.readLength). The default is 1,048,575
bytes (0xfffff, org.apache.jute.BinaryInputArchive). kazoo sets no limit of its own (it sends a
2 MB create and gets ConnectionLoss back), so the server's value is the one that binds, and a
Kafka broker's ZooKeeper client is configured with the same system property. Our brokers take
it as ``zookeeper.jute.maxbuffer`` (default the server's default): raising it is only safe
after every ZooKeeper server (and any other client that reads those znodes, such as Kafka's
tools) runs with at least that ``-Djute.maxbuffer``.

What does not fit is refused or split before it is sent: a topic whose replica assignment is
too large for one znode (broker/topic_admin.py), multi transactions (batched by bytes as well as
by op count, zk/client.py) and ISR change notifications (split until each fits).
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

#: ZooKeeper's default jute.maxbuffer (bytes), the largest request a server accepts.
JUTE_MAXBUFFER = 0xFFFFF

#: Bytes kept free in every request for what is not our payload. A topic's creation multi also
#: carries two paths (a topic name of up to 249 characters each, plus the chroot), the ACL and
#: the op headers (about 100 bytes); the server logs it as a transaction about 100 bytes larger
#: (TxnHeader, CreateTxn's extra fields), which followers and a restarted server read back under
#: jute.maxbuffer + zookeeper.jute.maxbuffer.extrasize (at least 1,024); a Java client (Kafka's
#: tools) reading the znode back needs its data plus an 88-byte reply header and Stat under its
#: own jute.maxbuffer. 16 KiB covers all of these with room for a long chroot, and costs about
#: 1,000 partitions of the ~64,000 that fit in one topic at replication factor 3.
REQUEST_MARGIN = 16 * 1024

#: Wire bytes of one op inside a multi besides its path and data, for the largest kind (a
#: create: MultiHeader 9, path length 4, data length 4, one world:anyone ACL 27, flags 4).
MULTI_OP_OVERHEAD = 48

T = TypeVar("T")


def payload_budget(jute_maxbuffer: int = JUTE_MAXBUFFER) -> int:
    """Bytes of paths and data one request may carry: jute.maxbuffer less REQUEST_MARGIN."""
    return jute_maxbuffer - REQUEST_MARGIN


def ops_per_multi(max_ops: int, largest_op_bytes: int, jute_maxbuffer: int = JUTE_MAXBUFFER) -> int:
    """How many ops of at most ``largest_op_bytes`` (path + data) one multi may hold: at most
    ``max_ops``, and no more than fit under jute.maxbuffer. 999 state writes of a 249-character
    topic are about 400 KB, so the count binds in practice; the bytes bind for long chroots,
    long topic names with many replicas, or a lowered jute.maxbuffer."""
    per_op = MULTI_OP_OVERHEAD + largest_op_bytes
    return max(1, min(max_ops, payload_budget(jute_maxbuffer) // per_op))


def split_to_fit(items: Sequence[T], encode: Callable[[Sequence[T]], bytes],
                 limit: int) -> list[bytes]:
    """``encode`` of consecutive slices of ``items``, each at most ``limit`` bytes: the whole
    list if it fits, else halves, recursively. Exact whatever the encoding (no estimate per
    item); a single item that does not fit raises ValueError."""
    data = encode(items)
    if len(data) <= limit:
        return [data]
    if len(items) <= 1:
        raise ValueError(f"one item encodes to {len(data):,} bytes, over the {limit:,}-byte limit")
    half = len(items) // 2
    return split_to_fit(items[:half], encode, limit) + split_to_fit(items[half:], encode, limit)
