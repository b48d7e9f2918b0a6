"""The broker's client quotas at work: Kafka's QuotaFactory.QuotaManagers (produce, fetch and
request quotas over one set of overrides, client_quota_manager.py) fed from ZooKeeper, and what
each request costs against them (Kafka's KafkaApis, RequestChannel and SocketServer parts).

Where the quotas come from: /config/users/<user>, /config/users/<user>/clients/<client-id> and
/config/clients/<client-id> (names sanitized, common/sanitizer.py; <default> for the defaults),
which the DynamicConfigManager reads at startup and after each change notification and hands to
``on_user_config`` / ``on_client_config``. Whose request it is: the session's principal name (the
user, "ANONYMOUS" on a listener without authentication, as in Kafka) and the client id of the
request header (None is "").

What is recorded, as Kafka records it:
- produce: the request's size, when it arrives (``begin``; Kafka records request.sizeInBytes as
  it answers, the same bytes a few milliseconds later), so its throttle time is known before the
  handler encodes the response;
- fetch (from consumers; a follower's fetch is exempt): the response's size, by the Fetch handler
  through ``record_fetch_response`` before it encodes the response, else by KafkaApis once the
  response is there (``finish``);
- request (request_percentage): the time the request kept the event loop busy, its handler's
  synchronous part and each step of its asynchronous part (``metered``: time spent waiting, a
  long poll or replication, is not counted), as a percentage of a second, at the response. Requests
  between brokers (the controller's, a follower's fetch, WriteTxnMarkers, AddPartitionsToTxn v4+)
  are metered as exempt and never throttled; neither is an acks=0 Produce, which has no response.

What a throttled client sees: a response whose throttle_time_ms says how long it is throttled
(Produce's and Fetch's byte rates; the handlers put ``throttle_time_ms()`` there), and the
connection muted for that long, the largest of the request's throttle times (KafkaConnection
reads no request from it, as Kafka's SocketServer mutes a throttled channel): a client that does
not back off by itself (librdkafka) is held back all the same. The response goes out at once.
Where odradek differs: a Fetch over its quota is answered with its records (Kafka answers it
empty and takes the bytes back): the client waits the throttle time after them instead of
before, the same rate over the window; the request quota's throttle mutes the connection but is
not written into responses.

The cheap path: with no client quota set anywhere, ``begin`` answers None after one test per
request and nothing else runs.
"""
from __future__ import annotations

import logging
import struct
import time
from collections.abc import Awaitable, Callable, Generator, Iterable, Mapping, Sequence
from contextvars import ContextVar, Token
from dataclasses import dataclass
from typing import Any, TypeVar

from odradek.broker import api_keys
from odradek.broker.client_quota_manager import (
    DEFAULT,
    NUM_QUOTA_SAMPLES_DEFAULT,
    QUOTA_WINDOW_SIZE_SECONDS_DEFAULT,
    ClientQuotaManagers,
    EntityName,
    QuotaEntity,
    QuotaMetric,
)
from odradek.broker.session import Session
from odradek.common.sanitizer import desanitize, sanitize
from odradek.protocol import controller_api
from odradek.protocol.framing import FramingError, parse_request_header
from odradek.zk.admin_zk_client import CLIENTS, USERS

log = logging.getLogger("odradek.broker.client_quotas")

T = TypeVar("T")

#: the <default> entity's znode name (Kafka's ConfigEntityName.Default)
DEFAULT_ZNODE = "<default>"
#: requests between brokers: metered as exempt, never throttled (Kafka answers them with
#: sendResponseExemptThrottle); Fetch from a follower and AddPartitionsToTxn v4+ too
EXEMPT_API_KEYS = frozenset({*controller_api.VERSIONS, api_keys.WRITE_TXN_MARKERS})
#: AddPartitionsToTxn from this version on is a partition leader's (KIP-890), not a producer's
BROKER_ADD_PARTITIONS_TO_TXN_VERSION = 4
_I32 = struct.Struct(">i")


def user_of(principal: str) -> str:
    """The user a quota names for a principal: its name ("User:alice" is alice, as Kafka's
    KafkaPrincipal.getName)."""
    kind, sep, name = principal.partition(":")
    return name if sep else kind


