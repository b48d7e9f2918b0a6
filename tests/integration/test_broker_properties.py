"""A broker started from a Kafka server.properties (Kafka's key names: broker.id, listeners,
log.dirs, zookeeper.connect with a chroot, log.retention.hours, unknown keys warned about), and
auto.create.topics.enable: a kafka-python producer sending to a missing topic creates it on a
broker with the flag on and not on one with it off; the topic configs of a broker without
overrides are the broker's log.* values (DescribeConfigs and the log itself)."""
from __future__ import annotations

import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, ConfigResource, ConfigSource
from kafka import KafkaProducer
from kafka.errors import KafkaTimeoutError
from wire import RawConnection

from odradek.broker import api_keys
from odradek.common.netutil import free_port
from odradek.protocol.errors import ErrorCode
from odradek.zk.server import ZooKeeperServer

pytestmark = pytest.mark.integration

SEGMENT_BYTES = 16384


@dataclass
class PropertiesBroker:
    process: subprocess.Popen[bytes]
    port: int
    log_dir: Path
    output: Path

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def metadata(self, topics: list[str] | None, version: int = 4, allow: bool = True) -> dict[str, int]:
        conn = RawConnection("127.0.0.1", self.port)
        try:
            resp = conn.request(api_keys.METADATA, version, {
                "topics": None if topics is None else [{"name": t} for t in topics],
                "allow_auto_topic_creation": allow})
        finally:
            conn.close()
        return {t.name: t.error_code for t in resp.topics}


def _start(tmp: Path, zk_connect: str, broker_id: int, extra: str) -> PropertiesBroker:
    port = free_port()
    props = tmp / f"server-{broker_id}.properties"
    props.write_text(f"""# a server.properties as Kafka ships it, trimmed
broker.id={broker_id}
listeners=PLAINTEXT://127.0.0.1:{port}
num.network.threads=3
socket.send.buffer.bytes=102400
log.dirs={tmp / f"kafka-logs-{broker_id}"}
zookeeper.connect={zk_connect}
zookeeper.connection.timeout.ms=18000
zookeeper.session.timeout.ms=4000
log.retention.hours=48
offsets.topic.replication.factor=1
group.initial.rebalance.delay.ms=0
{extra}""")
    output = tmp / f"broker-{broker_id}.log"
    with output.open("wb") as out:
        process = subprocess.Popen([sys.executable, "-m", "odradek", "broker", "--config", str(props)],
                                   stdout=out, stderr=subprocess.STDOUT)
    return PropertiesBroker(process, port, tmp / f"kafka-logs-{broker_id}", output)


def _wait_ready(brokers: list[PropertiesBroker], timeout_s: float = 60) -> None:
    """Until each broker answers Metadata with every broker and a controller."""
    deadline = time.monotonic() + timeout_s
    for broker in brokers:
        while True:
            assert broker.process.poll() is None, broker.output.read_text()
            try:
                conn = RawConnection("127.0.0.1", broker.port, timeout=2)
                try:
                    resp = conn.request(api_keys.METADATA, 1, {"topics": []})
                finally:
                    conn.close()
                if resp.controller_id >= 0 and len(resp.brokers) == len(brokers):
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline, broker.output.read_text()
            time.sleep(0.2)


def _stop(brokers: list[PropertiesBroker]) -> None:
    for broker in brokers:
        broker.process.terminate()
    for broker in brokers:
        try:
            broker.process.wait(30)
        except subprocess.TimeoutExpired:
            broker.process.kill()
            broker.process.wait()


def _chroot(zookeeper: ZooKeeperServer) -> str:
    return f"{zookeeper.connect_string}/odradek-props-{uuid.uuid4().hex[:12]}"


