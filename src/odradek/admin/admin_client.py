"""Operator queries behind `odradek topics ...` (`odradek status`'s are cluster_health.py's).

Topic commands speak only the Kafka protocol (confluent-kafka, plus one raw Metadata request),
so they work unchanged against Apache Kafka.
"""
from __future__ import annotations

import concurrent.futures
import logging
import socket
import struct
import time
from typing import Any, Callable

#: ``progress(done, total)``: how far a long operation has come (the CLI draws a bar from it).
ProgressFn = Callable[[int, int], None]

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from odradek.admin.errors import AdminError, ClusterError
from odradek.admin.zookeeper import connect_zk
from odradek.cli.output import duration
from odradek.client import client_config
from odradek.client.librdkafka_log import client_logger
from odradek.protocol.errors import ErrorCode, error_name
from odradek.security.client_security import connect_blocking
from odradek.zk import paths


def quiet_logger() -> logging.Logger:
    """librdkafka logs every refused connection to stderr; the CLI reports errors itself.
    Protocol errors still reach the file ODRADEK_LIBRDKAFKA_PROTOCOL_ERROR_LOG names, if any
    (the tests set it, so a CLI command in a test fails it on one)."""
    log = client_logger("odradek.librdkafka")
    if not any(isinstance(h, logging.NullHandler) for h in log.handlers):
        log.addHandler(logging.NullHandler())
        log.propagate = False
    return log


def kafka_error_text(err: KafkaError | KafkaException | Exception) -> str:
    """`NAME: message` for a Kafka error, e.g. `TOPIC_ALREADY_EXISTS: Topic 'x' already exists.`

    A broker's error is named as Kafka names it (odradek.protocol.errors: the same numbers as
    librdkafka's codes -1 and up), not by librdkafka's abbreviations (UNKNOWN_TOPIC_OR_PART,
    UNKNOWN); librdkafka's own errors (codes below -1, named with a leading '_') keep its name."""
    if isinstance(err, KafkaException) and err.args and isinstance(err.args[0], KafkaError):
        err = err.args[0]
    if isinstance(err, KafkaError):
        return f"{error_name(err.code(), err.name())}: {err.str()}"
    return str(err)




#: librdkafka refuses a socket.timeout.ms above 300,000 (its configuration table's maximum;
#: the AdminClient's construction raises), so one request can wait at most that long.
MAX_SOCKET_TIMEOUT_MS = 300_000
#: The longest timeout one admin request is given, 10 s inside MAX_SOCKET_TIMEOUT_MS so the
#: request times out before its connection does. Longer operations poll (create_topic).
MAX_REQUEST_TIMEOUT_S = MAX_SOCKET_TIMEOUT_MS / 1000 - 10


def admin_client(bootstrap: str, request_timeout: float = 0.0) -> AdminClient:
    """``request_timeout``: how long one request may wait for its answer; librdkafka's own
    socket.timeout.ms (60 s) would otherwise cut off a longer CreateTopics operation timeout.
    Capped at librdkafka's maximum (MAX_SOCKET_TIMEOUT_MS)."""
    conf: dict[str, Any] = {"bootstrap.servers": bootstrap, "logger": quiet_logger()}
    if request_timeout > 50:
        conf["socket.timeout.ms"] = min(int((request_timeout + 10) * 1000), MAX_SOCKET_TIMEOUT_MS)
    return AdminClient(client_config.librdkafka(conf))


#: CreateTopics' "the broker's default" for a partition count or replication factor (KIP-464)
BROKER_DEFAULT = -1