# -- ZooKeeper's entity names ---------------------------------------------------------------

def _znode_part(name: EntityName) -> str:
    return DEFAULT_ZNODE if name is DEFAULT else sanitize(name)


def _entity_part(part: str) -> EntityName:
    return DEFAULT if part == DEFAULT_ZNODE else desanitize(part)


def znode_of(entity: QuotaEntity) -> tuple[str, str]:
    """(entity type, name) of the znode holding ``entity``'s quotas: ("users", "alice"),
    ("users", "alice/clients/app"), ("clients", "<default>") ..."""
    if entity.user is not None:
        user = _znode_part(entity.user)
        if entity.client_id is None:
            return USERS, user
        return USERS, f"{user}/{CLIENTS}/{_znode_part(entity.client_id)}"
    if entity.client_id is None:
        raise ValueError("a quota entity names a user, a client id or both")
    return CLIENTS, _znode_part(entity.client_id)


def entity_of_znode(entity_type: str, name: str) -> QuotaEntity | None:
    """The quota entity of /config/<entity_type>/<name>; None for a name that is none (written
    by hand, or not by Kafka's Sanitizer)."""
    parts = name.split("/")
    try:
        if entity_type == CLIENTS and len(parts) == 1:
            return QuotaEntity(None, _entity_part(parts[0]))
        if entity_type == USERS and len(parts) == 1:
            return QuotaEntity(_entity_part(parts[0]), None)
        if entity_type == USERS and len(parts) == 3 and parts[1] == CLIENTS:
            return QuotaEntity(_entity_part(parts[0]), _entity_part(parts[2]))
    except ValueError:
        pass
    return None


# -- one request ----------------------------------------------------------------------------

@dataclass(slots=True, eq=False)
class RequestQuota:
    """One request's quota bookkeeping, from its arrival (``ClientQuotas.begin``) to its response
    (``ClientQuotas.finish``): whose it is, the throttle times its byte rates gave, and how long
    it kept the event loop busy."""

    quotas: ClientQuotas
    api_key: int
    user: str
    client_id: str
    exempt: bool  # between brokers: no byte rate, request time metered as exempt
    produce_ms: int = 0
    fetch_ms: int = 0
    fetch_recorded: bool = False
    busy_ns: int = 0


_CURRENT: ContextVar[RequestQuota | None] = ContextVar("odradek_request_quota", default=None)


def enter(quota: RequestQuota) -> Token[RequestQuota | None]:
    """Make ``quota`` the current request's (KafkaApis, around its handler); ``leave`` undoes it."""
    return _CURRENT.set(quota)


def leave(token: Token[RequestQuota | None]) -> None:
    _CURRENT.reset(token)


def throttle_time_ms() -> int:
    """For a handler encoding its response: the throttle_time_ms it carries, the throttle the
    request's byte rate gave (Produce: known at once; Fetch: once ``record_fetch_response`` was
    called); 0 outside a request or without quotas."""
    quota = _CURRENT.get()
    return 0 if quota is None else max(quota.produce_ms, quota.fetch_ms)


def record_fetch_response(topics: Iterable[tuple[str, Iterable[Sequence[Any]]]]) -> int:
    """For the Fetch handler, just before it encodes a consumer's response (fast_paths'
    (topic, partitions) with each partition's records fifth): record its record bytes against
    the client's consumer_byte_rate and return the throttle time the response carries (0 for a
    follower, without quotas, or outside a request; then nothing is counted)."""
    quota = _CURRENT.get()
    if quota is None or quota.api_key != api_keys.FETCH or quota.exempt:
        return 0
    return quota.quotas.record_fetch(quota, sum(len(p[4]) for _, parts in topics for p in parts))


def fetch_response_limit() -> int | None:
    """For the Fetch handler: the most bytes a consumer's response should hold (Kafka caps a
    fetch's max_bytes at the quota's bound over the quota window, getMaxValueInQuotaWindow);
    None without a bound."""
    quota = _CURRENT.get()
    if quota is None or quota.api_key != api_keys.FETCH or quota.exempt:
        return None
    limit = quota.quotas.managers.fetch.max_value_in_quota_window(quota.user, quota.client_id)
    return None if limit == float("inf") else max(int(limit), 1)


# -- the broker's quotas --------------------------------------------------------------------

