"""Who may see the dashboard, and over what: on a secured cluster (this process's client settings
have SASL credentials: `odradek ui --data-dir` of an `odradek up --secure` cluster, or
--command-config) the dashboard serves HTTPS and asks every request for an HTTP Basic login of
one of the cluster's own users, so it shows topic names, consumer groups and the controller's
decisions only to those the cluster would show them to. Without a secured cluster it stays plain
HTTP without a login (or HTTPS, with --tls-cert, still without one).

The certificate: --tls-cert FILE (and --tls-key FILE, unless the key is in the same file), else,
for an `odradek up --secure` data dir, the brokers' keystore there (DATA_DIR/security/
broker.keystore.pem), which names this host; a secured cluster without either is refused.

A login is checked by the cluster itself: a connection to a live broker that completes the SASL
exchange with the user's name and password (security/client_security.py's connect_blocking, with
the TLS settings and SASL mechanism of the process's own; the other SCRAM mechanism is tried when
the user has no credential for that one), then one DescribeCluster on it, asking for the cluster's
authorized operations. The login is accepted (200) when they include DESCRIBE, the permission the brokers' own metrics
endpoint asks for (broker/metrics_security.py): the dashboard reads the cluster as its own user,
usually the admin, and must not show more to a viewer than the cluster would. A valid login
without it is 403; a refused SASL exchange 401 (with ``WWW-Authenticate: Basic realm="odradek"``);
no broker to ask 503. A verdict of 200 or 403 is remembered for a minute per user and password
digest (an HMAC under a key of this process's own, so no password is kept), and logins being
checked are shared: the page's first requests, made at once, cost one SASL exchange.
"""
from __future__ import annotations

import asyncio
import dataclasses
import logging
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware

from odradek.broker.metrics_security import parse_basic
from odradek.client.broker_connection import BrokerConnection
from odradek.common.login_cache import LoginCache
from odradek.protocol.errors import ErrorCode
from odradek.security.acl import AclOperation
from odradek.security.client_security import ClientSecurity
from odradek.security.sasl import SCRAM_SHA_256, SCRAM_SHA_512, SaslAuthenticationError

log = logging.getLogger("odradek.ui.access")

REALM = 'Basic realm="odradek"'
DESCRIBE_CLUSTER = 60
#: how long a login's verdict (allowed, or not allowed) is taken without asking the cluster again
CACHE_TTL_S = 60.0
#: verdicts remembered at most (the oldest is dropped beyond)
CACHE_MAX = 1024
#: where `odradek up --secure` keeps the brokers' key and certificate, under the data dir
DATA_DIR_KEYSTORE = Path("security") / "broker.keystore.pem"

OK, UNAUTHORIZED, FORBIDDEN, UNAVAILABLE = 200, 401, 403, 503

#: (bootstrap "host:port,...", security with the viewer's user and password) -> a verdict; blocking
LoginCheck = Callable[[str, ClientSecurity, float], int]


class ClusterUnreachable(Exception):
    """No broker could be asked whether a login is valid."""


def mechanisms_to_try(mechanism: str | None) -> list[str]:
    """The process's SASL mechanism first, then the other SCRAM one (a user may hold a
    credential for only one of them)."""
    first = mechanism or SCRAM_SHA_512
    others = [m for m in (SCRAM_SHA_512, SCRAM_SHA_256) if m != first] if first.startswith("SCRAM-") else []
    return [first, *others]


def check_login(bootstrap: str, viewer: ClientSecurity, timeout: float) -> int:
    """OK when ``viewer`` (the process's security with the viewer's user and password) completes
    the SASL exchange with a broker of ``bootstrap`` and may DESCRIBE the cluster there, FORBIDDEN
    when it may not, UNAUTHORIZED when every mechanism's exchange is refused;
    ClusterUnreachable when no broker answers."""
    failures: list[str] = []
    for address in (a.strip() for a in bootstrap.split(",") if a.strip()):
        host, _, port = address.rpartition(":")
        refused = 0
        mechanisms = mechanisms_to_try(viewer.mechanism)
        for mechanism in mechanisms:
            try:
                connection = BrokerConnection(host.strip("[]"), int(port), "odradek-ui-login", timeout,
                                              security=dataclasses.replace(viewer, mechanism=mechanism))
            except SaslAuthenticationError:
                refused += 1
                continue
            except (OSError, ValueError) as exc:  # ssl.SSLError is an OSError
                failures.append(f"{address}: {exc}")
                break
            try:
                response = connection.request(DESCRIBE_CLUSTER, 0, {"include_cluster_authorized_operations": True})
            except OSError as exc:
                failures.append(f"{address}: {exc}")
                break
            finally:
                connection.close()
            if response.error_code != ErrorCode.NONE:
                failures.append(f"{address}: DescribeCluster answered error {response.error_code}")
                break
            # 0 when the user may not DESCRIBE the cluster, else a bit per operation allowed
            return OK if response.cluster_authorized_operations & (1 << int(AclOperation.DESCRIBE)) else FORBIDDEN
        if refused == len(mechanisms):
            return UNAUTHORIZED
    raise ClusterUnreachable("; ".join(failures) or "no live broker to check the login with")