def create_topic(bootstrap: str, name: str, partitions: int = BROKER_DEFAULT,
                 replication_factor: int = BROKER_DEFAULT,
                 config: dict[str, str] | None = None, timeout: float | None = None,
                 replica_assignment: list[list[int]] | None = None, progress: ProgressFn | None = None,
                 zookeeper: str | None = None) -> tuple[int, int]:
    """CreateTopics for one topic; raises AdminError carrying Kafka's error name and message.
    Returns the topic's partition count and replication factor: ``partitions`` or
    ``replication_factor`` BROKER_DEFAULT (-1, KIP-464) leaves them to the broker's
    num.partitions and default.replication.factor, and the created topic's metadata tells them.

    Returns once every live broker knows the leaders of all its partitions: CreateTopics answers
    when the broker that took it does, and the others hear from the controller a moment later,
    so a client asking another broker right away (the next command, a test) could otherwise be
    told the topic does not exist.

    A ``timeout`` longer than one request may wait (MAX_REQUEST_TIMEOUT_S, librdkafka's limit)
    is not one giant request: the CreateTopics request gets at most that long, and if it times
    out the rest of ``timeout`` is spent polling every broker's metadata for the topic. A
    broker answers CreateTopics within 30 s of writing the topic anyway, while its controller
    may still be creating the partitions (see creation_timeout_s).

    Without ``timeout``: creation_timeout_s(partitions). ``replica_assignment``: each partition's
    replicas, the first its preferred leader (CreateTopics' manual assignment; it then decides
    ``partitions`` and ``replication_factor``, which must agree with it). ``progress`` is told
    how many partitions have a leader: elected in ZooKeeper where ``zookeeper`` is given (they
    come one multi of ~1,000 at a time), else as the broker that knows fewest serves them; the
    total only once every broker knows them all (the brokers create the logs after the last
    election, and answer nothing meanwhile)."""
    if timeout is None:
        timeout = creation_timeout_s(max(partitions, len(replica_assignment or ())))
    deadline = time.monotonic() + timeout
    request_timeout = min(timeout, MAX_REQUEST_TIMEOUT_S)
    if replica_assignment is not None:
        topic = NewTopic(name, num_partitions=len(replica_assignment), replica_assignment=replica_assignment,
                         config=config or {})
    else:
        topic = NewTopic(name, num_partitions=partitions, replication_factor=replication_factor,
                         config=config or {})
    # must outlive the future: a collected client fails it with _DESTROY
    admin = admin_client(bootstrap, request_timeout=request_timeout)
    future = admin.create_topics([topic], request_timeout=request_timeout,
                                 operation_timeout=request_timeout)[name]
    answered = True
    zk = zookeeper_progress(zookeeper) if progress is not None else None
    try:
        if progress is not None:
            _report_while_pending(future, bootstrap, name, partitions, progress, request_timeout + 5, zk)
        try:
            future.result(timeout=request_timeout + 5)
        except KafkaException as exc:
            if not timed_out(exc):
                raise AdminError(kafka_error_text(exc)) from None
            answered = False  # the write may still have happened: look for the topic below
        except TimeoutError:
            answered = False
        if replica_assignment is not None:
            partitions, replication_factor = len(replica_assignment), len(replica_assignment[0])
        elif partitions == BROKER_DEFAULT or replication_factor == BROKER_DEFAULT:
            partitions, replication_factor = _created_shape(bootstrap, name, deadline, answered)
        _wait_until_every_broker_knows(bootstrap, name, partitions, deadline, answered, progress, zk)
    finally:
        if zk is not None:
            zk.close()
    return partitions, replication_factor


def _created_shape(bootstrap: str, topic: str, deadline: float, answered: bool) -> tuple[int, int]:
    """The partition count and replication factor of a topic just created with the broker's
    defaults, from the first broker of ``bootstrap`` that lists it with every leader."""
    while True:
        try:
            known = metadata_request(bootstrap, [topic], max(1.0, deadline - time.monotonic()))
            t = known.topics[0] if known.topics else None
            if t is not None and t.error_code == 0 and t.partitions and _led_partitions(known) == len(t.partitions):
                return len(t.partitions), len(t.partitions[0].replica_nodes)
        except AdminError:
            pass  # a broker going away meanwhile: asked again until the deadline
        if time.monotonic() > deadline:
            raise AdminError(f"topic {topic!r} was created, but no broker listed its partitions in time"
                             if answered else f"CreateTopics got no answer from {bootstrap} in time, and "
                             f"no broker lists topic {topic!r}")
        time.sleep(0.05)