def _monotonic_ms() -> int:
    return int(time.monotonic() * 1000)


def response_size(response: bytes | list[Any] | None) -> int:
    """Bytes of an encoded response (bytes, or the buffers of a Fetch response)."""
    if response is None:
        return 0
    if isinstance(response, (bytes, bytearray, memoryview)):
        return len(response)
    return sum(len(part) for part in response)


class ClientQuotas:
    """A broker's client quotas: the three managers, their configs from ZooKeeper, and each
    request's records. ``clock``: milliseconds, monotonic (tests pass their own). On the event
    loop only, as the managers are."""

    def __init__(self, num_samples: int = NUM_QUOTA_SAMPLES_DEFAULT,
                 window_s: int = QUOTA_WINDOW_SIZE_SECONDS_DEFAULT,
                 clock: Callable[[], int] = _monotonic_ms) -> None:
        self.managers = ClientQuotaManagers(num_samples, window_s)
        self._clock = clock

    @property
    def enabled(self) -> bool:
        """Whether any client quota is set anywhere (if not, requests cost nothing here)."""
        m = self.managers
        return m.produce.enabled or m.fetch.enabled or m.request.enabled

    # -- the configs (DynamicConfigManager's listeners) --

    def on_user_config(self, name: str, config: Mapping[str, str]) -> None:
        """/config/users/<name>'s whole config (<name> may be <user>/clients/<client-id>); keys
        other than quotas (SCRAM credentials) are not ours."""
        self._update(USERS, name, config)

    def on_client_config(self, name: str, config: Mapping[str, str]) -> None:
        """/config/clients/<name>'s whole config."""
        self._update(CLIENTS, name, config)

    def _update(self, entity_type: str, name: str, config: Mapping[str, str]) -> None:
        entity = entity_of_znode(entity_type, name)
        if entity is None:
            log.warning("ignoring /config/%s/%s: not a quota entity Kafka's tools write", entity_type, name)
            return
        self.managers.configs.update_entity(entity, config)

    # -- one client's records, by hand (the request path below calls these) --

    def produce_throttle_ms(self, session: Session, client_id: str | None, request_bytes: int,
                            now_ms: int | None = None) -> int:
        """Record a Produce request's bytes against producer_byte_rate; its throttle time."""
        now = self._clock() if now_ms is None else now_ms
        return self.managers.produce.maybe_record_and_get_throttle_time_ms(
            user_of(session.principal), client_id or "", request_bytes, now)

    def fetch_throttle_ms(self, session: Session, client_id: str | None, response_bytes: int,
                          now_ms: int | None = None) -> int:
        """Record a consumer's Fetch response bytes against consumer_byte_rate; its throttle time."""
        now = self._clock() if now_ms is None else now_ms
        return self.managers.fetch.maybe_record_and_get_throttle_time_ms(
            user_of(session.principal), client_id or "", response_bytes, now)

    def request_throttle_ms(self, session: Session, client_id: str | None, busy_ns: int,
                            now_ms: int | None = None) -> int:
        """Record a request's time on the event loop against request_percentage; its throttle time."""
        now = self._clock() if now_ms is None else now_ms
        return self.managers.request.record_request_time(user_of(session.principal), client_id or "", busy_ns, now)

    # -- the request path (KafkaApis) --

    def begin(self, frame: bytes | memoryview, session: Session) -> RequestQuota | None:
        """A request arrives: whose it is, and a Produce's bytes recorded. None when no quota is
        set (nothing to do), or for a frame whose header cannot be read (KafkaApis closes)."""
        if not self.enabled:
            return None
        try:
            api_key, version, _correlation_id, client_id, header_end = parse_request_header(frame)
        except FramingError:
            return None
        exempt = api_key in EXEMPT_API_KEYS or (
            api_key == api_keys.ADD_PARTITIONS_TO_TXN and version >= BROKER_ADD_PARTITIONS_TO_TXN_VERSION)
        if api_key == api_keys.FETCH:
            exempt = _replica_id(frame, version, header_end) >= 0
        quota = RequestQuota(self, api_key, user_of(session.principal), client_id or "", exempt)
        if api_key == api_keys.PRODUCE:
            quota.produce_ms = self.managers.produce.maybe_record_and_get_throttle_time_ms(
                quota.user, quota.client_id, len(frame), self._clock())
        return quota

    def record_fetch(self, quota: RequestQuota, response_bytes: int) -> int:
        quota.fetch_recorded = True
        throttle = self.managers.fetch.maybe_record_and_get_throttle_time_ms(
            quota.user, quota.client_id, response_bytes, self._clock())
        quota.fetch_ms = max(quota.fetch_ms, throttle)
        return throttle

    def finish(self, quota: RequestQuota, response: bytes | list[Any] | None) -> int:
        """The request is answered (``response`` None: acks=0, or it failed): a consumer Fetch's
        bytes unless its handler recorded them, the request's time, and the throttle-time metric
        of the quota that throttles most. How long to mute the connection (0: not at all)."""
        now = self._clock()
        m = self.managers
        if quota.api_key == api_keys.FETCH and not quota.exempt and not quota.fetch_recorded and response is not None:
            quota.fetch_ms = m.fetch.maybe_record_and_get_throttle_time_ms(quota.user, quota.client_id,
                                                                           response_size(response), now)
        request_ms = 0
        if quota.exempt:
            m.request.record_exempt(quota.busy_ns, now)
        elif not (quota.api_key == api_keys.PRODUCE and response is None):  # acks=0: as Kafka, not metered
            request_ms = m.request.record_request_time(quota.user, quota.client_id, quota.busy_ns, now)
        manager, throttle = m.produce, quota.produce_ms
        if quota.fetch_ms > throttle:
            manager, throttle = m.fetch, quota.fetch_ms
        if request_ms > throttle:
            manager, throttle = m.request, request_ms
        if throttle > 0:
            manager.record_throttle_time(quota.user, quota.client_id, throttle, now)
            log.debug("%s of user %r, client id %r throttled %d ms", manager.quota_type.group, quota.user,
                      quota.client_id, throttle)
        return throttle

    def metrics(self, now_ms: int | None = None) -> list[QuotaMetric]:
        """Every meter's byte rate or request time and average throttle time, as Kafka names them."""
        now = self._clock() if now_ms is None else now_ms
        m = self.managers
        return [*m.produce.metrics(now), *m.fetch.metrics(now), *m.request.metrics(now)]