class LoginChecker:
    """The dashboard's logins: each request's Authorization header -> a status, checked by the
    cluster (``check``, blocking, run on a worker thread) and remembered (see the module doc)."""

    def __init__(self, security: ClientSecurity, bootstrap: Callable[[], str | None], timeout: float = 5.0, *,
                 check: LoginCheck = check_login, ttl_s: float = CACHE_TTL_S, max_entries: int = CACHE_MAX,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._security = security
        self._bootstrap = bootstrap
        self._timeout = timeout
        self._check = check
        self._verdicts: LoginCache[int] = LoginCache(ttl_s, max_entries, clock)
        self._pending: dict[tuple[str, bytes], asyncio.Future[int]] = {}
        #: logins put to the cluster so far
        self.checks = 0

    async def status(self, header: str | None) -> int:
        """OK, UNAUTHORIZED, FORBIDDEN or UNAVAILABLE for a request with this Authorization header."""
        login = parse_basic(header)
        if login is None:
            return UNAUTHORIZED
        user, password = login
        key = self._verdicts.key(user, password)
        verdict = self._verdicts.get(key)
        if verdict is not None:
            return verdict
        pending = self._pending.get(key)
        if pending is None:
            pending = self._pending[key] = asyncio.ensure_future(self._ask(key, user, password))
            pending.add_done_callback(lambda _: self._pending.pop(key, None))
        return await asyncio.shield(pending)  # a request that goes away leaves the check to the others

    async def _ask(self, key: tuple[str, bytes], user: str, password: str) -> int:
        bootstrap = self._bootstrap()
        if not bootstrap:
            return UNAVAILABLE
        viewer = dataclasses.replace(self._security, username=user, password=password)
        self.checks += 1
        try:
            result = await asyncio.to_thread(self._check, bootstrap, viewer, self._timeout)
        except Exception as exc:  # noqa: BLE001 - ClusterUnreachable or worse: this login waits, the server goes on
            log.warning("cannot check the dashboard login of %r: %s", user, exc)
            return UNAVAILABLE
        if result in (OK, FORBIDDEN):
            self._verdicts.put(key, result)
        else:
            self._verdicts.forget(key)
        return result


_REFUSALS = {UNAUTHORIZED: "a login is required: a user of the cluster (HTTP Basic)\n",
             FORBIDDEN: "this user may not DESCRIBE the cluster, so may not see the dashboard\n",
             UNAVAILABLE: "the login cannot be checked now: no broker of the cluster answers\n"}


def login_middleware(checker: LoginChecker) -> Middleware:
    """An aiohttp middleware answering every request the checker does not allow with its refusal."""

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        status = await checker.status(request.headers.get("Authorization"))
        if status == OK:
            return await handler(request)
        headers = {"WWW-Authenticate": REALM} if status == UNAUTHORIZED else {}
        return web.Response(status=status, text=_REFUSALS[status], headers=headers)

    return middleware


@dataclass(frozen=True)
class Access:
    """How the dashboard is served: over TLS with ``ssl_context`` (None: plain HTTP), and with a
    login of the cluster's users when ``security`` (the process's client security) is given."""
    ssl_context: ssl.SSLContext | None = None
    security: ClientSecurity | None = None

    @property
    def scheme(self) -> str:
        return "https" if self.ssl_context is not None else "http"


class AccessError(ValueError):
    """The dashboard cannot be served as asked (a secured cluster without a certificate, a
    certificate that cannot be read); the message says what to give."""


def server_context(certificate: Path, key: Path | None = None) -> ssl.SSLContext:
    """A TLS server context presenting ``certificate`` (PEM: the chain, and the key unless
    ``key`` names its own file); AccessError naming the file that cannot be used."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(certificate, key)
    except (OSError, ssl.SSLError) as exc:
        files = f"{certificate}" + (f" and {key}" if key else "")
        raise AccessError(f"cannot serve HTTPS with {files}: {getattr(exc, 'strerror', None) or exc}") from None
    return context


def dashboard_access(security: ClientSecurity, data_dir: Path | None = None, tls_cert: Path | None = None,
                     tls_key: Path | None = None) -> Access:
    """The dashboard's access for the process's client ``security`` (see the module doc)."""
    if tls_key is not None and tls_cert is None:
        raise AccessError("--tls-key needs --tls-cert")
    secured = security.uses_sasl
    if tls_cert is not None:
        context: ssl.SSLContext | None = server_context(tls_cert, tls_key)
    elif secured and data_dir is not None and (data_dir / DATA_DIR_KEYSTORE).is_file():
        context = server_context(data_dir / DATA_DIR_KEYSTORE)
    elif secured:
        raise AccessError("the cluster is secured (its client settings log in with SASL), so the dashboard serves "
                          "HTTPS with a login: give its certificate with --tls-cert FILE (and --tls-key FILE)")
    else:
        context = None
    return Access(context, security if secured else None)
