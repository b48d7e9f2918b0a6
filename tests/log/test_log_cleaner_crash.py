"""A cleaner process killed at every step of a segment swap, and by SIGKILL at random moments:
the log reopens readable, with every key's latest value and nothing but legitimate removals."""
import multiprocessing
import os
import random
import shutil
import signal
import time

from cleaner_helpers import TP, Setup, compact_config, latest_per_key, put, records
from log_helpers import read_all

from odradek.log import log as log_module
from odradek.log.log import Log
from odradek.log.log_cleaner import LogCleaner
from odradek.log.log_manager import LogManager

CRASHED = 17
_fork = multiprocessing.get_context("fork")


def _write(log, rounds: int, keys: int = 6) -> None:
    for r in range(rounds):
        for i in range(keys):
            put(log, f"k{i}", None if (r + i) % 7 == 0 else f"{r}-{i}")
        put(log, "p", f"idempotent-{r}", producer_id=3, producer_epoch=0, base_sequence=r)


def _template(tmp_path, clock):
    """A log with a clean section of small cleaned segments (which the next clean groups) and
    a dirty tail; returns its records."""
    s = Setup(tmp_path / "template", clock, compact_config())
    _write(s.log, rounds=6)
    assert s.cleaner.clean_once()
    _write(s.log, rounds=6)
    before = records(s.log)
    s.manager.close()
    return tmp_path / "template" / "data", before


def _clean(data_dir, crash_at: int) -> None:
    """In the child: clean once, exiting at the crash_at-th swap step (0: after the `.cleaned`
    segment is fsynced, then its rename to `.swap`, each old segment's deletion, the rename)."""
    steps = iter(range(10**6))

    def hook(step: str) -> None:
        if next(steps) == crash_at:
            os._exit(CRASHED)

    log_module.swap_step_hook = hook
    manager = LogManager(data_dir, compact_config())
    log = manager.get_or_create(TP, compact_config())
    LogCleaner(manager, lambda tp: log.log_end_offset).clean_once()
    os._exit(0)


def _check(data_dir, before) -> list:
    """The reopened log keeps every key's latest record and drops only superseded ones."""
    log = Log.open(data_dir / f"{TP.topic}-{TP.partition}", compact_config())
    assert not [n for n in os.listdir(log.dir) if n.endswith((".cleaned", ".swap"))]
    after = records(log)
    assert latest_per_key(after) == latest_per_key(before)
    assert set(after) <= set(before)
    last = {key: offset for offset, key, _ in after}
    for offset, key, _ in set(before) - set(after):
        assert last[key] > offset, f"offset {offset} of {key} removed without a later value"
    assert read_all(log) == [offset for offset, _, _ in after]
    assert log.log_end_offset == before[-1][0] + 1
    log._fds.close_all()
    return after


def test_a_crash_at_each_swap_step_loses_nothing(tmp_path, clock):
    template, before = _template(tmp_path, clock)
    outcomes = []
    for crash_at in range(200):
        run = tmp_path / f"run{crash_at}"
        shutil.copytree(template, run)
        child = _fork.Process(target=_clean, args=(run, crash_at))
        child.start()
        child.join(30)
        outcomes.append(child.exitcode)
        after = _check(run, before)
        if child.exitcode == 0:
            break
        assert child.exitcode == CRASHED
    assert outcomes[-1] == 0 and outcomes.count(CRASHED) >= 8, outcomes
    assert len(after) < len(before)  # the completed clean did clean
    # a log reopened after a crash cleans normally
    s = Setup(tmp_path / "again", clock, compact_config())
    s.manager.close()
    shutil.rmtree(tmp_path / "again" / "data")
    shutil.copytree(tmp_path / "run3", tmp_path / "again" / "data")
    s = Setup(tmp_path / "again", clock, compact_config())
    s.cleaner.clean_once()
    s.manager.close()
    _check(tmp_path / "again" / "data", before)


def _clean_forever(data_dir) -> None:
    manager = LogManager(data_dir, compact_config())
    log = manager.get_or_create(TP, compact_config(min_cleanable_dirty_ratio=0.0))
    cleaner = LogCleaner(manager, lambda tp: log.log_end_offset)
    while True:
        if not cleaner.clean_once():  # everything clean: start over from the log start
            cleaner._checkpoints.clear()


def test_sigkill_at_random_moments_loses_nothing(tmp_path, clock):
    template, before = _template(tmp_path, clock)
    rng = random.Random(7)
    interrupted = 0
    for attempt in range(12):
        run = tmp_path / f"kill{attempt}"
        shutil.copytree(template, run)
        child = _fork.Process(target=_clean_forever, args=(run,))
        child.start()
        time.sleep(rng.uniform(0.05, 0.15))
        os.kill(child.pid, signal.SIGKILL)
        child.join()
        assert child.exitcode == -signal.SIGKILL
        left = os.listdir(run / f"{TP.topic}-{TP.partition}")
        interrupted += any(n.endswith((".cleaned", ".swap")) for n in left)
        _check(run, before)
    assert interrupted, "no kill landed inside a clean's file operations"
