"""Controlled shutdown, the broker's half (Kafka's KafkaServer.controlledShutdown).

Before a broker stops it asks the controller to move leadership away (seed 000 shutdownBroker):
its partitions change leader while it still answers, instead of going leaderless for a failover
after it is gone. The controller answers with the replicated partitions the broker still leads;
the broker asks again after a backoff while some of them have another live in-sync replica
that could take over, and after the last attempt stops anyway, as Kafka does.
"""
from __future__ import annotations

import asyncio
import itertools
import logging
import socket
from typing import Callable

from odradek.controller.controller_channel import exchange
from odradek.metadata import TopicPartition
from odradek.protocol import controller_api
from odradek.protocol.controller_api import ControlledShutdownRequest, ControlledShutdownResponse
from odradek.protocol.errors import ErrorCode
from odradek.zk.client import KafkaZkClient

log = logging.getLogger("odradek.broker.controlled_shutdown")

_correlation_ids = itertools.count(1)


class ControlledShutdownError(Exception):
    """No answer from a controller, or an error code instead of one."""


def request_controlled_shutdown(zk: KafkaZkClient, broker_id: int, broker_epoch: int,
                                timeout_s: float) -> tuple[TopicPartition, ...]:
    """One ControlledShutdown round trip to the current controller (blocking): the replicated
    partitions this broker still leads."""
    controller_id = zk.get_controller_id()
    controller = zk.get_live_brokers().get(controller_id) if controller_id is not None else None
    if controller is None:
        raise ControlledShutdownError(f"no live controller (controller id {controller_id})")
    correlation_id = next(_correlation_ids)
    frame = controller_api.encode_request(ControlledShutdownRequest(broker_id, broker_epoch),
                                          correlation_id, f"broker-{broker_id}")
    api_key = controller_api.API_CONTROLLED_SHUTDOWN
    with socket.create_connection((controller.host, controller.port), timeout=timeout_s) as sock:
        body = exchange(sock, frame, correlation_id, api_key, controller_api.VERSIONS[api_key])
    response = controller_api.decode_response(api_key, controller_api.VERSIONS[api_key], body)
    assert isinstance(response, ControlledShutdownResponse)
    if response.error_code != ErrorCode.NONE:
        raise ControlledShutdownError(f"controller {controller_id} answered "
                                      f"{ErrorCode(response.error_code).name}")
    return response.remaining_partitions


async def controlled_shutdown(zk: KafkaZkClient, broker_id: int, broker_epoch: int,
                              can_move: Callable[[tuple[TopicPartition, ...]], bool],
                              max_retries: int = 3, backoff_s: float = 5.0,
                              timeout_s: float = 10.0) -> bool:
    """Ask until the controller reports no partition left to move; True on success.

    ``can_move(remaining)``: whether some remaining partition has another live in-sync replica.
    When none has (the last broker of a cluster going down), asking again cannot help, so the
    broker stops at once rather than after every retry's backoff."""
    for attempt in range(1, max_retries + 1):
        try:
            remaining = await asyncio.to_thread(request_controlled_shutdown, zk, broker_id,
                                                broker_epoch, timeout_s)
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
            await asyncio.sleep(backoff_s)
    log.warning("controlled shutdown failed after %d attempts; stopping anyway", max_retries)
    return False
