"""`odradek bench produce --security-protocol SASL_SSL --compare`: what TLS and SASL cost a
producer, measured on one cluster, and what an ACL check costs a request.

The private cluster has two listeners per broker: PLAINTEXT, and SASL_SSL (SASL/PLAIN over TLS
1.3, the inter-broker listener, so replication is encrypted in both kinds of run). Runs over each
alternate, each in its own process, with librdkafka's default batching (batch.num.messages
10,000, linger.ms 5): the per-request costs of TLS are not hidden behind megabyte requests. The
report is the ratio of the median throughputs, SASL_SSL / PLAINTEXT, and the latencies of both.

The authorization check's cost is measured in this process on the ACL authorizer the brokers run
(security/acl_authorizer.py), holding ACL_COUNT ACLs literal and prefixed: the time of one
Produce's check (WRITE on its topic), which is what authorization adds to each request naming one
topic, without and with a DENY among the matches.
"""
from __future__ import annotations

import contextlib
import json
import shutil
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Iterator

from odradek.bench.produce import ProduceResult, _child_run, _median_run, format_results
from odradek.cli.output import Progress
from odradek.cluster.local_cluster import LocalCluster
from odradek.common.netutil import free_port, free_port_block
from odradek.security.acl import (
    AccessControlEntry,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from odradek.security.acl_authorizer import AclAuthorizer
from odradek.security.local_ca import create_local_certificates

PROTOCOLS = ("PLAINTEXT", "SASL_SSL")
ACL_COUNT = 10_000
_CHECKS = 200_000
_USER, _PASSWORD = "bench", "bench-secret"
_PLAIN = "org.apache.kafka.common.security.plain.PlainLoginModule"


@contextlib.contextmanager
def two_listener_cluster(brokers: int = 3, timeout: float = 90.0) -> Iterator[tuple[str, str, Path]]:
    """A throwaway cluster with a PLAINTEXT and a SASL_SSL listener per broker; yields both
    bootstrap lists and the SASL_SSL client settings file, and always tears it down."""
    tmp = Path(tempfile.mkdtemp(prefix="odradek-bench-security-"))
    certs = create_local_certificates(tmp / "security")
    base = free_port_block(2 * brokers)
    users = f'user_broker="broker-secret" user_{_USER}="{_PASSWORD}"'
    cluster = LocalCluster(tmp, brokers, base_port=base, zk_port=free_port(), broker_args={
        "listeners": f"PLAINTEXT://127.0.0.1:{{port}},SECURE://127.0.0.1:{{port+{brokers}}}",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SECURE:SASL_SSL",
        "inter.broker.listener.name": "SECURE",
        "sasl.enabled.mechanisms": "PLAIN", "sasl.mechanism.inter.broker.protocol": "PLAIN",
        "listener.name.secure.plain.sasl.jaas.config":
            f'{_PLAIN} required username="broker" password="broker-secret" {users};',
        **certs.listener_config("none")})
    settings = tmp / "security" / "client.properties"
    settings.write_text("security.protocol=SASL_SSL\nsasl.mechanism=PLAIN\n"
                        f"sasl.username={_USER}\nsasl.password={_PASSWORD}\nssl.ca.location={certs.ca_file}\n")
    try:
        cluster.up(timeout=timeout)
        secure = ",".join(f"127.0.0.1:{cluster.broker_port(b) + brokers}" for b in cluster.broker_ids)
        yield cluster.bootstrap_servers, secure, settings
    finally:
        cluster.down()
        shutil.rmtree(tmp, ignore_errors=True)


def authorization_cost_us() -> dict[str, float]:
    """Microseconds per authorize() of a Produce (WRITE on a topic) among ACL_COUNT ACLs: one
    allowed by a literal ACL, one by a prefixed one, and one refused by a DENY."""
    authorizer = AclAuthorizer()
    allow = AclPermissionType.ALLOW
    for i in range(ACL_COUNT // 2):
        authorizer.apply(ResourcePattern(ResourceType.TOPIC, f"topic-{i}", PatternType.LITERAL),
                         [AccessControlEntry(f"User:u{i % 100}", "*", AclOperation.WRITE, allow)])
        authorizer.apply(ResourcePattern(ResourceType.TOPIC, f"team-{i}-", PatternType.PREFIXED),
                         [AccessControlEntry(f"User:u{i % 100}", "*", AclOperation.READ, allow)])
    authorizer.apply(ResourcePattern(ResourceType.TOPIC, "team-7-denied", PatternType.LITERAL),
                     [AccessControlEntry("User:u7", "*", AclOperation.WRITE, AclPermissionType.DENY)])
    authorizer.apply(ResourcePattern(ResourceType.TOPIC, "team-7-", PatternType.PREFIXED),
                     [AccessControlEntry("User:u7", "*", AclOperation.WRITE, allow)])
    cases = {"literal_allow": ("User:u42", "topic-4242"), "prefixed_allow": ("User:u7", "team-7-orders"),
             "deny": ("User:u7", "team-7-denied")}
    out = {}
    for name, (principal, topic) in cases.items():
        check = authorizer.authorize
        start = time.perf_counter()
        for _ in range(_CHECKS):
            check(principal, "10.0.0.1", AclOperation.WRITE, ResourceType.TOPIC, topic)
        out[name] = round((time.perf_counter() - start) / _CHECKS * 1e6, 2)
    return out


def run_security_compare(*, messages: int, size: int, acks: str, replication_factor: int, partitions: int,
                         rounds: int, as_json: bool) -> str:
    """Alternate PLAINTEXT and SASL_SSL runs ``rounds`` times on one private cluster."""
    results: list[tuple[str, ProduceResult]] = []
    with two_listener_cluster() as (plaintext, secure, settings):
        runs = [p for _ in range(rounds) for p in PROTOCOLS]
        progress = Progress(len(runs), "produce runs")
        for done, protocol in enumerate(runs):
            progress.update(done)
            bootstrap, config = (secure, settings) if protocol == "SASL_SSL" else (plaintext, None)
            results.append((protocol, _child_run(bootstrap, messages, size, acks, replication_factor, partitions,
                                                 True, config, default_batches=True)))
        progress.update(len(runs))
        progress.close()
    medians = {p: _median_run([r for q, r in results if q == p]) for p in PROTOCOLS}
    ratio = medians["SASL_SSL"].msgs_per_s / medians["PLAINTEXT"].msgs_per_s
    acl = authorization_cost_us()
    if as_json:
        return json.dumps({"runs": [{"security_protocol": p, **asdict(r)} for p, r in results],
                           "median": {p: asdict(r) for p, r in medians.items()},
                           "ratio_sasl_ssl_to_plaintext": round(ratio, 3),
                           "authorization_us_per_check": acl, "acl_count": ACL_COUNT})
    table = format_results([r for _, r in results]).splitlines()
    lines = [f"{'protocol':>10}  {table[0]}"] + [f"{p:>10}  {row}" for (p, _), row in zip(results, table[1:])]
    return "\n".join(lines + [
        f"median throughput ratio (SASL_SSL / PLAINTEXT): {ratio:.2f}",
        f"median p50/p99 ms: PLAINTEXT {medians['PLAINTEXT'].p50_ms}/{medians['PLAINTEXT'].p99_ms}, "
        f"SASL_SSL {medians['SASL_SSL'].p50_ms}/{medians['SASL_SSL'].p99_ms}",
        f"ACL check per request, {ACL_COUNT:,} ACLs (us): " + ", ".join(f"{k} {v}" for k, v in acl.items())])
