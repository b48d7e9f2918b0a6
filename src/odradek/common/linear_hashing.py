"""Where a record goes in a topic with ordered delivery (KIP-253): Kafka's murmur2 and linear hashing.

The one mapping the producer (which partition to send to), the broker (whether a produce carries
the topic's current count), the consumer (which partition waits for which) and the controller
(what a deletion blocks) all compute. It sits in the lowest layer so every one of them computes
the same thing.

The hash
--------
``murmur2`` is Kafka's ``org.apache.kafka.common.utils.Utils.murmur2`` bit for bit (seed
0x9747b28c, a signed 32-bit result), the hash of the Java client's default partitioner, of
librdkafka's ``murmur2`` partitioner and of kafka-python. A key's partition starts from
``to_positive(murmur2(key))``, Kafka's ``Utils.toPositive``: ``h & 0x7fffffff``, the hash with its
sign bit cleared. It is *not* ``abs(h)``: for a negative hash the two differ (``abs(-1) == 1`` but
``-1 & 0x7fffffff == 2147483647``), so abs would send most keys with a negative hash (about half
of all keys) somewhere else than every Kafka client does, and in Java ``Math.abs(Integer.MIN_VALUE)`` is still negative.
``default_partition(key, n)`` is Kafka's default partitioner for a keyed record:
``to_positive(murmur2(key)) % n``.

Linear hashing
--------------
(https://en.wikipedia.org/wiki/Linear_hashing; KIP-253 part 5.) A topic created with
``N = initial_partition_count`` partitions that now has ``count = undeleted_partition_count``
partitions taking new records (``count >= N``) maps a positive hash ``h`` as follows:

- ``L``, the level: the largest integer with ``N * 2**L <= count``; the topic has doubled L times;
- ``S``, the split pointer: ``count - N * 2**L`` (``0 <= S < N * 2**L``), how many partitions of
  the current round have been split so far;
- ``bucket = h % (N * 2**L)``; if ``bucket < S`` (that partition is already split this round),
  ``bucket = h % (N * 2**(L + 1))``, which is either the same partition or its new half
  ``bucket + N * 2**L``.

With ``count == N`` (L = 0, S = 0) this is ``h % N``: before any expansion an ordered topic maps
every key exactly as Kafka's default partitioner does, and whenever ``count == N * 2**L`` it is
``h % count`` again. For N = 4:

======  ===  ===  ==========================================================
count    L    S   the partition ``h`` maps to
======  ===  ===  ==========================================================
4        0    0   h % 4
5        0    1   h % 4, but h % 8 when h % 4 == 0 (partition 0 split into 0 and 4)
6        0    2   h % 4, but h % 8 when h % 4 in (0, 1)
8        1    0   h % 8
9        1    1   h % 8, but h % 16 when h % 8 == 0 (partition 0 split into 0 and 8)
======  ===  ===  ==========================================================

Why keys never move between two existing partitions: growing ``count`` to ``count + 1`` moves S
by one, and only the keys whose bucket was the old S are recomputed, with one more bit of the
hash: those with that bit clear stay in partition S, those with it set go to the new partition
``count = S + N * 2**L``. Every other key computes the same bucket as before. When ``count + 1``
reaches ``N * 2**(L + 1)`` the level rolls over (L + 1, S = 0) and ``h % (N * 2**(L + 1))`` is
what every bucket already computed. So an expansion by one partition takes keys from exactly one
existing partition, the new partition's **parent** ``p - N * 2**L(p)`` (``parent_of``), and
leaves every other key where it was; an expansion by several is that, one partition at a time.

The partitions form a forest: the N initial partitions are roots, and partition ``p >= N`` is a
child of ``parent_of(p)``. A key's records only ever move down the tree (expansion) or back up
it (deletion), so what a partition can receive from another is always along one path.

Expansion: which partition a new one waits for
----------------------------------------------
A partition ``p`` created by the expansion from ``c`` to ``c' > c`` undeleted partitions took all
its keys from one partition, ``owner_at(p, N, c)``: its nearest ancestor below ``c``, its parent
whenever the expansion at most doubles the count (``parent_of(p) < p / 2 < c' / 2 <= c``). That
is the one partition whose consumer must pass the leaderEpochAfterCreation barrier before ``p``
may be read (KIP-253 part 8 step 4.2): ``creation_blocker``.

Deletion: which partitions wait for a marked one
------------------------------------------------
Linear hashing shrinks by undoing splits: from ``c`` to ``c - 1`` undeleted partitions, the last
partition ``c - 1`` stops taking records and its keys go back to its parent; every other key stays.
From ``c`` to ``c' < c`` in one step (``c' >= N``), every partition ``q`` in ``[c', c)`` is marked
for deletion and its keys go to ``owner_at(q, N, c')``, its nearest ancestor below ``c'``.
Derived from the mapping itself (``partition_for(h, N, c')`` of every ``h`` that ``q`` held), so:

- a marked partition blocks **exactly one** undeleted partition (``blocked_by_deleted``): only that
  partition gets the keys whose earlier records are still in the marked one;
- an undeleted partition waits for the marked partitions whose keys it gets
  (``deletions_blocking``): at most **2** when one step at most halves the count (``c <= 2 * c'``),
  at most ``2**(k + 1) - 2`` when ``c <= 2**k * c'`` (shrinking from ``2**k * N`` to ``N`` at
  once gives each initial partition ``2**k - 1`` marked descendants to wait for).

That is tighter than KIP-253's "at most O(log n)" wherever a deletion at most halves the topic,
and a deletion one partition at a time makes both numbers 1. tests/common/test_linear_hashing.py
checks these bounds against the mapping.

The functions here map counts only. A marked partition still holds records until it is removed;
an expansion back over its index before then would make it undeleted again with those records in
front of the ones its keys get next, so whether an expansion waits for (or is refused during) a
drain is the controller's rule, not this module's.

Records without a key
---------------------
KIP-253 part 5 places unkeyed records by linear hashing too. ``partition_for_unkeyed`` does so
with the producer's counter as the hash: a round-robin counter (one step per record) or a sticky
one (one step per batch, as Kafka's sticky partitioner of KIP-480 changes partition once per
batch). Such records carry no key whose order a consumer keeps, so what matters is only that
they land on undeleted partitions, which any hash does; using the key rule keeps one placement
for the whole topic, so an unkeyed record's partition follows the same split shape as keyed
traffic (a split partition's two halves each take half the share of an unsplit one) instead of
a second distribution an operator would have to tell apart.
"""
from __future__ import annotations