def _replica_id(frame: bytes | memoryview, version: int, header_end: int) -> int:
    """A Fetch request's replica_id (v4-v14: its first field; -1 for a consumer): followers are
    exempt from client quotas. -1 for a frame too short to say (its handler refuses it)."""
    try:
        if version >= 12:  # header v2: tagged fields after the client id
            header_end = parse_request_header(frame, flexible=True)[4]
        return int(_I32.unpack_from(frame, header_end)[0])
    except (FramingError, struct.error):
        return -1


# -- the request's time on the event loop ---------------------------------------------------

class _Metered:
    """Await ``awaitable`` and add the time each of its steps runs to ``quota.busy_ns``: the
    event loop's time spent on the request, not the time it waits."""

    __slots__ = ("_awaitable", "_quota")

    def __init__(self, awaitable: Awaitable[T], quota: RequestQuota) -> None:
        self._awaitable = awaitable
        self._quota = quota

    def __await__(self) -> Generator[Any, Any, Any]:
        steps = self._awaitable.__await__()
        value: Any = None
        error: BaseException | None = None
        while True:
            started = time.perf_counter_ns()
            try:
                yielded = steps.send(value) if error is None else steps.throw(error)
            except StopIteration as done:
                self._quota.busy_ns += time.perf_counter_ns() - started
                return done.value
            except BaseException:
                self._quota.busy_ns += time.perf_counter_ns() - started
                raise
            self._quota.busy_ns += time.perf_counter_ns() - started
            try:
                value, error = (yield yielded), None
            except GeneratorExit:
                close = getattr(steps, "close", None)
                if close is not None:
                    close()
                raise
            except BaseException as exc:  # noqa: BLE001 - passed on to the awaited (a cancellation)
                value, error = None, exc


def metered(awaitable: Awaitable[T], quota: RequestQuota) -> Awaitable[T]:
    """``awaitable``, its steps' time counted as the request's (request_percentage)."""
    return _Metered(awaitable, quota)
