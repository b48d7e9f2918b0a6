"""The metrics operators alert on, scraped from a real 3-broker cluster under Kafka's names:
each replica's log size and offsets, request errors by API and Kafka error name, process
figures, a deleted topic's series gone from every broker, and, around a broker that stops and
comes back, the controller's ActiveBrokerCount and PreferredReplicaImbalanceCount and the
returning follower's fetcher lag (kept visible by a leader replication throttle)."""
from __future__ import annotations

import signal
import time
import urllib.request
import uuid
from collections.abc import Iterator

import pytest
from clients import create_topic, produce_acks_all
from cluster_state import controller_id, full_isr, leaders
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic
from polling import wait_until
from prometheus_client.parser import text_string_to_metric_families
from wire import RawConnection

from odradek.admin.admin_client import elect_leaders
from odradek.broker import api_keys
from odradek.cluster.local_cluster import LocalCluster
from odradek.common.netutil import free_port_block
from odradek.zk.server import ZooKeeperServer

pytestmark = pytest.mark.integration

ACTIVE_BROKERS = "kafka_controller_kafkacontroller_activebrokercount"
IMBALANCE = "kafka_controller_kafkacontroller_preferredreplicaimbalancecount"
MAX_LAG = 'kafka_server_replicafetchermanager_maxlag{clientId="Replica"}'


@pytest.fixture(scope="module")
def cluster(zookeeper: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """Nothing moves leadership back to preferred replicas but the test (no auto rebalance),
    and followers fetch 64 KiB a partition at a time, so a throttled one catches up slowly."""
    c = LocalCluster(tmp_path_factory.mktemp("operator-metrics"), 3, base_port=free_port_block(3),
                     zookeeper=f"{zookeeper.connect_string}/odradek-opmetrics-{uuid.uuid4().hex[:8]}",
                     broker_args={"zookeeper_session_timeout_ms": 4000, "auto_leader_rebalance_enable": False,
                                  "replica_fetch_max_bytes": 65536},
                     metrics_base_port=free_port_block(3))
    try:
        c.up(timeout=60)
        yield c
    finally:
        c.down()


def scrape(c: LocalCluster, broker: int) -> dict[str, float]:
    """'name{k="v",...}' (labels sorted) -> value, for every sample of one broker's /metrics,
    read with prometheus_client's parser as Prometheus would; {} while the broker is down."""
    url = c.metrics_url(broker)
    assert url is not None
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            text = response.read().decode()
    except OSError:
        return {}
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(s.labels.items()))
            out[s.name + (f"{{{labels}}}" if labels else "")] = s.value
    return out


def total(c: LocalCluster, name: str) -> float:
    return sum(scrape(c, b).get(name, 0.0) for b in c.broker_ids)


def test_each_replica_reports_its_log_and_a_deleted_topic_leaves_no_series(cluster: LocalCluster) -> None:
    c, topic = cluster, "sized"
    create_topic(c.bootstrap_servers, topic, 2, 3)
    produced = produce_acks_all(c.bootstrap_servers, topic, 100)
    ends = {p: 1 + max(o for q, o, _, _ in produced if q == p) for p in (0, 1)}

    def replicated() -> bool:  # every broker holds a replica of both partitions, caught up
        return all(scrape(c, b).get(f'kafka_log_log_logendoffset{{partition="{p}",topic="{topic}"}}') == ends[p]
                   for b in c.broker_ids for p in (0, 1))
    wait_until(replicated, 30, "every replica's LogEndOffset at the produced end")
    for b in c.broker_ids:
        scraped = scrape(c, b)
        for p in (0, 1):
            labels = f'{{partition="{p}",topic="{topic}"}}'
            assert scraped[f"kafka_log_log_size{labels}"] > 0
            assert scraped[f"kafka_log_log_numlogsegments{labels}"] == 1
            assert scraped[f"kafka_log_log_logstartoffset{labels}"] == 0
        # the process of a broker that has done work, started a moment ago
        assert scraped["process_cpu_seconds_total"] > 0
        assert scraped["process_resident_memory_bytes"] > 10 * 1024 * 1024
        assert scraped["process_open_fds"] > 3
        assert time.time() - 3600 < scraped["process_start_time_seconds"] <= time.time()
    assert total(c, f'kafka_server_brokertopicmetrics_bytesin_total{{topic="{topic}"}}') > 0
    assert total(c, 'kafka_network_requestmetrics_errors_total{error="NONE",request="Produce"}') > 0

    admin = AdminClient({"bootstrap.servers": c.bootstrap_servers})
    admin.delete_topics([topic])[topic].result(30)
    wait_until(lambda: not any(f'topic="{topic}"' in name for b in c.broker_ids for name in scrape(c, b)), 30,
               f"every series of {topic} to leave every broker's metrics")