def _report_while_pending(future: Any, bootstrap: str, topic: str, partitions: int, progress: ProgressFn,
                          timeout: float, zk: ZooKeeperProgress | None = None) -> None:
    """While CreateTopics is unanswered (tens of seconds for 50,000 partitions), count the
    partitions that already have a leader, once a second."""
    deadline = time.monotonic() + timeout
    while not future.done() and time.monotonic() < deadline:
        elected = zk.elected(topic, partitions) if zk is not None else None
        try:
            led = elected if elected is not None else _led_partitions(metadata_request(bootstrap, [topic], 5.0))
            progress(min(led, partitions - 1), partitions)  # the total only once every broker knows them
        except AdminError:
            pass
        try:
            future.exception(timeout=0.5 if zk is not None else 1.0)
        except (concurrent.futures.TimeoutError, concurrent.futures.CancelledError):
            pass


def _led_partitions(response: Any) -> int:
    t = response.topics[0] if response.topics else None
    return 0 if t is None or t.error_code != 0 else sum(1 for p in t.partitions if p.leader_id >= 0)


class ZooKeeperProgress:
    """What only ZooKeeper shows while it happens, counted for a progress bar: the brokers
    answer Metadata with a new topic's leaders only after the controller elected all of them
    (one UpdateMetadata at the end), and a deleted topic leaves their metadata before its
    deletion completes. Reads are pipelined, and a partition or topic once counted is not
    read again. Any ZooKeeper failure makes the count None: the caller falls back to Metadata."""

    def __init__(self, zookeeper: str) -> None:
        self.zk = connect_zk(zookeeper, 5.0)
        self._elected: set[Any] = set()
        self._deleted: set[str] = set()

    def elected(self, topic: str, partitions: int) -> int | None:
        """Partitions of ``topic`` whose leader is elected: their state znode exists."""
        from odradek.common.metadata import TopicPartition

        wanted = [TopicPartition(topic, p) for p in range(partitions)]
        if not self._count(self._elected, wanted, lambda tp: [paths.partition_state_path(tp)], present=True):
            return None
        return sum(1 for tp in wanted if tp in self._elected)

    def deleted(self, topics: list[str]) -> int | None:
        """Topics whose deletion completed: gone from /brokers/topics and /admin/delete_topics."""

        if not self._count(self._deleted, topics, lambda t: [paths.topic_path(t), paths.delete_topic_path(t)],
                           present=False):
            return None
        return sum(1 for t in topics if t in self._deleted)

    def _count(self, done: set[Any], wanted: list[Any], znodes: Callable[[Any], list[str]], present: bool) -> bool:
        """Add to ``done`` each of ``wanted`` whose ``znodes`` all exist (``present``) or
        none does; False if ZooKeeper could not be read."""
        try:
            reads = [(key, [self.zk.exists_async(z) for z in znodes(key)]) for key in wanted if key not in done]
            for key, results in reads:
                found = [r.get(timeout=5.0) is not None for r in results]
                if all(found) if present else not any(found):
                    done.add(key)
        except Exception:  # noqa: BLE001 - ZooKeeper gone meanwhile: no count, not a failed command
            return False
        return True

    def close(self) -> None:
        self.zk.stop()
        self.zk.close()


def zookeeper_progress(zookeeper: str | None) -> ZooKeeperProgress | None:
    """A ZooKeeperProgress where ZooKeeper is known and reachable, else None."""
    if zookeeper is None:
        return None
    try:
        return ZooKeeperProgress(zookeeper)
    except ClusterError:
        return None


def creation_timeout_s(partitions: int) -> float:
    """How long creating a topic of ``partitions`` may take until every broker knows its
    leaders: 30 s, or 4 ms per partition (200 s at 50,000) where that is longer: 50,000
    partitions have taken up to 98 s (docs/benchmarks-history.md, "Partitions per broker")."""
    return max(30.0, partitions / 250)


