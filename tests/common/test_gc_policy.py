"""GcPolicy: each tick collects what was allocated since the last freeze and freezes the rest;
the permanent generation is never thawed; bursts pause collection and, in a broker, are frozen
at their end."""
from __future__ import annotations

import gc
import time
import weakref
from collections.abc import Iterator

import pytest

from odradek.common.gc_policy import FREEZE_AFTER_BURST_S, OLD_GENERATION_THRESHOLD, GcPolicy, collection_paused


class Cycle:
    def __init__(self) -> None:
        self.me = self


@pytest.fixture
def thawed_afterwards() -> Iterator[None]:
    """Whatever a test freezes goes back to the collector's generations (this is pytest's
    process, not a broker's)."""
    thresholds = gc.get_threshold()
    try:
        yield
    finally:
        gc.unfreeze()
        gc.set_threshold(*thresholds)


def _frozen(obj: object) -> bool:
    """Whether obj is in the permanent generation: tracked, yet in none of the three others."""
    return gc.is_tracked(obj) and not any(o is obj for g in range(3) for o in gc.get_objects(g))


def test_a_tick_collects_cycles_made_since_the_last_freeze_and_freezes_the_survivors(thawed_afterwards: None) -> None:
    garbage, kept = Cycle(), Cycle()
    dead = weakref.ref(garbage)
    del garbage
    GcPolicy().tick()
    assert dead() is None
    assert _frozen(kept)


def test_the_permanent_generation_is_never_thawed(thawed_afterwards: None) -> None:
    """The price of never scanning it: a cycle dropped after its freeze is never freed, which
    is why the broker's structures must not make cycles (tests/integration/test_gc_cycles.py)."""
    policy = GcPolicy()
    frozen = Cycle()
    policy.tick()
    alive = weakref.ref(frozen)
    del frozen
    for _ in range(3):
        policy.tick()
    gc.collect()
    assert alive() is not None
    gc.unfreeze()
    gc.collect()
    assert alive() is None


def test_a_tick_waits_while_a_burst_is_under_way(thawed_afterwards: None) -> None:
    garbage = Cycle()
    dead = weakref.ref(garbage)
    del garbage
    with collection_paused():
        GcPolicy().tick()
        assert dead() is not None  # neither collected nor frozen mid-burst
    gc.collect()
    assert dead() is None


def test_an_installed_policy_freezes_what_a_burst_leaves_and_uninstall_thaws(thawed_afterwards: None) -> None:
    before = gc.get_threshold()
    policy = GcPolicy()
    policy.install()
    try:
        assert gc.get_threshold() == (before[0], before[1], OLD_GENERATION_THRESHOLD)
        with collection_paused():
            made = Cycle()
            assert not _frozen(made)
            time.sleep(FREEZE_AFTER_BURST_S)
        assert _frozen(made)  # unscanned: the first young collection would visit all of a burst's objects
        assert gc.isenabled()
        with collection_paused():
            short = Cycle()
        assert not _frozen(short)  # a short burst's few objects are left to the young collections
    finally:
        policy.uninstall()
    assert gc.get_threshold() == before
    assert not _frozen(made)


def test_without_the_policy_a_burst_freezes_nothing() -> None:
    with collection_paused():
        made = Cycle()
    assert not _frozen(made)


def test_collection_stays_paused_until_every_overlapping_burst_has_ended() -> None:
    assert gc.isenabled()
    first, second = collection_paused(), collection_paused()
    first.__enter__()
    assert not gc.isenabled()
    second.__enter__()  # e.g. a LeaderAndIsr applied while a controller event runs
    first.__exit__(None, None, None)
    assert not gc.isenabled()  # the other burst is still under way
    second.__exit__(None, None, None)
    assert gc.isenabled()


def test_a_pause_leaves_collection_off_if_it_was_off_before() -> None:
    gc.disable()
    try:
        with collection_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_collection_resumes_when_the_block_raises() -> None:
    try:
        with collection_paused():
            raise ValueError("boom")
    except ValueError:
        pass
    assert gc.isenabled()
