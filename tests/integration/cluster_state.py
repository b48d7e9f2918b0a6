"""What a real cluster says about itself, for tests that kill, freeze and restart brokers:
partition leaders and ISRs from the brokers' Metadata, and the controller from ZooKeeper."""
from __future__ import annotations

import json

from confluent_kafka.admin import AdminClient
from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from odradek.admin.admin_client import metadata_request
from odradek.admin.errors import AdminError
from odradek.cluster.local_cluster import LocalCluster


def metadata(bootstrap: str, topic: str) -> dict[int, tuple[int, list[int]]]:
    """partition -> (leader, ISR), from a Metadata request."""
    md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=10)
    return {p.id: (p.leader, list(p.isrs)) for p in md.topics[topic].partitions.values()}


def leaders(c: LocalCluster, topic: str) -> dict[int, tuple[int, int]]:
    """partition -> (leader, preferred replica)."""
    md = AdminClient({"bootstrap.servers": c.bootstrap_servers}).list_topics(topic, timeout=10)
    return {p.id: (p.leader, p.replicas[0]) for p in md.topics[topic].partitions.values()}


def live_leaders(c: LocalCluster, topic: str, dead: set[int]) -> bool:
    """Every partition has a leader, none of them in ``dead`` (False while Metadata fails)."""
    try:
        return all(leader >= 0 and leader not in dead for leader, _ in metadata(c.bootstrap_servers, topic).values())
    except Exception:
        return False


def full_isr(c: LocalCluster, topic: str, rf: int) -> bool:
    """Every partition's ISR has `rf` replicas in the Metadata of every reachable broker.

    Each broker learns of leaders and ISRs from its own UpdateMetadata, so a moment after one
    broker reports a full ISR another may still answer UNKNOWN_TOPIC_OR_PARTITION; a test that
    goes on to ask any broker must wait for all of them."""
    seen = False
    for server in c.bootstrap_servers.split(","):
        try:
            response = metadata_request(server, [topic], 5.0)
        except AdminError:  # unreachable: a stopped broker
            continue
        seen = True
        for t in response.topics:
            if t.error_code != 0 or not t.partitions:
                return False
            if any(p.error_code != 0 or len(p.isr_nodes) != rf for p in t.partitions):
                return False
    return seen


def known_everywhere(c: LocalCluster, topic: str) -> bool:
    """Every reachable broker's Metadata has ``topic`` with a leader for each partition."""
    for server in c.bootstrap_servers.split(","):
        try:
            response = metadata_request(server, [topic], 5.0)
        except AdminError:  # a stopped broker
            continue
        if any(t.error_code != 0 or any(p.error_code != 0 or p.leader_id < 0 for p in t.partitions)
               for t in response.topics):
            return False
    return True


def zk(c: LocalCluster) -> KazooClient:
    """A started ZooKeeper client on the cluster's chroot; the caller stops it."""
    client = KazooClient(hosts=c.zookeeper_connect)
    client.start(10)
    return client


def controller_of(client: KazooClient) -> tuple[int, int]:
    """(controller broker id, controller epoch) as ZooKeeper holds them; id -1 while none is."""
    try:
        controller = json.loads(client.get("/controller")[0])["brokerid"]
    except NoNodeError:
        controller = -1
    return controller, int(client.get("/controller_epoch")[0])


def controller_id(c: LocalCluster) -> int:
    """The active controller's broker id (-1 while none is), read from ZooKeeper."""
    client = zk(c)
    try:
        return controller_of(client)[0]
    finally:
        client.stop()
