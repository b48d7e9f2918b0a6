"""Every garbage collection's pause, timed through gc.callbacks and exported as a Prometheus
histogram (common/gc_policy.GcPauseWatch, broker/metrics.GcCollector)."""
from __future__ import annotations

import gc

from prometheus_client import CollectorRegistry, generate_latest

from odradek.broker.metrics import GcCollector
from odradek.common.gc_policy import PAUSE_BUCKETS_S, GcPauseWatch


def test_every_collection_is_timed_by_generation_and_exported() -> None:
    watch = GcPauseWatch()
    watch.install()
    try:
        garbage = [[] for _ in range(200_000)]
        for item in garbage:
            item.append(item)  # cycles: only the collector frees them
        del garbage
        gc.collect(0)
        gc.collect(2)
    finally:
        watch.uninstall()
    assert sum(watch.buckets[0]) >= 1 and sum(watch.buckets[2]) >= 1
    assert watch.longest_s[2] > 0 and watch.total_s[2] >= watch.longest_s[2]
    assert 0 < watch.longest_cpu_s[2] <= watch.longest_s[2] * 1.1  # CPU time of the collecting thread
    counted = sum(watch.buckets[2])
    gc.collect(2)  # uninstalled: no longer counted
    assert sum(watch.buckets[2]) == counted
    buckets, total = watch.histogram(2)
    assert [le for le, _ in buckets] == [repr(b) for b in PAUSE_BUCKETS_S] + ["+Inf"]
    assert buckets[-1][1] == counted and all(a[1] <= b[1] for a, b in zip(buckets, buckets[1:]))
    registry = CollectorRegistry(auto_describe=False)
    registry.register(GcCollector(watch))
    text = generate_latest(registry).decode()
    assert f'odradek_gc_pause_seconds_count{{generation="2"}} {float(counted)}' in text
    assert 'odradek_gc_pause_seconds_bucket{generation="0",le="+Inf"}' in text
    assert 'odradek_gc_longest_pause_seconds{generation="2"}' in text
    assert 'odradek_gc_longest_pause_cpu_seconds{generation="2"}' in text
    assert "odradek_python_allocated_blocks " in text
