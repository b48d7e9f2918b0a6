"""The metrics endpoint's security (broker/metrics_security.py, http_endpoints.py): HTTP Basic
logins checked against the cluster's SCRAM credentials (remembered for a minute, compared in
constant time, malformed headers refused), DESCRIBE on the cluster asked of the authorizer, the
settings' defaults from the listeners, and the endpoint itself over TLS refusing what it must."""
from __future__ import annotations

import base64
import http.client
import ssl
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from odradek.broker.config import BrokerConfig
from odradek.broker.credential_cache import CredentialCache
from odradek.broker.metrics import BrokerMetrics
from odradek.broker.metrics_security import (
    CACHE_TTL_S,
    FORBIDDEN,
    OK,
    UNAUTHORIZED,
    BasicAuthenticator,
    metrics_security,
    parse_basic,
)
from odradek.security import local_ca, scram
from odradek.security.acl import (
    CLUSTER_NAME,
    AccessControlEntry,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from odradek.security.acl_authorizer import AclAuthorizer
from odradek.security.sasl import SCRAM_SHA_256, SCRAM_SHA_512
from odradek.security.scram import credential_to_string, generate_credential, password_matches
from odradek.security.ssl_factory import SslConfigError


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def cache_with(**users: dict[str, str]) -> CredentialCache:
    """A credential cache holding each user's credentials ({mechanism: password})."""
    cache = CredentialCache()
    for user, passwords in users.items():
        cache.update_user(user, {m: credential_to_string(generate_credential(m, p)) for m, p in passwords.items()})
    return cache


# -- parsing the header ---------------------------------------------------------------------------

def test_parse_basic_reads_user_and_password_and_refuses_anything_else() -> None:
    assert parse_basic(basic("alice", "s3cret")) == ("alice", "s3cret")
    assert parse_basic(basic("alice", "a:b:c")) == ("alice", "a:b:c")  # the first colon splits
    assert parse_basic(basic("zoë", "pässword")) == ("zoë", "pässword")  # UTF-8 (RFC 7617)
    assert parse_basic("basic " + basic("alice", "x")[6:]) == ("alice", "x")  # the scheme in any case
    assert parse_basic(basic("alice", "")) == ("alice", "")
    for bad in (None, "", "Basic", "Basic ", "Bearer abc", "Digest " + basic("a", "b")[6:],
                "Basic !!!notbase64", "Basic " + base64.b64encode(b"no-colon").decode(),
                "Basic " + base64.b64encode(b":password-without-user").decode(),
                "Basic " + base64.b64encode(b"\xff\xfe:x").decode(),  # not UTF-8
                "Basic " + base64.b64encode(b"alice:pass\nword").decode(),  # a control character
                "Basic " + base64.b64encode(b"alice:" + b"x" * 5000).decode()):  # past MAX_HEADER
        assert parse_basic(bad) is None, bad


# -- checking the password -----------------------------------------------------------------------

def test_password_matches_only_the_password_the_credential_was_made_from() -> None:
    for mechanism in (SCRAM_SHA_256, SCRAM_SHA_512):
        credential = generate_credential(mechanism, "right")
        assert password_matches(mechanism, credential, "right")
        assert not password_matches(mechanism, credential, "wrong")
        assert not password_matches(mechanism, credential, "right ")
    outside = scram.ScramCredential(b"salt", b"k" * 64, b"s" * 64, scram.MAX_ITERATIONS + 1)
    assert not password_matches(SCRAM_SHA_512, outside, "anything")  # as the SCRAM exchange refuses it


def test_the_stored_key_is_compared_in_constant_time(monkeypatch: pytest.MonkeyPatch) -> None:
    compared: list[tuple[bytes, bytes]] = []
    real = scram.hmac.compare_digest

    def spy(a: bytes, b: bytes) -> bool:
        compared.append((a, b))
        return real(a, b)

    monkeypatch.setattr(scram.hmac, "compare_digest", spy)
    check = BasicAuthenticator(cache_with(alice={SCRAM_SHA_512: "right"}).lookup, None)
    assert check(basic("alice", "wrong"), "127.0.0.1") == UNAUTHORIZED
    assert check(basic("nobody", "wrong"), "127.0.0.1") == UNAUTHORIZED
    assert check(basic("alice", "right"), "127.0.0.1") == OK
    assert len(compared) == 3  # each check, the unknown user's too, went through compare_digest


def test_logins_of_either_scram_mechanism_are_accepted_and_everything_else_refused() -> None:
    cache = cache_with(alice={SCRAM_SHA_512: "a512"}, bob={SCRAM_SHA_256: "b256"},
                       carol={SCRAM_SHA_256: "c256", SCRAM_SHA_512: "c512"})
    check = BasicAuthenticator(cache.lookup, None)
    assert check(basic("alice", "a512"), "10.0.0.1") == OK
    assert check(basic("bob", "b256"), "10.0.0.1") == OK  # a user with a SCRAM-SHA-256 credential only
    assert check(basic("carol", "c512"), "10.0.0.1") == OK
    assert check(basic("carol", "c256"), "10.0.0.1") == OK  # either of the user's credentials
    assert check(basic("alice", "A512"), "10.0.0.1") == UNAUTHORIZED
    assert check(basic("mallory", "a512"), "10.0.0.1") == UNAUTHORIZED
    assert check(None, "10.0.0.1") == UNAUTHORIZED
    assert check("Basic garbage", "10.0.0.1") == UNAUTHORIZED


def test_an_unknown_user_costs_a_password_check_as_a_known_one_does() -> None:
    check = BasicAuthenticator(cache_with(alice={SCRAM_SHA_512: "right"}).lookup, None)
    check(basic("nobody", "guess"), "10.0.0.1")
    assert check.checks == 1


def test_a_login_is_remembered_for_a_minute_and_only_while_its_credential_is_the_users() -> None:
    cache, clock = cache_with(alice={SCRAM_SHA_512: "right"}), Clock()
    check = BasicAuthenticator(cache.lookup, None, clock=clock)
    assert check(basic("alice", "right"), "10.0.0.1") == OK and check.checks == 1
    for _ in range(20):  # a scrape every few seconds: no PBKDF2 each time
        clock.now += 2.5
        assert check(basic("alice", "right"), "10.0.0.1") == OK
    assert check.checks == 1
    assert check(basic("alice", "wrong"), "10.0.0.1") == UNAUTHORIZED and check.checks == 2  # not remembered
    assert check(basic("alice", "wrong"), "10.0.0.1") == UNAUTHORIZED and check.checks == 3  # failures never are

    clock.now += CACHE_TTL_S  # a minute after the check: checked again
    assert check(basic("alice", "right"), "10.0.0.1") == OK and check.checks == 4

    # the password changed: the remembered login ends at once, the new password works
    cache.update_user("alice", {SCRAM_SHA_512: credential_to_string(generate_credential(SCRAM_SHA_512, "new"))})
    assert check(basic("alice", "right"), "10.0.0.1") == UNAUTHORIZED
    assert check(basic("alice", "new"), "10.0.0.1") == OK
    cache.update_user("alice", {})  # deleted
    assert check(basic("alice", "new"), "10.0.0.1") == UNAUTHORIZED


def test_the_remembered_logins_are_bounded() -> None:
    cache = cache_with(**{f"u{i}": {SCRAM_SHA_512: "pw"} for i in range(5)})
    check = BasicAuthenticator(cache.lookup, None, max_entries=3)
    for i in range(5):
        assert check(basic(f"u{i}", "pw"), "10.0.0.1") == OK
    assert len(check._logins) <= 3
    assert check(basic("u4", "pw"), "10.0.0.1") == OK and check.checks == 5  # the newest is kept


def test_with_an_authorizer_the_user_must_be_allowed_to_describe_the_cluster() -> None:
    cache = cache_with(admin={SCRAM_SHA_512: "a"}, alice={SCRAM_SHA_512: "b"}, bob={SCRAM_SHA_512: "c"},
                       carol={SCRAM_SHA_512: "d"})
    authorizer = AclAuthorizer(super_users={"User:admin"})
    cluster = ResourcePattern(ResourceType.CLUSTER, CLUSTER_NAME, PatternType.LITERAL)
    authorizer.apply(cluster, [
        AccessControlEntry("User:alice", "*", AclOperation.DESCRIBE, AclPermissionType.ALLOW),
        AccessControlEntry("User:carol", "*", AclOperation.ALTER, AclPermissionType.ALLOW),  # implies DESCRIBE
        AccessControlEntry("User:carol", "10.9.9.9", AclOperation.ALL, AclPermissionType.DENY)])
    check = BasicAuthenticator(cache.lookup, authorizer)
    assert check(basic("admin", "a"), "10.0.0.1") == OK  # a super user
    assert check(basic("alice", "b"), "10.0.0.1") == OK
    assert check(basic("carol", "d"), "10.0.0.1") == OK
    assert check(basic("carol", "d"), "10.9.9.9") == FORBIDDEN  # the client's address is the ACLs' host
    assert check(basic("bob", "c"), "10.0.0.1") == FORBIDDEN  # a valid login without the permission
    assert check(basic("bob", "wrong"), "10.0.0.1") == UNAUTHORIZED  # the login first
    authorizer.apply(cluster, [])  # an ACL change applies at once, the login remembered or not
    assert check(basic("alice", "b"), "10.0.0.1") == FORBIDDEN


# -- the settings ----------------------------------------------------------------------------------

def _config(tmp_path: Path, security: dict[str, str], **fields: object) -> BrokerConfig:
    return BrokerConfig(1, "127.0.0.1", 9092, "zk:2181", tmp_path, security=security, **fields)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> local_ca.LocalCertificates:
    return local_ca.create_local_certificates(tmp_path_factory.mktemp("certs"))


def test_the_defaults_follow_the_listeners(tmp_path: Path, certificates: local_ca.LocalCertificates) -> None:
    plain = metrics_security(_config(tmp_path, {}), _config(tmp_path, {}).listeners())
    assert (plain.ssl_context, plain.authentication, plain.scheme) == (None, "none", "http")

    stores = certificates.listener_config("required")
    secured_settings = {"listeners": "SASL_SSL://127.0.0.1:9092", **stores}
    config = _config(tmp_path, secured_settings)
    secured = metrics_security(config, config.listeners())
    assert secured.scheme == "https" and secured.authentication == "basic" and secured.tls_listener == "SASL_SSL"
    assert secured.ssl_context is not None and secured.ssl_context.verify_mode == ssl.CERT_NONE  # no client certificate

    config = _config(tmp_path, {"listeners": "SASL_PLAINTEXT://127.0.0.1:9092"})
    assert (metrics_security(config, config.listeners()).scheme, metrics_security(config, config.listeners())
            .authentication) == ("http", "basic")
    config = _config(tmp_path, {"listeners": "INTERNAL://127.0.0.1:9092,EXTERNAL://127.0.0.1:9093",
                                "listener.security.protocol.map": "INTERNAL:PLAINTEXT,EXTERNAL:SSL",
                                "inter.broker.listener.name": "INTERNAL", **stores})
    tls_elsewhere = metrics_security(config, config.listeners())
    assert (tls_elsewhere.tls_listener, tls_elsewhere.authentication) == ("EXTERNAL", "none")

    config = _config(tmp_path, secured_settings, metrics_ssl_enabled=False, metrics_authentication="none")
    overridden = metrics_security(config, config.listeners())
    assert (overridden.scheme, overridden.authentication) == ("http", "none")
    config = _config(tmp_path, {}, metrics_ssl_enabled=True)
    with pytest.raises(SslConfigError, match="ssl.keystore.location.*metrics.ssl.enabled"):
        metrics_security(config, config.listeners())
    config = _config(tmp_path, {}, metrics_authentication="digest")
    with pytest.raises(ValueError, match="metrics.authentication=digest"):
        metrics_security(config, config.listeners())


def test_a_config_file_sets_and_checks_the_keys(tmp_path: Path) -> None:
    base = "broker.id=1\nlisteners=PLAINTEXT://127.0.0.1:9092\nzookeeper.connect=zk:2181\nlog.dirs=/tmp/x\n"
    (tmp_path / "a.properties").write_text(base + "metrics.ssl.enabled=false\nmetrics.authentication=BASIC\n")
    config = BrokerConfig.from_file(tmp_path / "a.properties")
    assert config.metrics_ssl_enabled is False and config.metrics_authentication == "BASIC"
    assert metrics_security(config, config.listeners()).authentication == "basic"
    (tmp_path / "b.properties").write_text(base + "metrics.ssl.enabled=maybe\n")
    with pytest.raises(ValueError, match="line 5: metrics.ssl.enabled=maybe: true or false"):
        BrokerConfig.from_file(tmp_path / "b.properties")
    (tmp_path / "c.properties").write_text(base + "metrics.authentication=digest\n")
    with pytest.raises(ValueError, match="line 5: metrics.authentication=digest: one of basic, none"):
        BrokerConfig.from_file(tmp_path / "c.properties")


# -- the endpoint ----------------------------------------------------------------------------------

@pytest.fixture
def secured_endpoint(tmp_path: Path, certificates: local_ca.LocalCertificates) -> Iterator[tuple[str, ssl.SSLContext]]:
    config = _config(tmp_path, {"listeners": "SASL_SSL://127.0.0.1:9092", **certificates.listener_config("none")})
    security = metrics_security(config, config.listeners())
    authorizer = AclAuthorizer(super_users={"User:admin"})
    check = BasicAuthenticator(cache_with(admin={SCRAM_SHA_512: "adminpw"}, bob={SCRAM_SHA_256: "bobpw"}).lookup,
                               authorizer)
    server = BrokerMetrics().serve("127.0.0.1", 0, tmp_path / "state-change.log", ssl_context=security.ssl_context,
                                   authenticate=check)
    try:
        yield f"127.0.0.1:{server.server_address[1]}", ssl.create_default_context(cafile=str(certificates.ca_file))
    finally:
        server.shutdown()
        server.server_close()


def _get(url: str, context: ssl.SSLContext | None, authorization: str | None = None,
         method: str = "GET") -> tuple[int, dict[str, str], bytes]:
    request = urllib.request.Request(url, headers={"Authorization": authorization} if authorization else {},
                                     method=method)
    try:
        with urllib.request.urlopen(request, timeout=5, context=context) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read()


def test_the_secured_endpoint_answers_only_allowed_logins_over_tls(secured_endpoint: tuple[str, ssl.SSLContext]) -> None:
    address, context = secured_endpoint
    for path in ("/metrics", "/state-change-log", "/nowhere"):
        status, headers, body = _get(f"https://{address}{path}", context)
        assert status == 401 and headers["WWW-Authenticate"] == 'Basic realm="odradek"', path
        assert b"kafka_" not in body
    assert _get(f"https://{address}/metrics", context, method="HEAD")[0] == 401
    assert _get(f"https://{address}/metrics", context, basic("admin", "wrong"))[0] == 401
    assert _get(f"https://{address}/metrics", context, "Basic ###")[0] == 401
    assert _get(f"https://{address}/metrics", context, basic("bob", "bobpw"))[0] == 403
    status, _, body = _get(f"https://{address}/metrics", context, basic("admin", "adminpw"))
    assert status == 200 and b"kafka_network_requestmetrics" in body
    assert _get(f"https://{address}/state-change-log", context, basic("admin", "adminpw"))[0] == 200

    # plain HTTP on the TLS port gets no answer, and the server goes on serving
    with pytest.raises((urllib.error.URLError, http.client.HTTPException, ConnectionError)):
        urllib.request.urlopen(f"http://{address}/metrics", timeout=5)
    assert _get(f"https://{address}/metrics", context, basic("admin", "adminpw"))[0] == 200
