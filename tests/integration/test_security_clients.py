"""Unmodified Kafka clients over every security protocol, on one two-broker cluster with a listener
of each kind (and two TLS listeners serving certificates a client must refuse):

    PLAINTEXT://{port}        set-up (the cluster tooling's checks, SCRAM users, kcat's topics)
    SSL://{port+2}            TLS, the server authenticated only
    SASL_PLAINTEXT://{port+4} PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512
    SASL_SSL://{port+6}       the same over TLS
    BADSAN://{port+8}         SSL with a certificate naming other hosts (wrong_san_certificate)
    EXPIRED://{port+10}       SSL with a certificate that expired yesterday (expired_certificate)

The matrix: confluent-kafka, kafka-python, aiokafka and kcat (librdkafka 2.0's, when installed),
each over PLAINTEXT, SSL, and SASL_PLAINTEXT and SASL_SSL with each mechanism: one admin call
(create the topic; kcat lists it), a few records produced with acks=all, and read back by a
consumer in a group. Then what every client must refuse: a certificate for other hosts (all four
check host names by default), one from a CA it was not given, one that has expired; and a SCRAM
login as an unknown user fails exactly as one with a wrong password does.

test_secured_listeners.py has the rest (mutual TLS, PLAIN refusals, re-authentication, the tools).
"""
from __future__ import annotations

