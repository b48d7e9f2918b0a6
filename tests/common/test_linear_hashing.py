"""Linear hashing for KIP-253 ordered delivery: Kafka's murmur2 bit for bit, and the properties
the consumer's barriers rely on (a new partition takes keys from exactly one partition, no key
moves between partitions that both existed, a deletion blocks few partitions)."""
from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.partitioner.default import murmur2 as kafka_python_murmur2

from odradek.common.linear_hashing import (
    ancestors_of,
    blocked_by_deleted,
    children_of,
    creation_blocker,
    default_partition,
    deletions_blocking,
    key_hash,
    level_and_split,
    murmur2,
    owner_at,
    parent_of,
    partition_for,
    partition_for_key,
    partition_for_unkeyed,
    to_positive,
)

# murmur2 as Kafka computes it: the first six are UtilsTest.testMurmur2's vectors; the rest were
# printed by Kafka's Utils.murmur2 (Java 17, String.getBytes(UTF_8)), with toPositive and
# toPositive % 3, 5, 8 (Kafka's default partitioner).
KAFKA_MURMUR2 = [
    # key, murmur2, toPositive, (% 3, % 5, % 8)
    ("21", -973932308, 1173551340, (0, 0, 4)),
    ("foobar", -790332482, 1357151166, (0, 1, 6)),
    ("a-little-bit-long-string", -985981536, 1161502112, (2, 2, 0)),
    ("a-little-bit-longer-string", -1486304829, 661178819, (2, 4, 3)),
    ("lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971, 2088585677, (2, 2, 5)),
    ("abc", 479470107, 479470107, (0, 2, 3)),
    ("", 275646681, 275646681, (0, 1, 1)),
    ("é", 186971271, 186971271, (0, 1, 7)),
    ("ключ", 2122343024, 2122343024, (2, 4, 0)),
    ("キー", -443984012, 1703499636, (0, 1, 4)),
    ("日本語のキー", -734675706, 1412807942, (2, 2, 6)),
    ("naïve-café", -1120496400, 1026987248, (2, 3, 0)),
    ("🔑", 2080712807, 2080712807, (2, 2, 7)),
    ("emoji 🔑 key", -1061412303, 1086071345, (2, 0, 1)),
    ("Zürich-42", 928274125, 928274125, (1, 0, 5)),
    ("straße", -1032057574, 1115426074, (1, 4, 2)),
    ("user-2", -324981792, 1822501856, (2, 1, 0)),
    ("order-100", -955961047, 1191522601, (1, 1, 1)),
    ("k", -1567496736, 579986912, (2, 2, 0)),
    ("kafka", -798503068, 1348980580, (1, 0, 4)),
]

# partition_for_key(key, N, count) for count = N .. 4N, printed by a separate Java implementation
# of Wikipedia's linear hashing address (h mod N*2^L, h mod N*2^(L+1) below the split pointer)
# over Kafka's toPositive(murmur2(key)).
LINEAR_HASHING_GOLDEN = {
    ("", 3): [0, 3, 3, 3, 3, 3, 3, 9, 9, 9],
    ("", 5): [1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1],
    ("", 8): [1, 1, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 25, 25, 25, 25, 25, 25, 25],
    ("21", 3): [0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
    ("21", 5): [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
    ("21", 8): [4, 4, 4, 4, 4, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12],
    ("foobar", 3): [0, 0, 0, 0, 6, 6, 6, 6, 6, 6],
    ("foobar", 5): [1, 1, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6],
    ("foobar", 8): [6, 6, 6, 6, 6, 6, 6, 14, 14, 14, 14, 14, 14, 14, 14, 14, 14, 14, 14, 14, 14, 14, 14, 30, 30],
    ("キー", 3): [0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
    ("キー", 5): [1, 1, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 16, 16, 16, 16],
    ("キー", 8): [4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 20, 20, 20, 20, 20, 20, 20, 20, 20, 20, 20, 20],
    ("naïve-café", 3): [2, 2, 2, 2, 2, 2, 8, 8, 8, 8],
    ("naïve-café", 5): [3, 3, 3, 3, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8],
    ("naïve-café", 8): [0, 0, 0, 0, 0, 0, 0, 0, 0, 16, 16, 16, 16, 16, 16, 16, 16, 16, 16, 16, 16, 16, 16, 16, 16],
    ("emoji 🔑 key", 3): [2, 2, 2, 5, 5, 5, 5, 5, 5, 5],
    ("emoji 🔑 key", 5): [0, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5],
    ("emoji 🔑 key", 8): [1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 17, 17, 17, 17, 17, 17, 17, 17, 17, 17, 17, 17, 17, 17, 17],
}

initials = st.integers(min_value=1, max_value=12)


@st.composite
def initial_and_count(draw: st.DrawFn, max_factor: int = 8) -> tuple[int, int]:
    n = draw(initials)
    return n, draw(st.integers(min_value=n, max_value=max_factor * n))


def every_bucket(initial: int, count: int, extra: int = 64) -> list[int]:
    """Hashes that hit every residue linear hashing can look at up to a count of 2 * count (so
    every partition holds some), plus large ones whose high bits must not matter."""
    rng = random.Random(initial * 1_000_003 + count)
    span = initial
    while span <= 2 * count:
        span <<= 1
    return list(range(span)) + [rng.randrange(0x80000000) for _ in range(extra)]


# ---- murmur2: Kafka's bits ----

@pytest.mark.parametrize(("key", "hashed", "positive", "partitions"), KAFKA_MURMUR2)
def test_murmur2_matches_kafka_utils_murmur2(key: str, hashed: int, positive: int,
                                             partitions: tuple[int, int, int]) -> None:
    data = key.encode()
    assert murmur2(data) == hashed
    assert to_positive(hashed) == key_hash(data) == positive
    assert tuple(default_partition(data, n) for n in (3, 5, 8)) == partitions
    assert murmur2(bytearray(data)) == murmur2(memoryview(data)) == hashed


def test_murmur2_of_raw_bytes_with_the_sign_bit_set() -> None:
    """Java's bytes are signed; a byte >= 0x80 must be read as unsigned (Kafka's & 0xff)."""
    assert murmur2(bytes([12, 42, 56, 24, 109, 111])) == 274204207  # UtilsTest's byte-array vector
    assert murmur2(bytes([0xFF, 0xFE, 0x80, 0x00, 0x01, 0x7F, 0x81])) == -299763423


def test_to_positive_masks_the_sign_bit_rather_than_taking_abs() -> None:
    assert to_positive(-1) == 0x7FFFFFFF != abs(-1)
    assert to_positive(-(2**31)) == 0
    negative = [(key, h, pos) for key, h, pos, _ in KAFKA_MURMUR2 if h < 0]
    assert negative  # the golden vectors include keys whose hash is negative
    for key, h, pos in negative:
        assert key_hash(key.encode()) == pos != abs(h)


@settings(max_examples=300)
@given(st.binary(max_size=64))
def test_murmur2_agrees_with_kafka_pythons_port_on_any_bytes(data: bytes) -> None:
    """kafka-python's DefaultPartitioner carries its own port of Utils.murmur2 (unsigned)."""
    assert murmur2(data) & 0xFFFFFFFF == kafka_python_murmur2(data)
    assert -(2**31) <= murmur2(data) < 2**31


# ---- linear hashing: the mapping ----

@pytest.mark.parametrize(("key", "initial"), sorted(LINEAR_HASHING_GOLDEN))
def test_partition_for_golden_vectors(key: str, initial: int) -> None:
    got = [partition_for_key(key.encode(), initial, count) for count in range(initial, 4 * initial + 1)]
    assert got == LINEAR_HASHING_GOLDEN[(key, initial)]


def test_level_and_split() -> None:
    assert [level_and_split(4, c) for c in (4, 5, 7, 8, 9, 15, 16)] == [
        (0, 0), (0, 1), (0, 3), (1, 0), (1, 1), (1, 7), (2, 0)]
    assert level_and_split(3, 12) == (2, 0)
    assert level_and_split(3, 11) == (1, 5)


@given(initial_and_count(), st.integers(min_value=0, max_value=0x7FFFFFFF))
def test_mapping_is_kafkas_default_partitioner_at_every_doubling(nc: tuple[int, int], h: int) -> None:
    initial, count = nc
    got = partition_for(h, initial, count)
    assert 0 <= got < count
    level, split = level_and_split(initial, count)
    assert initial << level <= count < initial << (level + 1) and split == count - (initial << level)
    if split == 0:  # count == N * 2**L, N itself included: plain h % count
        assert got == h % count
    assert partition_for(h, initial, initial) == h % initial


@settings(max_examples=60)
@given(initials, st.integers(min_value=0, max_value=40))
def test_mapping_equals_splitting_buckets_one_at_a_time(initial: int, expansions: int) -> None:
    """A reference built the way linear hashing is described: N buckets, then each expansion
    splits the bucket under the split pointer by one more bit of the hash and moves the pointer
    on (back to 0, one level up, after the last bucket of a round). Only the split bucket's
    hashes are ever touched, yet the closed form must agree with it at every count."""
    hashes = every_bucket(initial, initial + expansions)
    where = {h: h % initial for h in hashes}
    level, pointer = 0, 0
    for count in range(initial, initial + expansions + 1):
        assert all(partition_for(h, initial, count) == p for h, p in where.items())
        modulus = initial << (level + 1)
        for h, p in where.items():
            if p == pointer:
                where[h] = h % modulus
        pointer += 1
        if pointer == initial << level:
            level, pointer = level + 1, 0


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(ValueError):
        partition_for(5, 4, 3)  # fewer undeleted partitions than initial ones
    with pytest.raises(ValueError):
        partition_for(5, 0, 3)
    with pytest.raises(ValueError):
        partition_for(-1, 4, 4)  # a raw murmur2, not to_positive'd
    with pytest.raises(ValueError):
        blocked_by_deleted(2, 4, 6)  # partition 2 is not marked
    with pytest.raises(ValueError):
        deletions_blocking(7, 4, 6, [7])  # partition 7 is not undeleted
    with pytest.raises(ValueError):
        creation_blocker(9, 4, {5, 6})  # 9 descends from 1, which is not listed


# ---- the family tree ----

@given(initial_and_count())
def test_parents_and_children_form_a_forest_rooted_at_the_initial_partitions(nc: tuple[int, int]) -> None:
    initial, count = nc
    seen: list[int] = []
    for p in range(count):
        kids = children_of(p, initial, count)
        assert all(parent_of(c, initial) == p for c in kids) and kids == sorted(kids)
        assert len(kids) <= (count // initial).bit_length()  # <= log2(count / N) + 1
        seen += kids
        chain = ancestors_of(p, initial)
        assert (p < initial) == (parent_of(p, initial) is None) == (chain == [])
        assert all(a < b for a, b in zip(chain[1:], chain, strict=False)) and all(a < p for a in chain)
        assert (chain[-1] if chain else p) == p % initial
    assert sorted(seen) == list(range(initial, count))  # every non-initial partition has one parent


# ---- expansion ----

@given(initial_and_count())
def test_a_new_partition_takes_keys_from_exactly_one_existing_partition(nc: tuple[int, int]) -> None:
    initial, count = nc
    sources = set()
    for h in every_bucket(initial, count):
        before, after = partition_for(h, initial, count), partition_for(h, initial, count + 1)
        if before != after:
            assert after == count  # a key moves only to the new partition
            sources.add(before)
    assert sources == {parent_of(count, initial)}  # it does move, and from the parent alone
    assert creation_blocker(count, initial, set(range(count))) == parent_of(count, initial)


@given(initial_and_count(), st.integers(min_value=1, max_value=40))
def test_no_key_moves_between_two_partitions_that_both_existed(nc: tuple[int, int], grow: int) -> None:
    """Any expansion, several partitions at once included: a key that moves goes to a new
    partition, from the one partition creation_blocker names for it."""
    initial, before = nc
    after = before + grow
    existing = set(range(before))
    sources: dict[int, set[int]] = {}
    for h in every_bucket(initial, after):
        old, new = partition_for(h, initial, before), partition_for(h, initial, after)
        if old != new:
            assert new >= before
            sources.setdefault(new, set()).add(old)
        else:
            assert new < before
    assert set(sources) == set(range(before, after))  # every new partition gets keys
    for new, olds in sources.items():
        assert olds == {creation_blocker(new, initial, existing)} == {owner_at(new, initial, before)}
        if after <= 2 * before:
            assert olds == {parent_of(new, initial)}


# ---- deletion ----

def _deletion(initial: int, before: int, after: int) -> dict[int, set[int]]:
    """For a shrink from ``before`` to ``after`` undeleted partitions: removed partition -> the
    partitions its keys now map to, checking on the way that no other key moves."""
    gains: dict[int, set[int]] = {}
    for h in every_bucket(initial, before):
        old, new = partition_for(h, initial, before), partition_for(h, initial, after)
        if old < after:
            assert new == old  # a key of an undeleted partition stays
        else:
            gains.setdefault(old, set()).add(new)
    assert set(gains) == set(range(after, before))
    return gains


@given(initial_and_count(), st.data())
def test_a_deleted_partition_blocks_exactly_one_undeleted_partition(nc: tuple[int, int], data: st.DataObject) -> None:
    initial, before = nc
    after = data.draw(st.integers(min_value=initial, max_value=before))
    for removed, receivers in _deletion(initial, before, after).items():
        assert receivers == set(blocked_by_deleted(removed, initial, after))
        assert len(receivers) == 1
        if before == after + 1:
            assert receivers == {parent_of(removed, initial)}  # one at a time: back to the parent


@given(initial_and_count(max_factor=16), st.data())
def test_an_undeleted_partition_waits_for_at_most_two_when_a_deletion_at_most_halves(
        nc: tuple[int, int], data: st.DataObject) -> None:
    """The exact bounds: with before <= 2**k * after, an undeleted partition waits for at most
    2**(k+1) - 2 marked partitions: 2 when the deletion at most halves the count (k = 1)."""
    initial, before = nc
    after = data.draw(st.integers(min_value=initial, max_value=before))
    gains = _deletion(initial, before, after)
    marked = list(range(after, before))
    k = 0
    while (after << k) < before:
        k += 1
    for p in range(after):
        waits = deletions_blocking(p, initial, after, marked)
        assert set(waits) == {q for q, receivers in gains.items() if p in receivers}
        assert len(waits) <= max(0, 2 ** (k + 1) - 2)
        if before <= 2 * after:
            assert len(waits) <= 2


def test_the_deletion_bounds_are_reached() -> None:
    """So the bounds above are tight, not merely true: 2 when halving, 2**k - 1 when shrinking
    from 2**k * N to N, and a partition already removed is not waited for."""
    assert deletions_blocking(1, 1, 5, range(5, 10)) == (5, 9)  # 10 -> 5 with N = 1
    assert deletions_blocking(0, 4, 4, range(4, 16)) == (4, 8, 12)  # 16 -> 4 with N = 4
    assert deletions_blocking(1, 1, 5, [9]) == (9,)  # 5 drained and removed already
    assert blocked_by_deleted(7, 4, 6) == (3,) and blocked_by_deleted(6, 4, 6) == (2,)  # 8 -> 6, N = 4
    assert blocked_by_deleted(12, 4, 4) == (0,)  # 16 -> 4: 12's parent 4 is gone too, so its grandparent


# ---- records without a key ----

@given(initial_and_count(), st.integers(min_value=0, max_value=2**40))
def test_unkeyed_records_follow_the_same_placement(nc: tuple[int, int], start: int) -> None:
    initial, count = nc
    level, _ = level_and_split(initial, count)
    cycle = initial << (level + 1)
    hits = {partition_for_unkeyed(start + i, initial, count) for i in range(cycle)}
    assert hits == set(range(count))  # a counter's cycle reaches every undeleted partition, only those
    assert partition_for_unkeyed(start, initial, count) == partition_for(start & 0x7FFFFFFF, initial, count)
