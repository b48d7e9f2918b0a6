"""pipelines/ end to end on small data: generator -> streaming sessionizer -> topic + Parquet -> report."""
from __future__ import annotations

import json
from collections import defaultdict
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from pipelines import events, report, sessionize
from spark_helpers import consume_all, create_topic, topic_name

pytestmark = pytest.mark.integration


def expected_sessions(evs: list[dict]) -> dict[tuple[str, str], int]:
    """(user, first view) -> views, computed in plain Python with the 30-minute gap rule."""
    by_user: dict[str, list[datetime]] = defaultdict(list)
    for e in evs:
        if e["user"] != events.TICK_USER:
            by_user[e["user"]].append(datetime.fromisoformat(e["ts"]))
    out = {}
    for user, times in by_user.items():
        times.sort()
        start, n, last = times[0], 0, times[0]
        for t in times:
            if t - last >= timedelta(minutes=30):
                out[(user, start)] = n
                start, n = t, 0
            n += 1
            last = t
        out[(user, start)] = n
    return {(u, s.replace(tzinfo=None).isoformat()): n for (u, s), n in out.items()}


def test_pipeline_end_to_end(spark, cluster, tmp_path: Path) -> None:
    bs = cluster.bootstrap_servers
    src = create_topic(bs, topic_name("page-views"), 3)
    dst = create_topic(bs, topic_name("sessions"), 3)
    evs = events.generate(users=6, sessions_per_user=3, seed=11)
    events.produce(bs, src, evs)
    sessionize.run(spark, bs, src, dst, tmp_path)

    want = expected_sessions(evs)
    rows = spark.read.parquet(str(tmp_path / "sessions")).collect()
    got = {(r.user, r.first_view.isoformat()): r.views for r in rows}
    assert got == want

    from_topic = [json.loads(v) for _, _, _, v, _ in consume_all(bs, dst)]
    assert sorted((s["user"], s["views"]) for s in from_topic) == sorted((u, n) for (u, _), n in want.items())

    table = report.landing_pages(spark, tmp_path).collect()
    assert sum(r.sessions for r in table) == len(want)
    assert {r.landing_page for r in table} <= set(events.LANDINGS)
