"""GcPolicy: long-lived objects frozen between rare full collections."""
from __future__ import annotations

import gc

from odradek.common.gc_policy import OLD_GENERATION_THRESHOLD, GcPolicy, collection_paused


class Cycle:
    def __init__(self) -> None:
        self.me = self


def test_ticks_freeze_and_the_periodic_full_collection_frees_frozen_cycles() -> None:
    now = [0.0]
    policy = GcPolicy(full_every_s=600.0, clock=lambda: now[0])
    try:
        garbage = Cycle()
        policy.tick()
        assert gc.get_freeze_count() > 0
        del garbage  # an unreachable cycle, now in the permanent generation
        gc.collect()
        assert _cycles() == 1  # a frozen cycle outlives collections of the other generations
        now[0] = 601.0
        policy.tick()  # thaws, collects everything, freezes the survivors again
        assert _cycles() == 0
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()


def _cycles() -> int:
    """How many Cycle objects exist, frozen or not (thawed to be listed, nothing collected
    in between, then frozen again)."""
    gc.disable()
    try:
        gc.unfreeze()
        count = sum(isinstance(o, Cycle) for o in gc.get_objects())
        gc.freeze()
        return count
    finally:
        gc.enable()


def test_install_makes_automatic_full_collections_rare() -> None:
    before = gc.get_threshold()
    try:
        GcPolicy().install()
        assert gc.get_threshold() == (before[0], before[1], OLD_GENERATION_THRESHOLD)
    finally:
        gc.set_threshold(*before)


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
