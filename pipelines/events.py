"""Page-view event generator: deterministic sessions of users browsing pages, produced to a topic.

Each event is JSON {"user", "page", "ts"} keyed by user (so a user's events stay in order in one
partition). Users browse in sessions of a few page views a minute or two apart; sessions are
separated by gaps of more than an hour of event time. A final "tick" event far in the future
moves the event-time watermark past every session, so a streaming job can close them all.

    python -m pipelines.events --bootstrap-server 127.0.0.1:9092 --topic page-views --users 20
"""
from __future__ import annotations

import argparse
import json
import random
from datetime import datetime, timedelta, timezone

from confluent_kafka import Producer

PAGES = ["/home", "/search", "/product/1", "/product/2", "/product/3", "/cart", "/checkout", "/help"]
LANDINGS = ["/home", "/search", "/product/1", "/help"]
TICK_USER = "__tick__"
START = datetime(2026, 11, 1, 8, 0, tzinfo=timezone.utc)


def generate(users: int, sessions_per_user: int, seed: int = 7) -> list[dict]:
    """Events in event-time order per user; returns them plus a trailing watermark tick."""
    rnd = random.Random(seed)
    events = []
    for u in range(users):
        user = f"user-{u:03d}"
        t = START + timedelta(minutes=rnd.randint(0, 60))
        for _ in range(sessions_per_user):
            page = rnd.choice(LANDINGS)
            for _ in range(rnd.randint(1, 8)):
                events.append({"user": user, "page": page, "ts": t.isoformat()})
                t += timedelta(seconds=rnd.randint(10, 240))
                page = rnd.choice(PAGES)
            t += timedelta(hours=rnd.randint(2, 5))  # session gap (> the 30-minute gap of the job)
    events.sort(key=lambda e: e["ts"])
    last = max(datetime.fromisoformat(e["ts"]) for e in events)
    events.append({"user": TICK_USER, "page": "", "ts": (last + timedelta(days=1)).isoformat()})
    return events


def produce(bootstrap: str, topic: str, events: list[dict]) -> int:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                         "linger.ms": 5})
    errors: list[object] = []
    for e in events:
        producer.produce(topic, key=e["user"].encode(), value=json.dumps(e).encode(),
                         on_delivery=lambda err, _msg: errors.append(err) if err else None)
        producer.poll(0)
    if producer.flush(60) or errors:
        raise RuntimeError(f"not all events were delivered: {errors[:3]}")
    return len(events)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bootstrap-server", default="127.0.0.1:9092")
    ap.add_argument("--topic", default="page-views")
    ap.add_argument("--users", type=int, default=20)
    ap.add_argument("--sessions-per-user", type=int, default=5)
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args(argv)
    n = produce(args.bootstrap_server, args.topic, generate(args.users, args.sessions_per_user, args.seed))
    print(f"produced {n} page-view events to {args.topic}")


if __name__ == "__main__":
    main()
