"""InitProducerId (Kafka's KafkaApis.handleInitProducerIdRequest) for idempotent producers: a
new producer id from this broker's block (producer_id_manager.py), or the next epoch of the
id a producer already has. A transactional producer's (with a transactional.id) is its
transaction coordinator's (txn_apis.py).

With an authorizer, as Kafka's handleInitProducerIdRequest (a gate KafkaApis runs first): WRITE
on the transactional id when there is one (else TRANSACTIONAL_ID_AUTHORIZATION_FAILED); an
idempotent producer needs IDEMPOTENT_WRITE on the cluster, or WRITE on any topic (KIP-679), else
CLUSTER_AUTHORIZATION_FAILED."""
from __future__ import annotations

from typing import Any

from odradek.broker import api_keys
from odradek.broker.context import BrokerContext
from odradek.broker.request_authorization import wire
from odradek.broker.txn_apis import init_transactional_producer_id
from odradek.protocol import kio_util
from odradek.security.acl import CLUSTER_NAME, AclOperation, ResourceType

_INIT_PRODUCER_ID = wire(api_keys.INIT_PRODUCER_ID)
_INIT_PRODUCER_ID.requires(_INIT_PRODUCER_ID.check(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID),
                           lambda req, _version: req.transactional_id)
_INIT_PRODUCER_ID.requires(_INIT_PRODUCER_ID.check(AclOperation.IDEMPOTENT_WRITE, ResourceType.CLUSTER),
                           lambda req, _version: CLUSTER_NAME if req.transactional_id is None else None)


async def init_producer_id(ctx: BrokerContext, header: Any, req: Any, version: int) -> bytes:
    if req.transactional_id is not None:
        return await init_transactional_producer_id(ctx, header, req, version)
    body: dict[str, Any] = {"throttle_time": 0, "error_code": 0, "producer_id": -1, "producer_epoch": -1}
    if getattr(req, "producer_id", -1) >= 0 and req.producer_epoch < 0x7FFF - 1:
        body.update(producer_id=req.producer_id, producer_epoch=req.producer_epoch + 1)
    elif getattr(req, "producer_id", -1) >= 0:
        # the epoch is exhausted: a fresh id, as Kafka does, rather than wrapping to a fenced 0
        body.update(producer_id=await ctx.next_producer_id(), producer_epoch=0)
    else:
        body.update(producer_id=await ctx.next_producer_id(), producer_epoch=0)
    return kio_util.encode_response(api_keys.INIT_PRODUCER_ID, version, header.correlation_id, body)
