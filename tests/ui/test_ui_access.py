"""The dashboard's access on a secured cluster (ui/access.py): HTTPS with the data dir's or the
given certificate, logins checked by the cluster and remembered for a minute (one check for the
page's simultaneous first requests), refusals answered as HTTP says; and the login the metrics
endpoints are read with (client/metrics_http.py) sent only where it is safe."""
from __future__ import annotations

import asyncio
import base64
import ssl
from pathlib import Path

import pytest

from odradek.client.metrics_http import headers_for
from odradek.security import local_ca
from odradek.security.client_security import ClientSecurity
from odradek.security.sasl import SCRAM_SHA_256, SCRAM_SHA_512
from odradek.ui.access import (
    CACHE_TTL_S,
    DATA_DIR_KEYSTORE,
    FORBIDDEN,
    OK,
    UNAUTHORIZED,
    UNAVAILABLE,
    AccessError,
    ClusterUnreachable,
    LoginChecker,
    dashboard_access,
    mechanisms_to_try,
)

ADMIN = ClientSecurity("SASL_SSL", ssl.create_default_context(), SCRAM_SHA_512, "admin", "adminpw")


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Cluster:
    """A login check standing in for the brokers: the users and what each may do."""

    def __init__(self) -> None:
        self.users = {"admin": ("adminpw", OK), "bob": ("bobpw", FORBIDDEN)}
        self.asked: list[tuple[str, str, str]] = []
        self.reachable = True

    def check(self, bootstrap: str, viewer: ClientSecurity, timeout: float) -> int:
        self.asked.append((bootstrap, viewer.username, viewer.password))
        assert viewer.mechanism == SCRAM_SHA_512 and viewer.protocol == "SASL_SSL"  # the process's, another user
        if not self.reachable:
            raise ClusterUnreachable("127.0.0.1:9092: connection refused")
        password, verdict = self.users.get(viewer.username, (None, UNAUTHORIZED))
        return verdict if password == viewer.password else UNAUTHORIZED


def test_logins_are_checked_by_the_cluster_and_remembered_for_a_minute() -> None:
    cluster, clock = Cluster(), Clock()
    checker = LoginChecker(ADMIN, lambda: "127.0.0.1:9092", check=cluster.check, clock=clock)

    async def scenario() -> None:
        assert await checker.status(None) == UNAUTHORIZED
        assert await checker.status("Basic ???") == UNAUTHORIZED
        assert cluster.asked == []  # a malformed login is not put to the cluster
        assert await checker.status(basic("admin", "adminpw")) == OK
        assert await checker.status(basic("bob", "bobpw")) == FORBIDDEN
        assert await checker.status(basic("admin", "wrong")) == UNAUTHORIZED
        assert len(cluster.asked) == 3
        clock.now += CACHE_TTL_S - 1
        assert await checker.status(basic("admin", "adminpw")) == OK
        assert await checker.status(basic("bob", "bobpw")) == FORBIDDEN
        assert len(cluster.asked) == 3  # remembered, allowed or not
        assert await checker.status(basic("admin", "wrong")) == UNAUTHORIZED
        assert len(cluster.asked) == 4  # a refused login never is
        clock.now += 2
        assert await checker.status(basic("admin", "adminpw")) == OK
        assert len(cluster.asked) == 5  # a minute on: asked again
        assert ("127.0.0.1:9092", "admin", "adminpw") in cluster.asked

    asyncio.run(scenario())


def test_the_pages_first_requests_at_once_cost_one_check() -> None:
    cluster = Cluster()
    checker = LoginChecker(ADMIN, lambda: "127.0.0.1:9092", check=cluster.check)

    async def scenario() -> list[int]:
        return await asyncio.gather(*(checker.status(basic("admin", "adminpw")) for _ in range(6)))

    assert asyncio.run(scenario()) == [OK] * 6
    assert len(cluster.asked) == 1


def test_no_broker_to_ask_is_503_and_not_remembered() -> None:
    cluster = Cluster()
    bootstrap: list[str | None] = [None]
    checker = LoginChecker(ADMIN, lambda: bootstrap[0], check=cluster.check)

    async def scenario() -> None:
        assert await checker.status(basic("admin", "adminpw")) == UNAVAILABLE  # no live broker known yet
        bootstrap[0] = "127.0.0.1:9092"
        cluster.reachable = False
        assert await checker.status(basic("admin", "adminpw")) == UNAVAILABLE
        cluster.reachable = True
        assert await checker.status(basic("admin", "adminpw")) == OK

    asyncio.run(scenario())


def test_the_processs_mechanism_is_tried_first_then_the_other_scram_one() -> None:
    assert mechanisms_to_try(SCRAM_SHA_512) == [SCRAM_SHA_512, SCRAM_SHA_256]
    assert mechanisms_to_try(SCRAM_SHA_256) == [SCRAM_SHA_256, SCRAM_SHA_512]
    assert mechanisms_to_try("PLAIN") == ["PLAIN"]


def test_the_dashboard_serves_https_with_a_login_only_on_a_secured_cluster(tmp_path: Path) -> None:
    plain = dashboard_access(ClientSecurity())
    assert (plain.ssl_context, plain.security, plain.scheme) == (None, None, "http")
    with pytest.raises(AccessError, match="--tls-cert"):
        dashboard_access(ADMIN)  # secured, and no certificate to serve with
    with pytest.raises(AccessError, match="--tls-cert"):
        dashboard_access(ADMIN, tmp_path)  # a data dir without the keystore of `up --secure`

    certificates = local_ca.create_local_certificates(tmp_path / "certs")
    (tmp_path / DATA_DIR_KEYSTORE).parent.mkdir()
    (tmp_path / DATA_DIR_KEYSTORE).write_bytes(certificates.broker.keystore.read_bytes())
    from_data_dir = dashboard_access(ADMIN, tmp_path)
    assert from_data_dir.scheme == "https" and from_data_dir.security is ADMIN
    given = dashboard_access(ADMIN, None, certificates.broker.certificate, certificates.broker.key)
    assert given.scheme == "https" and given.security is ADMIN
    tls_only = dashboard_access(ClientSecurity(), None, certificates.broker.keystore)  # key and chain in one file
    assert tls_only.scheme == "https" and tls_only.security is None  # HTTPS, no login to check it with
    with pytest.raises(AccessError, match="cannot serve HTTPS with"):
        dashboard_access(ADMIN, None, certificates.broker.certificate)  # no key
    with pytest.raises(AccessError, match="--tls-key needs --tls-cert"):
        dashboard_access(ADMIN, None, None, certificates.broker.key)


def test_the_metrics_login_goes_only_over_tls_or_to_a_cluster_without_tls() -> None:
    assert headers_for("https://b1:10092/metrics", ADMIN)["Authorization"] == basic("admin", "adminpw")
    assert headers_for("http://b1:10092/metrics", ADMIN) == {}  # a TLS cluster's password is not sent in clear
    sasl_plaintext = ClientSecurity("SASL_PLAINTEXT", None, SCRAM_SHA_512, "admin", "adminpw")
    assert headers_for("http://b1:10092/metrics", sasl_plaintext)["Authorization"] == basic("admin", "adminpw")
    assert headers_for("https://b1:10092/metrics", ClientSecurity("SSL", ssl.create_default_context())) == {}
    assert headers_for("http://b1:10092/metrics", ClientSecurity()) == {}