import asyncio
import logging
import re
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka.admin import (
    AdminClient,
    NewTopic,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from cluster_helpers import start_cluster
from odradek.client.librdkafka_log import PROTOCOL_ERROR_MARKS
from odradek.cluster.local_cluster import LocalCluster
from odradek.protocol import kio_util
from odradek.security.client_security import ClientSecurity, connect_blocking
from odradek.security.local_ca import (
    create_ca,
    create_local_certificates,
    expired_certificate,
    load_ca,
    write_ca,
    write_certificate,
    wrong_san_certificate,
)
from odradek.security.sasl import SaslAuthenticationError
from odradek.zk.server import ZooKeeperServer

pytestmark = pytest.mark.integration

BROKERS = 2
#: each listener's security protocol; the i-th is at {port + i * BROKERS} (LocalCluster's placeholders)
LISTENERS = {"PLAINTEXT": "PLAINTEXT", "SSL": "SSL", "SASL_PLAINTEXT": "SASL_PLAINTEXT", "SASL_SSL": "SASL_SSL",
             "BADSAN": "SSL", "EXPIRED": "SSL"}
PLAIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
USER, PASSWORD = "alice", "alice-secret"
SCRAM = ("SCRAM-SHA-256", "SCRAM-SHA-512")
MECHANISMS = ("PLAIN", *SCRAM)
RECORDS = 5
KCAT = shutil.which("kcat")


@dataclass(frozen=True)
class Secured:
    cluster: LocalCluster
    ca_file: Path
    other_ca_file: Path  # a CA that signed none of the brokers' certificates

    def ports(self, listener: str) -> list[int]:
        offset = list(LISTENERS).index(listener) * BROKERS
        return [self.cluster.broker_port(b) + offset for b in self.cluster.broker_ids]

    def bootstrap(self, listener: str) -> str:
        return ",".join(f"127.0.0.1:{port}" for port in self.ports(listener))


@pytest.fixture(scope="module")
def secured(zookeeper: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    data = tmp_path_factory.mktemp("security-clients")
    certs = create_local_certificates(data / "security")
    ca = load_ca(data / "security")
    wrong_san = write_certificate(wrong_san_certificate(ca, "broker-wrong-san"), data / "security", "wrong-san")
    expired = write_certificate(expired_certificate(ca, "broker-expired"), data / "security", "expired")
    other_ca_file = write_ca(create_ca("another CA"), data / "other-ca")
    listeners = ",".join(f"{name}://127.0.0.1:{{port+{i * BROKERS}}}" for i, name in enumerate(LISTENERS))
    cluster = start_cluster(
        zookeeper, data / "cluster", BROKERS, ports_per_broker=len(LISTENERS),
        listeners=listeners,
        listener_security_protocol_map=",".join(f"{n}:{p}" for n, p in LISTENERS.items()),
        group_initial_rebalance_delay_ms=0, offsets_topic_num_partitions=4,
        **{"sasl.jaas.config": f'{PLAIN_MODULE} required user_{USER}="{PASSWORD}";',
           "listener.name.badsan.ssl.keystore.location": str(wrong_san.keystore),
           "listener.name.expired.ssl.keystore.location": str(expired.keystore)},
        **{k.replace(".", "_"): v for k, v in certs.listener_config("none").items()},
    )
    try:
        env = Secured(cluster, certs.ca_file, other_ca_file)
        _add_scram_user(env)
        yield env
    finally:
        cluster.down()


def _add_scram_user(env: Secured) -> None:
    """alice's SCRAM credentials (AlterUserScramCredentials over PLAINTEXT), then waits until
    every broker's credential cache has them (a ZooKeeper notification away)."""
    admin = AdminClient({"bootstrap.servers": env.bootstrap("PLAINTEXT")})
    upsertions = [UserScramCredentialUpsertion(USER, ScramCredentialInfo(getattr(ScramMechanism, m.replace("-", "_")),
                                                                         4096), PASSWORD.encode()) for m in SCRAM]
    for future in admin.alter_user_scram_credentials(upsertions).values():
        future.result(30)
    deadline = time.monotonic() + 15
    for port in env.ports("SASL_PLAINTEXT"):
        for mechanism in SCRAM:
            while True:
                try:
                    connect_blocking("127.0.0.1", port, ClientSecurity("SASL_PLAINTEXT", None, mechanism, USER,
                                                                       PASSWORD), 5, "setup").close()
                    break
                except SaslAuthenticationError:
                    assert time.monotonic() < deadline, f"{mechanism} credentials of {USER} not at port {port}"
                    time.sleep(0.1)


# -- each client's settings ----------------------------------------------------------------------

def librdkafka_conf(env: Secured, protocol: str, mechanism: str | None, *, user: str = USER, password: str = PASSWORD,
                    listener: str | None = None, ca_file: Path | None = None) -> dict[str, str]:
    conf = {"bootstrap.servers": env.bootstrap(listener or protocol), "security.protocol": protocol}
    if "SSL" in protocol:
        conf["ssl.ca.location"] = str(ca_file or env.ca_file)  # host names checked: librdkafka's default
    if mechanism:
        conf.update({"sasl.mechanism": mechanism, "sasl.username": user, "sasl.password": password})
    return conf


def kafka_python_conf(env: Secured, protocol: str, mechanism: str | None, *, listener: str | None = None,
                      ca_file: Path | None = None) -> dict[str, Any]:
    conf: dict[str, Any] = {"bootstrap_servers": env.bootstrap(listener or protocol), "security_protocol": protocol}
    if "SSL" in protocol:
        conf["ssl_cafile"] = str(ca_file or env.ca_file)  # host names checked: ssl_check_hostname=True, its default
    if mechanism:
        conf.update({"sasl_mechanism": mechanism, "sasl_plain_username": USER, "sasl_plain_password": PASSWORD})
    return conf


def aiokafka_conf(env: Secured, protocol: str, mechanism: str | None, *, user: str = USER, password: str = PASSWORD,
                  listener: str | None = None, ca_file: Path | None = None) -> dict[str, Any]:
    from aiokafka.helpers import create_ssl_context

    conf: dict[str, Any] = {"bootstrap_servers": env.bootstrap(listener or protocol), "security_protocol": protocol}
    if "SSL" in protocol:
        conf["ssl_context"] = create_ssl_context(cafile=str(ca_file or env.ca_file))  # checks host names
    if mechanism:
        conf.update({"sasl_mechanism": mechanism, "sasl_plain_username": user, "sasl_plain_password": password})
    return conf


def kcat_args(env: Secured, protocol: str, mechanism: str | None, *, listener: str | None = None,
              ca_file: Path | None = None) -> list[str]:
    return [arg for key, value in librdkafka_conf(env, protocol, mechanism, listener=listener, ca_file=ca_file).items()
            for arg in (("-b", value) if key == "bootstrap.servers" else ("-X", f"{key}={value}"))]


# -- the round trips -----------------------------------------------------------------------------

def values(topic: str) -> list[bytes]:
    return [f"{topic}-{i}".encode() for i in range(RECORDS)]


def create_topic(admin: AdminClient, topic: str) -> None:
    """(The client must outlive the future: a destroyed one fails it.)"""
    admin.create_topics([NewTopic(topic, 2, BROKERS)])[topic].result(30)


def confluent_round_trip(env: Secured, protocol: str, mechanism: str | None, topic: str) -> list[bytes]:
    conf = librdkafka_conf(env, protocol, mechanism)
    create_topic(AdminClient(conf), topic)
    producer = Producer({**conf, "acks": "all"})
    for value in values(topic):
        producer.produce(topic, value)
    assert producer.flush(30) == 0
    consumer = Consumer({**conf, "group.id": f"group-{topic}", "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    got: list[bytes] = []
    deadline = time.monotonic() + 30
    try:
        while len(got) < RECORDS and time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is not None:
                assert message.error() is None, message.error()
                got.append(message.value())
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    return got


def kafka_python_round_trip(env: Secured, protocol: str, mechanism: str | None, topic: str) -> list[bytes]:
    from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer
    from kafka.admin import NewTopic as KafkaNewTopic

    conf = kafka_python_conf(env, protocol, mechanism)
    admin = KafkaAdminClient(**conf)
    try:
        admin.create_topics([KafkaNewTopic(topic, 2, BROKERS)], timeout_ms=30000)
    finally:
        admin.close()
    producer = KafkaProducer(**conf, acks="all")
    try:
        for future in [producer.send(topic, value) for value in values(topic)]:
            future.get(timeout=30)
    finally:
        producer.close()
    consumer = KafkaConsumer(topic, **conf, group_id=f"group-{topic}", auto_offset_reset="earliest")
    got: list[bytes] = []
    deadline = time.monotonic() + 30
    try:
        while len(got) < RECORDS and time.monotonic() < deadline:
            for records in consumer.poll(200).values():
                got.extend(record.value for record in records)
        consumer.commit()
    finally:
        consumer.close()
    return got


def aiokafka_round_trip(env: Secured, protocol: str, mechanism: str | None, topic: str) -> list[bytes]:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.admin import AIOKafkaAdminClient
    from aiokafka.admin import NewTopic as AioNewTopic

    async def run() -> list[bytes]:
        conf = aiokafka_conf(env, protocol, mechanism)
        admin = AIOKafkaAdminClient(**conf)
        await admin.start()
        try:
            await admin.create_topics([AioNewTopic(topic, 2, BROKERS)], timeout_ms=30000)
        finally:
            await admin.close()
        producer = AIOKafkaProducer(**conf, acks="all")
        await producer.start()
        try:
            for value in values(topic):
                await producer.send_and_wait(topic, value)
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(topic, **conf, group_id=f"group-{topic}", auto_offset_reset="earliest")
        await consumer.start()
        got: list[bytes] = []
        try:
            async with asyncio.timeout(30):
                while len(got) < RECORDS:
                    for records in (await consumer.getmany(timeout_ms=200)).values():
                        got.extend(record.value for record in records if record.value is not None)
            await consumer.commit()
        finally:
            await consumer.stop()
        return got

    return asyncio.run(run())


def no_protocol_errors(stderr: bytes) -> None:
    """kcat prints librdkafka's log: no protocol error may be in it (librdkafka_guard.py)."""
    marks = [line for line in stderr.decode(errors="replace").splitlines()
             if any(mark in line for mark in PROTOCOL_ERROR_MARKS)]
    assert not marks, "kcat (librdkafka) logged protocol errors:\n" + "\n".join(marks)


def kcat(*args: str, stdin: bytes = b"", timeout: float = 30) -> subprocess.CompletedProcess[bytes]:
    assert KCAT is not None
    run = subprocess.run([KCAT, "-q", *args], input=stdin, capture_output=True, timeout=timeout)
    no_protocol_errors(run.stderr)
    return run


def kcat_round_trip(env: Secured, protocol: str, mechanism: str | None, topic: str) -> list[bytes]:
    """kcat creates no topics: the topic is made over PLAINTEXT, and kcat's admin call is
    listing it (-L, a Metadata request) over the protocol under test."""
    create_topic(AdminClient({"bootstrap.servers": env.bootstrap("PLAINTEXT")}), topic)
    security = kcat_args(env, protocol, mechanism)
    listed = kcat("-L", "-t", topic, "-m", "3", *security)
    assert listed.returncode == 0 and f'topic "{topic}" with 2 partitions' in listed.stdout.decode(), \
        listed.stderr.decode()
    produced = kcat("-P", "-t", topic, "-X", "acks=all", *security, stdin=b"".join(v + b"\n" for v in values(topic)))
    assert produced.returncode == 0, produced.stderr.decode()
    consumed = kcat("-G", f"group-{topic}", "-c", str(RECORDS), "-X", "auto.offset.reset=earliest", "-f", "%s\n",
                    *security, topic)
    assert consumed.returncode == 0, consumed.stderr.decode()
    return consumed.stdout.splitlines()


ROUND_TRIPS = {"confluent-kafka": confluent_round_trip, "kafka-python": kafka_python_round_trip,
               "aiokafka": aiokafka_round_trip, "kcat": kcat_round_trip}
PROTOCOLS = [("PLAINTEXT", None), ("SSL", None)] + [(p, m) for p in ("SASL_PLAINTEXT", "SASL_SSL") for m in MECHANISMS]


def _marks(client: str) -> list[pytest.MarkDecorator]:
    return [pytest.mark.skipif(KCAT is None, reason="kcat is installed by `make test`")] if client == "kcat" else []


MATRIX = [pytest.param(client, protocol, mechanism, id=f"{client}-{protocol}" + (f"-{mechanism}" if mechanism else ""),
                       marks=_marks(client))
          for client in ROUND_TRIPS for protocol, mechanism in PROTOCOLS]


@pytest.mark.parametrize("client, protocol, mechanism", MATRIX)
def test_produce_consume_in_a_group_and_an_admin_call(secured: Secured, client: str, protocol: str,
                                                      mechanism: str | None) -> None:
    topic = f"sc-{client}-{protocol}-{mechanism or 'none'}".lower()
    got = ROUND_TRIPS[client](secured, protocol, mechanism, topic)
    assert sorted(got) == values(topic)


# -- what every client must refuse ---------------------------------------------------------------

#: (listener, CA file given to the client) of each refusal, and what Python's ssl module says
REFUSALS = {"wrong-san": ("BADSAN", None, "IP address mismatch"),
            "untrusted-ca": ("SSL", "other", "self-signed certificate in certificate chain"),
            "expired": ("EXPIRED", None, "certificate has expired")}


def _confluent_refusal(conf: dict[str, str]) -> list[KafkaError]:
    errors: list[KafkaError] = []
    producer = Producer({**conf, "error_cb": errors.append})
    deadline = time.monotonic() + 15
    while not errors and time.monotonic() < deadline:
        producer.poll(0.1)
    with pytest.raises(Exception):
        producer.list_topics(timeout=0.5)
    return errors


def _kafka_python_refusal(conf: dict[str, Any]) -> None:
    from kafka import KafkaAdminClient
    from kafka.errors import KafkaError as KafkaPythonError

    with pytest.raises(KafkaPythonError):
        KafkaAdminClient(**conf, bootstrap_timeout_ms=2000, request_timeout_ms=2000).close()


def _aiokafka_refusal(conf: dict[str, Any]) -> None:
    from aiokafka import AIOKafkaProducer
    from aiokafka.errors import KafkaConnectionError

    async def run() -> None:
        producer = AIOKafkaProducer(**conf, request_timeout_ms=2000)
        try:
            with pytest.raises(KafkaConnectionError):
                await producer.start()
        finally:
            await producer.stop()

    asyncio.run(run())


@pytest.mark.parametrize("refusal", list(REFUSALS))
def test_every_client_refuses_a_broker_certificate_it_cannot_trust(secured: Secured, refusal: str,
                                                                   caplog: pytest.LogCaptureFixture) -> None:
    """A certificate for other hosts, from a CA the client was not given, or expired: every
    client's TLS handshake fails, and with the reason (Python's clients log it; librdkafka says
    "certificate verify failed" and no more)."""
    listener, which_ca, reason = REFUSALS[refusal]
    ca_file = secured.other_ca_file if which_ca == "other" else secured.ca_file
    kcat_run = None
    if KCAT is not None:  # in the background: it waits out its metadata timeout
        kcat_run = subprocess.Popen([KCAT, "-L", "-m", "3", *kcat_args(secured, "SSL", None, listener=listener,
                                                                        ca_file=ca_file)],
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        errors = _confluent_refusal(librdkafka_conf(secured, "SSL", None, listener=listener, ca_file=ca_file))
        assert errors and all(e.code() in (KafkaError._SSL, KafkaError._ALL_BROKERS_DOWN, KafkaError._TRANSPORT)
                              for e in errors), errors
        assert "certificate verify failed" in errors[0].str(), errors[0].str()
        with caplog.at_level(logging.WARNING):
            _kafka_python_refusal(kafka_python_conf(secured, "SSL", None, listener=listener, ca_file=ca_file))
            _aiokafka_refusal(aiokafka_conf(secured, "SSL", None, listener=listener, ca_file=ca_file))
        for logger in ("kafka", "aiokafka"):
            said = [r.getMessage() for r in caplog.records if r.name.split(".")[0] == logger]
            assert any("CERTIFICATE_VERIFY_FAILED" in line and reason in line for line in said), (logger, said)
        if kcat_run is not None:
            out, err = kcat_run.communicate(timeout=30)
            assert kcat_run.returncode != 0 and b"Metadata for" not in out, out.decode()
            assert b"certificate verify failed" in err, err.decode()
            no_protocol_errors(err)
    finally:
        if kcat_run is not None and kcat_run.poll() is None:
            kcat_run.kill()
            kcat_run.wait()


def test_the_wrong_san_listener_serves_a_client_that_does_not_check_host_names(secured: Secured) -> None:
    """The refusal above is the host name's: the same certificate, chain and listener serve a
    client told not to check it (librdkafka's ssl.endpoint.identification.algorithm=none)."""
    conf = {**librdkafka_conf(secured, "SSL", None, listener="BADSAN"), "ssl.endpoint.identification.algorithm": "none"}
    brokers = AdminClient(conf).list_topics(timeout=15).brokers
    assert sorted(b.port for b in brokers.values()) == sorted(secured.ports("BADSAN"))


# -- SCRAM: an unknown user fails as a wrong password does ------------------------------------------

def _librdkafka_login_error(conf: dict[str, str]) -> str:
    errors: list[KafkaError] = []
    producer = Producer({**conf, "error_cb": errors.append})
    deadline = time.monotonic() + 15
    while not any(e.code() == KafkaError._AUTHENTICATION for e in errors) and time.monotonic() < deadline:
        producer.poll(0.1)
    failures = [e.str() for e in errors if e.code() == KafkaError._AUTHENTICATION]
    assert failures, errors
    # without the broker's address and librdkafka's timing: "(after 6ms in state AUTH_REQ)"
    return re.sub(r" \(after \d+ms in state \w+\)$", "", failures[0].split(": ", 1)[1])


def _aiokafka_login_error(conf: dict[str, Any]) -> set[str]:
    """What aiokafka says of each refused login (it logs the broker's error; its exception only
    says it could not bootstrap)."""
    from aiokafka import AIOKafkaProducer
    from aiokafka.errors import KafkaError as AioKafkaError

    said: list[str] = []
    handler = logging.Handler(logging.ERROR)
    handler.emit = lambda record: said.append(record.getMessage())  # type: ignore[method-assign]
    logger = logging.getLogger("aiokafka")
    logger.addHandler(handler)

    async def run() -> None:
        producer = AIOKafkaProducer(**conf, request_timeout_ms=5000)
        try:
            with pytest.raises(AioKafkaError):
                await producer.start()
        finally:
            await producer.stop()

    try:
        asyncio.run(run())
    finally:
        logger.removeHandler(handler)
    refusals = {line.split(": ", 1)[1] for line in said if "SaslAuthenticationFailed" in line}
    assert refusals, said
    return refusals


def _wire_login_error(port: int, mechanism: str, user: str, password: str) -> str:
    security = ClientSecurity("SASL_PLAINTEXT", None, mechanism, user, password)
    with pytest.raises(SaslAuthenticationError) as refused:
        connect_blocking("127.0.0.1", port, security, 10, "scram-test").close()
    return refused.value.message


@pytest.mark.parametrize("mechanism", SCRAM)
def test_a_scram_login_as_an_unknown_user_fails_as_a_wrong_password_does(secured: Secured, mechanism: str) -> None:
    wrong_password = {"user": USER, "password": "not-" + PASSWORD}
    unknown_user = {"user": f"nobody-{uuid.uuid4().hex[:6]}", "password": PASSWORD}
    for protocol in ("SASL_PLAINTEXT", "SASL_SSL"):
        assert _librdkafka_login_error(librdkafka_conf(secured, protocol, mechanism, **wrong_password)) == \
            _librdkafka_login_error(librdkafka_conf(secured, protocol, mechanism, **unknown_user))
    assert _aiokafka_login_error(aiokafka_conf(secured, "SASL_SSL", mechanism, **wrong_password)) == \
        _aiokafka_login_error(aiokafka_conf(secured, "SASL_SSL", mechanism, **unknown_user))
    port = secured.ports("SASL_PLAINTEXT")[0]
    answer = _wire_login_error(port, mechanism, USER, "not-" + PASSWORD)
    assert answer == _wire_login_error(port, mechanism, unknown_user["user"], PASSWORD)
    assert answer == f"Authentication failed during authentication due to invalid credentials with SASL mechanism " \
                     f"{mechanism}"


def _server_first(port: int, mechanism: str, user: str) -> bytes:
    """The salt and iterations of the server-first message a broker answers ``user``'s client-first."""
    import socket
    import struct

    def read(sock: socket.socket) -> bytes:
        head = sock.recv(4, socket.MSG_WAITALL)
        (size,) = struct.unpack(">i", head)
        return sock.recv(size, socket.MSG_WAITALL)

    with socket.create_connection(("127.0.0.1", port), 10) as sock:
        sock.sendall(kio_util.encode_request(17, 1, 1, "t", {"mechanism": mechanism}))
        read(sock)
        sock.sendall(kio_util.encode_request(36, 1, 2, "t", {"auth_bytes": f"n,,n={user},r=nonce".encode()}))
        _, answer = kio_util.decode_response(36, 1, read(sock))
    assert answer.error_code == 0, answer
    return bytes(answer.auth_bytes).split(b",", 1)[1]


@pytest.mark.parametrize("mechanism", SCRAM)
def test_an_unknown_scram_user_gets_the_same_salt_from_every_broker(secured: Secured, mechanism: str) -> None:
    """A real user's salt is the one in ZooKeeper, the same from every broker; an unknown user's
    must be too, or two connections tell who has an account."""
    ports = secured.ports("SASL_PLAINTEXT")
    assert len({_server_first(port, mechanism, USER) for port in ports}) == 1
    assert len({_server_first(port, mechanism, "nobody") for port in ports}) == 1
