"""The data dir's `.lock`: one holder at a time, named to the one refused, freed on release."""
from __future__ import annotations

import os

import pytest

from odradek.log.log_dir_lock import LogDirInUseError, LogDirLock


def test_a_second_lock_is_refused_naming_the_holder_and_free_after_release(tmp_path) -> None:
    first = LogDirLock(tmp_path)
    first.acquire()
    with pytest.raises(LogDirInUseError) as refused:
        LogDirLock(tmp_path).acquire()
    assert refused.value.holder_pid == os.getpid()
    assert f"in use by process {os.getpid()}" in str(refused.value)
    first.release()
    second = LogDirLock(tmp_path)
    second.acquire()  # free again
    second.release()