def timed_out(exc: KafkaException) -> bool:
    """Whether a request failed only by not being answered in time (librdkafka's _TIMED_OUT,
    or the broker's REQUEST_TIMED_OUT), so its effect is unknown rather than refused."""
    err = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
    return err is not None and err.code() in (KafkaError._TIMED_OUT, KafkaError.REQUEST_TIMED_OUT)


def _wait_until_every_broker_knows(bootstrap: str, topic: str, partitions: int,
                                   deadline: float, answered: bool = True,
                                   progress: ProgressFn | None = None, zk: ZooKeeperProgress | None = None) -> None:
    brokers = metadata_request(bootstrap, [topic], max(1.0, deadline - time.monotonic())).brokers
    pending = {f"{b.host}:{b.port}" for b in brokers}
    while True:
        fewest = partitions
        for server in sorted(pending):
            try:
                known = metadata_request(server, [topic], max(1.0, deadline - time.monotonic()))
            except AdminError:
                continue  # a broker going away meanwhile: asked again until the deadline
            t = known.topics[0] if known.topics else None
            led = _led_partitions(known)
            fewest = min(fewest, led)
            if t is not None and t.error_code == 0 and len(t.partitions) == partitions and led == partitions:
                pending.discard(server)
        if progress is not None:
            elected = zk.elected(topic, partitions) if zk is not None and pending else None
            progress(min(max(fewest, elected or 0), partitions - 1) if pending else partitions, partitions)
        if not pending:
            return
        if time.monotonic() > deadline:
            if not answered:
                raise AdminError(f"CreateTopics got no answer from {bootstrap} in time, and "
                                 f"brokers {sorted(pending)} do not know all the leaders of "
                                 f"topic {topic!r}")
            raise AdminError(f"topic {topic!r} was created, but brokers {sorted(pending)} did not "
                             f"know the leaders of all its partitions in time")
        time.sleep(0.02)


def list_topics(bootstrap: str, timeout: float = 10.0) -> list[dict[str, Any]]:
    """Every topic of the cluster's metadata, sorted by name, as {"name", "internal"}: whether
    it is one of Kafka's internal topics, as the broker's Metadata answer flags it
    (is_internal), so Apache Kafka's own internal topics are marked too."""
    response = metadata_request(bootstrap, None, timeout)
    return [{"name": t.name, "internal": bool(t.is_internal)}
            for t in sorted(response.topics, key=lambda t: t.name or "") if t.name and t.error_code == 0]


def describe_topics(bootstrap: str, names: list[str] | None = None, timeout: float = 10.0) -> list[dict[str, Any]]:
    """Leader, leader epoch, replicas and ISR of every partition of `names` (all topics if None).

    One Metadata v12 request over a plain socket: confluent-kafka's describe_topics and
    list_topics do not report the leader epoch, and a single request gives one consistent view.
    """
    response = metadata_request(bootstrap, names, timeout)
    topics = []
    for t in sorted(response.topics, key=lambda t: t.name or ""):
        if t.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
            raise AdminError(f"topic {t.name!r} does not exist (odradek topics list shows the topics)")
        if t.error_code != 0:
            raise AdminError(f"{t.error_code.name.upper()}: topic {t.name!r}")
        topics.append({
            "name": t.name,
            "internal": bool(t.is_internal),
            "partitions": [
                {"partition": int(p.partition_index), "leader": int(p.leader_id),
                 "leader_epoch": int(p.leader_epoch), "replicas": [int(r) for r in p.replica_nodes],
                 "isr": [int(r) for r in p.isr_nodes]}
                for p in sorted(t.partitions, key=lambda p: p.partition_index)
            ],
        })
    return topics