@pytest.fixture(scope="module")
def auto_broker(zookeeper: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[PropertiesBroker]:
    """One broker with auto.create.topics.enable=true and a small log.segment.bytes."""
    broker = _start(tmp_path_factory.mktemp("auto"), _chroot(zookeeper), 1,
                    f"auto.create.topics.enable=true\nnum.partitions=2\nlog.segment.bytes={SEGMENT_BYTES}\n")
    try:
        _wait_ready([broker])
        yield broker
    finally:
        _stop([broker])


def test_a_kafka_server_properties_starts_a_broker_warning_once_about_unknown_keys(
        auto_broker: PropertiesBroker) -> None:
    warnings = [line for line in auto_broker.output.read_text().splitlines() if "warning" in line.lower()
                and "num.network.threads" in line]
    assert len(warnings) == 1
    assert "socket.send.buffer.bytes" in warnings[0] and "zookeeper.connection.timeout.ms" in warnings[0]
    assert auto_broker.log_dir.is_dir()


def test_a_producer_creates_a_missing_topic_that_takes_the_brokers_log_configs(
        auto_broker: PropertiesBroker) -> None:
    producer = KafkaProducer(bootstrap_servers=auto_broker.bootstrap, max_block_ms=30000, linger_ms=5)
    try:
        for i in range(120):
            producer.send("made-by-metadata", value=bytes(1000), partition=0)
        producer.flush(30)
    finally:
        producer.close()
    assert auto_broker.metadata(["made-by-metadata"], allow=False) == {"made-by-metadata": ErrorCode.NONE}
    # num.partitions, and the log rolled at the broker's log.segment.bytes (not segment.bytes' 1 GiB)
    assert (auto_broker.log_dir / "made-by-metadata-1").is_dir()
    assert len(list((auto_broker.log_dir / "made-by-metadata-0").glob("*.log"))) >= 5
    admin = AdminClient({"bootstrap.servers": auto_broker.bootstrap})
    resource = ConfigResource(ConfigResource.Type.TOPIC, "made-by-metadata")
    configs = admin.describe_configs([resource])[resource].result(30)
    assert (configs["segment.bytes"].value, configs["segment.bytes"].source) == (
        str(SEGMENT_BYTES), ConfigSource.STATIC_BROKER_CONFIG.value)
    assert (configs["retention.ms"].value, configs["retention.ms"].source) == (
        str(48 * 3600 * 1000), ConfigSource.STATIC_BROKER_CONFIG.value)
    assert (configs["max.message.bytes"].value, configs["max.message.bytes"].source) == (
        "1048588", ConfigSource.DEFAULT_CONFIG.value)


def test_metadata_creates_no_topic_it_may_not(auto_broker: PropertiesBroker) -> None:
    # Metadata v4+ carries the client's own switch (KIP-204)
    assert auto_broker.metadata(["not-allowed"], allow=False) == {"not-allowed": ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
    bad = ["bad name!", "x" * 250, "__odradek_reserved"]
    assert auto_broker.metadata(bad, version=1) == {t: ErrorCode.INVALID_TOPIC_EXCEPTION for t in bad}
    # a version-1 request always allows; the first answer is LEADER_NOT_AVAILABLE, clients retry
    assert auto_broker.metadata(["old-client"], version=1) == {"old-client": ErrorCode.LEADER_NOT_AVAILABLE}
    deadline = time.monotonic() + 30
    while "old-client" not in (names := set(auto_broker.metadata(None))) and time.monotonic() < deadline:
        time.sleep(0.1)  # until the controller's UpdateMetadata has reached the broker
    assert "old-client" in names and not names & {"not-allowed", "__odradek_reserved"}


def test_auto_create_off_leaves_a_missing_topic_missing(zookeeper: ZooKeeperServer, tmp_path: Path) -> None:
    """Broker 1 keeps the default (off); broker 2 has it on with a replication factor larger than
    the live brokers, which Kafka answers INVALID_REPLICATION_FACTOR for."""
    zk = _chroot(zookeeper)
    off = _start(tmp_path, zk, 1, "")
    brokers = [off]
    try:
        _wait_ready(brokers)
        producer = KafkaProducer(bootstrap_servers=off.bootstrap, max_block_ms=3000)
        try:
            with pytest.raises(KafkaTimeoutError):
                producer.send("never-made", b"x").get(10)
        finally:
            producer.close(timeout=5)
        assert off.metadata(["never-made"], version=1) == {"never-made": ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
        # started only now, so that the producer's metadata requests all went to broker 1
        on = _start(tmp_path, zk, 2, "auto.create.topics.enable=true\ndefault.replication.factor=3\n")
        brokers.append(on)
        _wait_ready(brokers)
        assert on.metadata(["too-replicated"]) == {"too-replicated": ErrorCode.INVALID_REPLICATION_FACTOR}
        assert off.metadata(None) == {}
    finally:
        _stop(brokers)


@pytest.mark.parametrize("line, message", [
    ("log.dirs=/tmp/a,/tmp/b", "one directory"),
    ("listeners=SSL://127.0.0.1:9093", "ssl.keystore.location: a server needs a keystore"),
    ("listeners=SASL_PLAINTEXT://127.0.0.1:9093\nsasl.enabled.mechanisms=GSSAPI", "GSSAPI is not supported"),
    ("log.segment.bytes=ten", "log.segment.bytes=ten: an integer is expected"),
    ("log.cleanup.policy=forever", "log.cleanup.policy"),
])
def test_a_bad_value_is_a_one_line_error(tmp_path: Path, line: str, message: str) -> None:
    props = tmp_path / "server.properties"
    props.write_text(f"broker.id=1\nlisteners=PLAINTEXT://127.0.0.1:{free_port()}\nlog.dirs={tmp_path}\n"
                     f"zookeeper.connect=127.0.0.1:1\n{line}\n")
    done = subprocess.run([sys.executable, "-m", "odradek", "broker", "--config", str(props)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    assert done.stderr.startswith("odradek: error: ") and done.stderr.count("\n") == 1, done.stderr
    assert message in done.stderr
