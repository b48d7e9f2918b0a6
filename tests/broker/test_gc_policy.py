"""GcPolicy: long-lived objects frozen between rare full collections."""
from __future__ import annotations

import gc

from odradek.broker.gc_policy import OLD_GENERATION_THRESHOLD, GcPolicy


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
