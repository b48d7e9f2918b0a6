"""Controlled shutdown, the broker's half (Kafka's KafkaServer.controlledShutdown).

Before a broker stops it asks the controller to move leadership away (Kafka's
KafkaController.shutdownBroker): its partitions change leader while it still answers, instead of
going leaderless for a failover after it is gone. The controller answers with the replicated
partitions the broker still leads; the broker asks again after a backoff while some of them have
another live in-sync replica that could take over, and after the last attempt stops anyway, as
Kafka does.

The whole of it is bounded by Kafka's controlled.shutdown.max.retries x
controlled.shutdown.retry.backoff.ms (3 x 5 s): every attempt, the controller lookup included,
gets only the time left, so a broker told to stop while ZooKeeper is unreachable still stops.
Without the bound it would sit in the first attempt's ZooKeeper read (kazoo queues requests
until it reconnects) for as long as ZooKeeper stays down, and `odradek down` would have to
kill it. The controller is found as KafkaServer.controlledShutdown
finds it, in the metadata cache (the controller's own UpdateMetadata named it), so ZooKeeper is
read only when the cache knows none.
"""
from __future__ import annotations

import asyncio
import itertools
import logging
import time
from typing import Callable

from odradek.common.metadata import BrokerInfo, TopicPartition
from odradek.controller.controller_channel import exchange
from odradek.protocol import controller_api
from odradek.protocol.controller_api import ControlledShutdownRequest, ControlledShutdownResponse
from odradek.protocol.errors import ErrorCode, error_name
from odradek.security.client_security import PLAINTEXT, ClientSecurity, connect_blocking
from odradek.zk.client import KafkaZkClient

log = logging.getLogger("odradek.broker.controlled_shutdown")

_correlation_ids = itertools.count(1)


class ControlledShutdownError(Exception):
    """No answer from a controller, or an error code instead of one."""


def request_controlled_shutdown(zk: KafkaZkClient, broker_id: int, broker_epoch: int, timeout_s: float,
                                cached_controller: BrokerInfo | None = None,
                                security: ClientSecurity = PLAINTEXT) -> tuple[TopicPartition, ...]:
    """One ControlledShutdown round trip to the controller (blocking, at most about `timeout_s`):
    the replicated partitions this broker still leads. `cached_controller`: the controller the
    metadata cache names; without it ZooKeeper is asked."""
    deadline = time.monotonic() + timeout_s
    controller = cached_controller or zk.get_controller_info(timeout_s)
    if controller is None:
        raise ControlledShutdownError("no live controller")
    correlation_id = next(_correlation_ids)
    frame = controller_api.encode_request(ControlledShutdownRequest(broker_id, broker_epoch),
                                          correlation_id, f"broker-{broker_id}")
    api_key = controller_api.API_CONTROLLED_SHUTDOWN
    left = deadline - time.monotonic()
    if left <= 0:
        raise ControlledShutdownError(f"no answer within {timeout_s:g} s")
    with connect_blocking(controller.host, controller.port, security, left, f"broker-{broker_id}") as sock:
        body = exchange(sock, frame, correlation_id, api_key, controller_api.VERSIONS[api_key])
    response = controller_api.decode_response(api_key, controller_api.VERSIONS[api_key], body)
    assert isinstance(response, ControlledShutdownResponse)
    if response.error_code != ErrorCode.NONE:
        raise ControlledShutdownError(f"controller {controller.id} answered "
                                      f"{error_name(response.error_code)}")
    return response.remaining_partitions


async def controlled_shutdown(zk: KafkaZkClient, broker_id: int, broker_epoch: int,
                              can_move: Callable[[tuple[TopicPartition, ...]], bool],
                              max_retries: int = 3, backoff_s: float = 5.0,
                              timeout_s: float = 10.0,
                              cached_controller: Callable[[], BrokerInfo | None] = lambda: None,
                              security: ClientSecurity = PLAINTEXT) -> bool:
    """Ask until the controller reports no partition left to move; True on success. Gives up
    after ``max_retries`` attempts or ``max_retries x backoff_s`` seconds, whichever comes first
    (each attempt gets at most ``timeout_s`` of the time left).

    ``can_move(remaining)``: whether some remaining partition has another live in-sync replica.
    When none has (the last broker of a cluster going down), asking again cannot help, so the
    broker stops at once rather than after every retry's backoff. ``cached_controller()``: the
    controller as the metadata cache knows it, or None. ``security``: the inter-broker listener's."""
    deadline = time.monotonic() + max_retries * backoff_s
    for attempt in range(1, max_retries + 1):
        left = deadline - time.monotonic()
        if left <= 0:
            log.warning("controlled shutdown gave up after %g s (%d of %d attempts made); stopping anyway",
                        max_retries * backoff_s, attempt - 1, max_retries)
            return False
        try:
            remaining = await asyncio.to_thread(request_controlled_shutdown, zk, broker_id, broker_epoch,
                                                min(timeout_s, left), cached_controller(), security)
        except Exception as exc:  # noqa: BLE001 - ZooKeeper or network trouble: the stop must go on
            log.warning("controlled shutdown attempt %d of %d failed: %r", attempt, max_retries, exc)
        else:
            if not remaining:
                log.info("controlled shutdown succeeded: leadership moved to other brokers")
                return True
            if not can_move(remaining):
                log.warning("controlled shutdown: %d partitions have no other live in-sync replica "
                            "to lead them; stopping anyway", len(remaining))
                return False
            log.warning("controlled shutdown attempt %d of %d: still leader of %d partitions",
                        attempt, max_retries, len(remaining))
        if attempt < max_retries:
            await asyncio.sleep(max(0.0, min(backoff_s, deadline - time.monotonic())))
    log.warning("controlled shutdown failed after %d attempts; stopping anyway", max_retries)
    return False