import struct
from collections.abc import Collection, Iterable

#: Kafka's murmur2 seed and mixing constants (Utils.murmur2)
SEED = 0x9747B28C
_M = 0x5BD1E995
_R = 24
_MASK32 = 0xFFFFFFFF
#: Kafka's Utils.toPositive mask: the hash without its sign bit
POSITIVE_MASK = 0x7FFFFFFF

Bytes = bytes | bytearray | memoryview


def murmur2(data: Bytes) -> int:
    """Kafka's ``Utils.murmur2`` of ``data``: a signed 32-bit int, as Java returns it (the value
    golden vectors and other Kafka clients print). Words are read little-endian four bytes at a
    time and the 1-3 trailing bytes fall through, as in Java's switch."""
    length = len(data)
    h = (SEED ^ length) & _MASK32
    words = length >> 2
    if words:
        for k in struct.unpack_from(f"<{words}I", data):
            k = (k * _M) & _MASK32
            k ^= k >> _R
            k = (k * _M) & _MASK32
            h = ((h * _M) & _MASK32) ^ k
    tail = length & 3
    if tail:
        i = length & ~3
        if tail == 3:
            h ^= data[i + 2] << 16
        if tail >= 2:
            h ^= data[i + 1] << 8
        h ^= data[i]
        h = (h * _M) & _MASK32
    h ^= h >> 13
    h = (h * _M) & _MASK32
    h ^= h >> 15
    return h - 0x100000000 if h & 0x80000000 else h


def to_positive(h: int) -> int:
    """Kafka's ``Utils.toPositive``: ``h & 0x7fffffff``, never ``abs(h)`` (see the module's text)."""
    return h & POSITIVE_MASK


def key_hash(key: Bytes) -> int:
    """The positive hash a key is placed by: ``to_positive(murmur2(key))``."""
    return murmur2(key) & POSITIVE_MASK


def default_partition(key: Bytes, num_partitions: int) -> int:
    """Kafka's default partitioner for a keyed record (the Java client's BuiltInPartitioner,
    librdkafka's ``murmur2`` partitioner): what a plain client picks for ``key``."""
    return (murmur2(key) & POSITIVE_MASK) % num_partitions


