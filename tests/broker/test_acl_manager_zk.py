"""broker/acl_manager.py on a real ZooKeeper, two or three "brokers" (an AclManager each, with its
own session and AclAuthorizer) in one process: a write on one reaches the others through the
change notifications (how fast is printed), a broker starting later loads every ACL in one
round, ACLs and notifications written as a Kafka broker writes them are read, and old
notifications are purged."""
from __future__ import annotations

import asyncio
import json
import statistics
import time
from collections.abc import Callable

import pytest

from odradek.broker.acl_manager import AclManager
from odradek.security.acl import (
    ANY_FILTER,
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from odradek.security.acl_authorizer import AclAuthorizer
from odradek.zk.client import KafkaZkClient

pytestmark = pytest.mark.integration

ALICE_READ = AccessControlEntry("User:alice", "*", AclOperation.READ, AclPermissionType.ALLOW)
BOB_WRITE = AccessControlEntry("User:bob", "*", AclOperation.WRITE, AclPermissionType.DENY)


def topic(name: str, pattern: PatternType = PatternType.LITERAL) -> ResourcePattern:
    return ResourcePattern(ResourceType.TOPIC, name, pattern)


class Broker:
    def __init__(self, connect: str) -> None:
        self.zk = KafkaZkClient(connect, 6.0)
        self.authorizer = AclAuthorizer()
        self.manager = AclManager(self.zk, self.authorizer)

    async def start(self) -> Broker:
        await asyncio.to_thread(self.zk.start)
        await self.manager.startup()
        return self

    async def stop(self) -> None:
        self.manager.shutdown()
        await asyncio.to_thread(self.zk.close)


async def until(check: Callable[[], bool], timeout_s: float = 10.0) -> float:
    """Seconds until ``check()`` holds, polled every millisecond."""
    started = time.monotonic()
    while not check():
        assert time.monotonic() - started < timeout_s, "not applied in time"
        await asyncio.sleep(0.001)
    return time.monotonic() - started


def test_a_change_on_one_broker_reaches_the_others(zk_connect: str) -> None:
    async def run() -> list[float]:
        a, b = [await Broker(zk_connect).start() for _ in range(2)]
        try:
            delays = []
            for i in range(10):
                pattern = topic(f"t{i}", PatternType.PREFIXED if i % 2 else PatternType.LITERAL)
                assert await a.manager.create_acls([AclBinding(pattern, ALICE_READ)]) == [None]
                assert a.authorizer.acls(pattern) == {ALICE_READ}  # the writer at once
                delays.append(await until(lambda p=pattern: b.authorizer.acls(p) == {ALICE_READ}))
            removed = await b.manager.delete_acls([AclBindingFilter(topic("t0").to_filter(),
                                                                    ALICE_READ.to_filter())])
            assert removed == [(None, [AclBinding(topic("t0"), ALICE_READ)])]
            delays.append(await until(lambda: not a.authorizer.acls(topic("t0"))))
            return delays
        finally:
            await a.stop()
            await b.stop()

    delays = asyncio.run(run())
    print(f"\nACL change propagation between brokers: median {statistics.median(delays) * 1000:.1f} ms, "
          f"max {max(delays) * 1000:.1f} ms over {len(delays)} changes")
    assert max(delays) < 1.0


def test_a_broker_starting_later_loads_every_acl(zk_connect: str) -> None:
    async def run() -> None:
        a = await Broker(zk_connect).start()
        bindings = [AclBinding(topic(f"load-{i}"), ALICE_READ) for i in range(30)]
        bindings += [AclBinding(topic("fin-", PatternType.PREFIXED), BOB_WRITE),
                     AclBinding(ResourcePattern(ResourceType.GROUP, "*", PatternType.LITERAL), ALICE_READ),
                     AclBinding(ResourcePattern(ResourceType.CLUSTER, "kafka-cluster", PatternType.LITERAL),
                                AccessControlEntry("User:ops", "*", AclOperation.ALTER, AclPermissionType.ALLOW))]
        assert await a.manager.create_acls(bindings) == [None] * len(bindings)
        c = await Broker(zk_connect).start()
        try:
            assert set(c.authorizer.describe(ANY_FILTER)) == set(bindings)
            # the notifications already there were read by the load, not processed again
            listed = await asyncio.to_thread(c.zk.kazoo.get_children, "/kafka-acl-changes")
            assert c.manager._last["/kafka-acl-changes"] == max(int(n.rpartition("_")[2]) for n in listed)
            assert not c.authorizer.authorize("User:bob", "1.2.3.4", AclOperation.WRITE, ResourceType.TOPIC, "fin-x")
        finally:
            await a.stop()
            await c.stop()

    asyncio.run(run())


def test_what_a_kafka_broker_writes_is_read(zk_connect: str) -> None:
    """Kafka writes the ACL znode, then the notification (two requests); a LITERAL notification
    is "TOPIC:name", a PREFIXED one JSON."""
    async def run() -> None:
        b = await Broker(zk_connect).start()
        kz = b.zk.kazoo
        try:
            acls = {"version": 1, "acls": [{"principal": "User:carol", "permissionType": "Allow",
                                            "operation": "Describe", "host": "10.1.1.1"}]}
            await asyncio.to_thread(kz.create, "/kafka-acl/Topic/from-kafka", json.dumps(acls).encode())
            await asyncio.to_thread(kz.create, "/kafka-acl-changes/acl_changes_", b"TOPIC:from-kafka", sequence=True)
            entry = AccessControlEntry("User:carol", "10.1.1.1", AclOperation.DESCRIBE, AclPermissionType.ALLOW)
            await until(lambda: b.authorizer.acls(topic("from-kafka")) == {entry})
            await asyncio.to_thread(kz.create, "/kafka-acl-extended/prefixed/Group/team-", json.dumps(acls).encode())
            await asyncio.to_thread(kz.create, "/kafka-acl-extended-changes/acl_changes_", json.dumps(
                {"version": 1, "resourceType": "GROUP", "name": "team-", "patternType": "PREFIXED"}).encode(),
                sequence=True)
            group = ResourcePattern(ResourceType.GROUP, "team-", PatternType.PREFIXED)
            await until(lambda: b.authorizer.acls(group) == {entry})
            # a malformed notification is skipped, the next one still applied
            await asyncio.to_thread(kz.create, "/kafka-acl-changes/acl_changes_", b"garbage", sequence=True)
            await asyncio.to_thread(kz.delete, "/kafka-acl/Topic/from-kafka")
            await asyncio.to_thread(kz.create, "/kafka-acl-changes/acl_changes_", b"TOPIC:from-kafka", sequence=True)
            await until(lambda: not b.authorizer.acls(topic("from-kafka")))
        finally:
            await b.stop()

    asyncio.run(run())


def test_old_notifications_are_purged(zk_connect: str) -> None:
    async def run() -> None:
        b = await Broker(zk_connect).start()
        try:
            for i in range(3):
                await b.manager.create_acls([AclBinding(topic(f"p{i}"), ALICE_READ)])
            kz = b.zk.kazoo
            assert len(await asyncio.to_thread(kz.get_children, "/kafka-acl-changes")) == 3
            await until(lambda: len(b.manager._ctimes["/kafka-acl-changes"]) == 3)
            b.manager.change_expiration_ms = 0  # every notification is old now
            await b.manager.create_acls([AclBinding(topic("p3"), ALICE_READ)])
            deadline = time.monotonic() + 10
            while await asyncio.to_thread(kz.get_children, "/kafka-acl-changes"):
                assert time.monotonic() < deadline, "not purged"
                await asyncio.sleep(0.05)
            assert len(b.authorizer.describe(ANY_FILTER)) == 4
        finally:
            await b.stop()

    asyncio.run(run())