def partition_offsets(bootstrap: str, partitions: list[tuple[str, int]],
                      timeout: float = 10.0) -> dict[tuple[str, int], tuple[int | None, int | None]]:
    """(log start offset, high watermark) of each partition: ListOffsets for the earliest and
    the latest offset, sent by confluent-kafka to each partition's leader. None where the
    leader could not answer (an offline partition)."""
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import OffsetSpec

    if not partitions:
        return {}
    admin = admin_client(bootstrap)
    found: dict[tuple[str, int], list[int | None]] = {tp: [None, None] for tp in partitions}
    for i, spec in enumerate((OffsetSpec.earliest(), OffsetSpec.latest())):
        futures = admin.list_offsets({TopicPartition(t, p): spec for t, p in partitions}, request_timeout=timeout)
        for tp, future in futures.items():
            try:
                found[(tp.topic, tp.partition)][i] = future.result(timeout=timeout + 5).offset
            except (KafkaException, concurrent.futures.TimeoutError):
                pass  # no leader to answer: shown as unknown
    return {tp: (start, end) for tp, (start, end) in found.items()}


def elect_leaders(bootstrap: str, partitions: list[tuple[str, int]] | None, unclean: bool = False,
                  timeout: float = 60.0) -> dict[tuple[str, int], str | None]:
    """ElectLeaders through confluent-kafka (sent to the controller): per partition None when it
    got the leader asked for, else `ERROR_NAME: message`. ``partitions`` None: every partition,
    reported only where an election ran or failed (Kafka leaves out ELECTION_NOT_NEEDED)."""
    from confluent_kafka import ElectionType, TopicPartition

    election = ElectionType.UNCLEAN if unclean else ElectionType.PREFERRED
    tps = None if partitions is None else [TopicPartition(t, p) for t, p in partitions]
    try:
        # confluent-kafka 2.16's elect_leaders rejects its own timeout options (a SystemError),
        # so the broker waits its default 60 s at most and we bound the wait here; the client must
        # outlive the future (a collected client fails it with _DESTROY)
        client = admin_client(bootstrap, timeout)
        results = client.elect_leaders(election, tps).result(timeout=timeout)
    except KafkaException as exc:
        raise AdminError(f"leader election failed: {kafka_error_text(exc)}") from None
    except concurrent.futures.TimeoutError:
        raise AdminError(f"leader election: no answer from the controller within {duration(timeout)}") from None
    return {(tp.topic, tp.partition): None if err is None else kafka_error_text(err)
            for tp, err in results.items()}


def filter_partitions(topics: list[dict[str, Any]], *, under_replicated: bool, offline: bool,
                      keep_empty: bool = False, under_min_isr: bool = False,
                      at_min_isr: bool = False) -> list[dict[str, Any]]:
    """Only the partitions an operator is looking for: under-replicated (a live leader, but an
    ISR smaller than the replica list; Kafka's TopicCommand rule), offline (no live leader),
    under min ISR (an ISR smaller than the topic's min.insync.replicas: acks=all producers are
    refused) and at min ISR (one more replica lost and they are), as kafka-topics.sh
    --under-min-isr-partitions and --at-min-isr-partitions; those two read each topic's
    "min_insync_replicas". With several flags, any of the kinds."""
    def wanted(t: dict[str, Any], p: dict[str, Any]) -> bool:
        has_leader = p["leader"] >= 0
        min_isr = t.get("min_insync_replicas", 1)
        return ((under_replicated and has_leader and len(p["isr"]) < len(p["replicas"]))
                or (offline and not has_leader)
                or (under_min_isr and len(p["isr"]) < min_isr)
                or (at_min_isr and len(p["isr"]) == min_isr))

    kept = [{**t, "partitions": [p for p in t["partitions"] if wanted(t, p)]} for t in topics]
    return [t for t in kept if t["partitions"] or keep_empty]