def test_request_errors_are_counted_by_api_and_kafka_error_name(cluster: LocalCluster) -> None:
    c, broker, missing = cluster, cluster.broker_ids[0], "no-such-topic"
    name = 'kafka_network_requestmetrics_errors_total{{error="UNKNOWN_TOPIC_OR_PARTITION",request="{}"}}'
    before = {api: scrape(c, broker).get(name.format(api), 0.0) for api in ("Metadata", "Produce", "Fetch")}
    port = int(c.bootstrap_servers.split(",")[0].rsplit(":", 1)[1])
    conn = RawConnection("127.0.0.1", port)
    try:
        metadata = conn.request(api_keys.METADATA, 4, {"topics": [{"name": missing}],
                                                       "allow_auto_topic_creation": False})
        produce = conn.request(api_keys.PRODUCE, 9, {
            "transactional_id": None, "acks": 1, "timeout": 1000,
            "topic_data": [{"name": missing, "partition_data": [{"index": 0, "records": b"never read"}]}]})
        fetch = conn.request(api_keys.FETCH, 12, {
            "replica_id": -1, "max_wait": 0, "min_bytes": 0, "max_bytes": 1024, "isolation_level": 0,
            "session_id": 0, "session_epoch": -1, "forgotten_topics_data": [], "rack_id": "",
            "topics": [{"topic": missing, "partitions": [{"partition": 0, "fetch_offset": 0,
                                                          "partition_max_bytes": 1024}]}]})
    finally:
        conn.close()
    assert metadata.topics[0].error_code == 3  # what the counters below must have seen
    assert produce.responses[0].partition_responses[0].error_code == 3
    assert fetch.responses[0].partitions[0].error_code == 3
    after = scrape(c, broker)
    for api in ("Metadata", "Produce", "Fetch"):
        assert after.get(name.format(api), 0.0) >= before[api] + 1, api


def test_a_stopped_broker_shows_in_the_controllers_counts_and_its_lag_once_back(cluster: LocalCluster) -> None:
    c = cluster
    controller = controller_id(c)
    victim = next(b for b in c.broker_ids if b != controller)
    create_topic(c.bootstrap_servers, "spread", 6, 3)  # preferred leaders on every broker
    admin = AdminClient({"bootstrap.servers": c.bootstrap_servers})
    others = [b for b in c.broker_ids if b not in (controller, victim)]
    admin.create_topics([NewTopic("lagging", num_partitions=1, replica_assignment=[[controller, victim, *others]])])[
        "lagging"].result(30)
    wait_until(lambda: full_isr(c, "spread", 3) and full_isr(c, "lagging", 3), 30, "full ISRs")
    wait_until(lambda: total(c, ACTIVE_BROKERS) == 3 and total(c, IMBALANCE) == 0, 30,
               "the controller to count 3 live brokers and no imbalance")
    assert scrape(c, controller)[ACTIVE_BROKERS] == 3  # said by the controller only
    assert scrape(c, victim)[ACTIVE_BROKERS] == 0

    c.kill_broker(victim, signal.SIGTERM)
    wait_until(lambda: total(c, ACTIVE_BROKERS) == 2 and total(c, IMBALANCE) > 0, 30,
               "the controller to count 2 live brokers and the victim's partitions led elsewhere")
    preferred_by_victim = sum(1 for _, preferred in leaders(c, "spread").values() if preferred == victim)
    assert total(c, IMBALANCE) == preferred_by_victim > 0

    # 1 MiB the stopped follower misses, sent back to it at 100 KB/s once it returns
    producer = Producer({"bootstrap.servers": c.bootstrap_servers, "acks": 1, "linger.ms": 5})
    for _ in range(1024):
        producer.produce("lagging", b"x" * 1024, partition=0)
    assert producer.flush(30) == 0
    _alter(c, ConfigResource.Type.BROKER, str(controller), {"leader.replication.throttled.rate": "100000"})
    _alter(c, ConfigResource.Type.TOPIC, "lagging", {"leader.replication.throttled.replicas": "*"})
    c.up(timeout=60)
    wait_until(lambda: scrape(c, victim).get(MAX_LAG, 0) > 0, 30, "the returning follower's lag")
    wait_until(lambda: total(c, ACTIVE_BROKERS) == 3, 30, "the controller to count the returned broker")
    _alter(c, ConfigResource.Type.BROKER, str(controller), {"leader.replication.throttled.rate": None})
    _alter(c, ConfigResource.Type.TOPIC, "lagging", {"leader.replication.throttled.replicas": None})
    wait_until(lambda: full_isr(c, "lagging", 3) and full_isr(c, "spread", 3), 60, "the follower to catch up")
    wait_until(lambda: scrape(c, victim).get(MAX_LAG) == 0, 30, "its lag back to 0")

    assert total(c, IMBALANCE) == preferred_by_victim  # nothing moved leadership back by itself
    elect_leaders(c.bootstrap_servers, None)
    wait_until(lambda: total(c, IMBALANCE) == 0, 30, "no imbalance after the preferred leader election")


def _alter(c: LocalCluster, kind: ConfigResource.Type, name: str, configs: dict[str, str | None]) -> None:
    """IncrementalAlterConfigs: SET each key given a value, DELETE each given None."""
    admin = AdminClient({"bootstrap.servers": c.bootstrap_servers})
    entries = [ConfigEntry(k, v, incremental_operation=AlterConfigOpType.DELETE if v is None
                           else AlterConfigOpType.SET) for k, v in configs.items()]
    resource = ConfigResource(kind, name, incremental_configs=entries)
    admin.incremental_alter_configs([resource])[resource].result(30)