def level_and_split(initial: int, count: int) -> tuple[int, int]:
    """``(L, S)`` for ``initial = N`` and ``count`` undeleted partitions: L the largest integer
    with ``N * 2**L <= count``, S = ``count - N * 2**L``."""
    if initial < 1 or count < initial:
        raise ValueError(f"need 1 <= initial_partition_count <= undeleted_partition_count, "
                         f"got {initial} and {count}")
    level = (count // initial).bit_length() - 1
    return level, count - (initial << level)


def partition_for(h: int, initial: int, count: int) -> int:
    """The partition a positive hash ``h`` maps to by linear hashing over ``initial = N`` and
    ``count`` undeleted partitions (always below ``count``; ``h % N`` when ``count == N``)."""
    if h < 0:
        raise ValueError(f"hash must be positive (to_positive), got {h}")
    level, split = level_and_split(initial, count)
    bucket = h % (initial << level)
    if bucket < split:
        bucket = h % (initial << (level + 1))
    return bucket


def partition_for_key(key: Bytes, initial: int, count: int) -> int:
    """Where an ordered topic's record with ``key`` goes: linear hashing of Kafka's hash of the key."""
    return partition_for(murmur2(key) & POSITIVE_MASK, initial, count)


def partition_for_unkeyed(counter: int, initial: int, count: int) -> int:
    """Where an ordered topic's record without a key goes: linear hashing of the producer's
    round-robin or sticky counter (the module's text says why)."""
    return partition_for(counter & POSITIVE_MASK, initial, count)


def parent_of(partition: int, initial: int) -> int | None:
    """The partition whose keys ``partition`` took when it was created, ``p - N * 2**L`` for the
    largest L with ``N * 2**L <= p``; None for an initial partition (``p < N``)."""
    if partition < 0:
        raise ValueError(f"partition must not be negative, got {partition}")
    if partition < initial:
        return None
    level = (partition // initial).bit_length() - 1
    return partition - (initial << level)


def ancestors_of(partition: int, initial: int) -> list[int]:
    """Parent, grandparent, ... up to the initial partition ``partition % N`` (empty for an
    initial partition): every partition this one's keys were in before it existed."""
    out = []
    parent = parent_of(partition, initial)
    while parent is not None:
        out.append(parent)
        parent = parent_of(parent, initial)
    return out


def children_of(partition: int, initial: int, count: int) -> list[int]:
    """The partitions below ``count`` created by splitting ``partition``: ``p + N * 2**j`` for
    every j with ``N * 2**j > p`` (a split happens only in a round after p itself exists),
    ascending. At most ``log2(count / N) + 1`` of them."""
    out = []
    step = initial
    while step <= partition:
        step <<= 1
    while partition + step < count:
        out.append(partition + step)
        step <<= 1
    return out


def owner_at(partition: int, initial: int, count: int) -> int:
    """The partition that holds ``partition``'s keys when the topic has ``count`` undeleted
    partitions: ``partition`` itself if it is below ``count``, else its nearest ancestor below
    ``count``. Equal to ``partition_for(h, N, count)`` for every hash ``h`` ``partition`` holds at
    any count above it, which is why a partition's keys never scatter."""
    level_and_split(initial, count)  # validates
    while partition >= count:
        parent = parent_of(partition, initial)
        assert parent is not None  # partition >= count >= N
        partition = parent
    return partition


def creation_blocker(partition: int, initial: int, existing: Collection[int]) -> int:
    """The one partition a partition created by an expansion waits for (KIP-253 part 8 step
    4.2): its nearest ancestor among ``existing``, the partitions that existed before the
    expansion (the keys of its leader_epoch_after_creation map). With the undeleted count
    ``c`` before the expansion that is ``owner_at(partition, N, c)``."""
    for ancestor in ancestors_of(partition, initial):
        if ancestor in existing:
            return ancestor
    raise ValueError(f"partition {partition} has no ancestor among {sorted(existing)} "
                     f"(initial_partition_count {initial})")


def blocked_by_deleted(partition: int, initial: int, undeleted_count: int) -> tuple[int, ...]:
    """The undeleted partitions that must wait for ``partition``, marked for deletion
    (``partition >= undeleted_count``), to be consumed to its end before delivering past their
    leader_epoch_before_deletion barrier: those that now receive keys it held. Always exactly
    one, its nearest ancestor below ``undeleted_count`` (a tuple so callers need not know)."""
    if partition < undeleted_count:
        raise ValueError(f"partition {partition} is not marked for deletion "
                         f"(undeleted_partition_count {undeleted_count})")
    return (owner_at(partition, initial, undeleted_count),)


def deletions_blocking(partition: int, initial: int, undeleted_count: int, marked: Iterable[int]) -> tuple[int, ...]:
    """The partitions of ``marked`` (marked for deletion, not yet removed) whose keys undeleted
    ``partition`` now receives, ascending: what it waits for (KIP-253 part 8 step 5.1). At most 2
    when the deletion at most halved the count; see the module's text for the general bound."""
    if partition >= undeleted_count:
        raise ValueError(f"partition {partition} is marked for deletion "
                         f"(undeleted_partition_count {undeleted_count})")
    return tuple(sorted(q for q in set(marked)
                        if q >= undeleted_count and owner_at(q, initial, undeleted_count) == partition))