def metadata_request(bootstrap: str, names: list[str] | None, timeout: float) -> Any:
    """One raw Metadata v12 request to the first reachable server of `bootstrap`."""
    topics = None if names is None else [{"topic_id": None, "name": n} for n in names]
    return request_first(bootstrap.split(","), bootstrap, 3, 12, {
        "topics": topics, "allow_auto_topic_creation": False,
        "include_topic_authorized_operations": False}, timeout)


def request_first(servers: list[str], bootstrap: str, api_key: int, version: int, body: dict[str, Any],
                  timeout: float, client_id: str = "odradek-admin") -> Any:
    """One raw request to the first of ``servers`` that answers (the tools' requests that
    confluent-kafka cannot send); AdminError naming ``bootstrap`` if none does."""
    errors = []
    for server in servers:
        try:
            return send_request(server.strip(), api_key, version, body, timeout, client_id)
        except (OSError, ValueError) as exc:
            errors.append((server.strip(), connection_failure(exc)))
    if len(errors) == 1:  # "cannot reach h:9092: Connection refused", the address said once
        raise AdminError(f"cannot reach {errors[0][0]}: {errors[0][1]}")
    raise AdminError(f"cannot reach {bootstrap}: {'; '.join(f'{s}: {why}' for s, why in errors)}")


def connection_failure(exc: Exception) -> str:
    """Why a connection failed, in words: the system's text without its "[Errno 111]" prefix
    ("Connection refused"), "timed out", or the reason a reply could not be read."""
    if isinstance(exc, socket.timeout):
        return "timed out"
    if isinstance(exc, socket.gaierror):
        return f"unknown host ({exc.strerror or 'name not resolved'})"
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc) or "connection failed"


def send_request(server: str, api_key: int, version: int, body: dict[str, Any], timeout: float,
                 client_id: str = "odradek-admin") -> Any:
    """One raw Kafka request to ``host:port`` on a connection of its own; the response body."""
    from odradek.protocol import kio_util

    frame = send_request_raw(server, api_key, version, body, timeout, client_id)
    return kio_util.decode_response(api_key, version, frame)[1]


def send_request_raw(server: str, api_key: int, version: int, body: dict[str, Any], timeout: float,
                     client_id: str = "odradek-admin") -> bytes:
    """send_request's exchange, the response frame (without its size prefix) undecoded: for a
    response kio cannot read (broker/txn_admin_apis.read_describe_transactions_response)."""
    from odradek.protocol import kio_util

    host, _, port = server.rpartition(":")
    request = kio_util.encode_request(api_key, version, 1, client_id, body)
    with connect_blocking(host, int(port), client_config.security(), timeout, client_id) as sock:
        sock.sendall(request)
        size = struct.unpack(">i", _recv_exactly(sock, 4))[0]
        return _recv_exactly(sock, size)


def _recv_exactly(sock: socket.socket, n: int) -> bytes:
    chunks, got = [], 0
    while got < n:
        chunk = sock.recv(min(n - got, 1 << 20))
        if not chunk:
            raise ConnectionError("connection closed by broker")
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def format_describe(topics: list[dict[str, Any]], offsets: bool = False) -> str:
    """One aligned table row per partition, the layout kafka-topics.sh --describe uses; with
    ``offsets`` also each partition's log start offset and high watermark ("-": unknown)."""
    header = ("Topic", "Partition", "Leader", "LeaderEpoch", "Replicas", "Isr")
    extra = ("LogStartOffset", "HighWatermark") if offsets else ()

    def shown(value: int | None) -> str:
        return "-" if value is None else str(value)

    return format_table([header + extra] + [
        (t["name"], str(p["partition"]), str(p["leader"]), str(p["leader_epoch"]),
         ",".join(map(str, p["replicas"])), ",".join(map(str, p["isr"])))
        + ((shown(p.get("log_start_offset")), shown(p.get("high_watermark"))) if offsets else ())
        for t in topics for p in t["partitions"]
    ])


def format_table(rows: list[tuple[str, ...]]) -> str:
    """Aligned columns two spaces apart, the first row the header, as Kafka's tools print them."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows)
