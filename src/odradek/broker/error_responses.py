"""The answer to a request whose handler failed (Kafka's KafkaApis.handleError and each
request's AbstractRequest.getErrorResponse).

A handler that raises something unexpected must not take the connection with it: a Kafka
client pipelines requests, and closing the connection drops every response queued behind the
failed one, so one bug in one handler would fail the unrelated requests in flight with it. The
failed request gets the error in every place its response has one, for the entries the request
named (each partition of a Produce, each topic of a CreateTopics), as Kafka answers it; the
connection goes on. Only a response with no place for the error (a Metadata request for every
topic, DescribeLogDirs before v3) leaves closing as the answer: Kafka's empty answer there
would read as success.
"""
from __future__ import annotations

import datetime
import types
import typing
from typing import Any, Callable

from odradek.protocol import kio_util

Body = dict[str, Any]


def error_response(api_key: int, version: int, correlation_id: int, request: Any,
                   error: int, message: str | None = None) -> kio_util.EncodedResponse | None:
    """The encoded response carrying ``error`` for every entry ``request`` named; None when the
    response has no place for it (closing the connection is then the answer)."""
    cls = kio_util.response_class(api_key, version)
    shape = _SHAPES.get(api_key)
    if shape is not None:
        body = shape(request, int(error), message)
    elif _has_field(cls, "error_code"):
        body = {"error_code": int(error), "error_message": message}
    else:
        return None
    response = kio_util.encode_response(api_key, version, correlation_id, complete(cls, body))
    # an answer without the error anywhere (a Metadata request for every topic, DescribeLogDirs
    # before v3) would tell the client the request succeeded with nothing to say
    return response if error in response.error_codes else None


def complete(cls: type, body: Body) -> Body:
    """``body`` with every field the schema requires and it lacks given its empty value (-1 for
    numbers: offsets, epochs, ids; nothing for collections and strings), nested entities too."""
    hints = typing.get_type_hints(cls)
    out = dict(body)
    for name, nested, has_default in kio_util._field_plan(cls):
        value = out.get(name)
        if nested is not None and value is not None:
            if isinstance(value, (list, tuple)):
                out[name] = [complete(nested, v) if isinstance(v, dict) else v for v in value]
            elif isinstance(value, dict):
                out[name] = complete(nested, value)
            continue
        if name not in out and not has_default:
            out[name] = _empty(hints[name], nested)
    return out


def _empty(hint: Any, nested: Any) -> Any:
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType) and type(None) in typing.get_args(hint):
        return None
    if origin is tuple:
        return ()
    if nested is not None:
        return complete(nested, {})
    if isinstance(hint, type) and issubclass(hint, datetime.timedelta):
        return 0
    if isinstance(hint, type) and issubclass(hint, datetime.datetime):
        return datetime.datetime.fromtimestamp(0, datetime.timezone.utc)
    if isinstance(hint, type) and issubclass(hint, bool):
        return False
    if isinstance(hint, type) and issubclass(hint, (str, bytes)):
        return hint()
    return -1


def _has_field(cls: type, name: str) -> bool:
    return any(field == name for field, _nested, _default in kio_util._field_plan(cls))


def _topics(request: Any, error: int, *, topics: str = "topics", name: str = "name",
            partitions: str = "partitions", index: str = "partition_index",
            out_partitions: str | None = None) -> list[Body]:
    """Request topics[name, partitions[index]] mirrored into the response's, each with error."""
    return [{name: getattr(t, name),
             out_partitions or partitions: [{index: getattr(p, index), "error_code": error}
                                            for p in getattr(t, partitions) or ()]}
            for t in getattr(request, topics, None) or ()]


def _produce(request: Any, error: int, _message: str | None) -> Body:
    return {"responses": _topics(request, error, topics="topic_data", partitions="partition_data", index="index",
                                 out_partitions="partition_responses")}


def _fetch(request: Any, error: int, _message: str | None) -> Body:
    """Kafka: the top-level code (v7+) and, before v13, every partition's too."""
    if type(request).__version__ >= 13:
        return {"error_code": error, "session_id": 0, "responses": []}
    return {"error_code": error, "session_id": 0, "responses": [
        {"topic": t.topic, "partitions": [{"partition_index": p.partition, "error_code": error, "records": None}
                                          for p in t.partitions]} for t in request.topics]}


def _metadata(request: Any, error: int, _message: str | None) -> Body:
    return {"topics": [{"name": t.name, "topic_id": getattr(t, "topic_id", None), "error_code": error}
                       for t in request.topics or ()]}


def _offset_fetch(request: Any, error: int, _message: str | None) -> Body:
    if getattr(request, "groups", None) is not None:
        return {"groups": [{"group_id": g.group_id, "error_code": error} for g in request.groups]}
    return {"error_code": error, "topics": [
        {"name": t.name, "partitions": [{"partition_index": i, "error_code": error} for i in t.partition_indexes]}
        for t in request.topics or ()]}


def _find_coordinator(request: Any, error: int, message: str | None) -> Body:
    keys = getattr(request, "coordinator_keys", None)
    if keys:
        return {"coordinators": [{"key": k, "error_code": error, "error_message": message} for k in keys]}
    return {"error_code": error, "error_message": message}


def _add_partitions_to_txn(request: Any, error: int, _message: str | None) -> Body:
    if getattr(request, "transactions", None) is not None:  # v4+ (brokers' KIP-890 checks)
        return {"error_code": error}
    return {"results_by_topic_v3_and_below": [
        {"name": t.name, "results_by_partition": [{"partition_index": p, "partition_error_code": error}
                                                  for p in t.partitions]} for t in request.v3_and_below_topics]}


def _write_txn_markers(request: Any, error: int, _message: str | None) -> Body:
    return {"markers": [{"producer_id": m.producer_id, "topics": [
        {"name": t.name, "partitions": [{"partition_index": p, "error_code": error} for p in t.partition_indexes]}
        for t in m.topics]} for m in request.markers]}


def _elect_leaders(request: Any, error: int, message: str | None) -> Body:
    return {"error_code": error, "replica_election_results": [
        {"topic": t.topic, "partition_result": [{"partition_id": p, "error_code": error, "error_message": message}
                                                for p in t.partitions]}
        for t in request.topic_partitions or ()]}


def _resources(field: str) -> Callable[[Any, int, str | None], Body]:
    def shape(request: Any, error: int, message: str | None) -> Body:
        return {field: [{"error_code": error, "error_message": message, "resource_type": r.resource_type,
                         "resource_name": r.resource_name} for r in request.resources]}
    return shape


def _named(field: str, request_field: str, key: str, name_of: Callable[[Any], Any]
           ) -> Callable[[Any, int, str | None], Body]:
    """One result per entry of the request's ``request_field``, named ``key``."""
    def shape(request: Any, error: int, message: str | None) -> Body:
        return {field: [{key: name_of(entry), "error_code": error, "error_message": message}
                        for entry in getattr(request, request_field) or ()]}
    return shape


_SHAPES: dict[int, Callable[[Any, int, str | None], Body]] = {
    0: _produce,
    1: _fetch,
    2: lambda r, e, _m: {"topics": _topics(r, e)},
    3: _metadata,
    8: lambda r, e, _m: {"topics": _topics(r, e)},
    9: _offset_fetch,
    10: _find_coordinator,
    15: _named("groups", "groups", "group_id", lambda g: g),
    19: _named("topics", "topics", "name", lambda t: t.name),
    20: lambda r, e, m: {"responses": [{"name": getattr(t, "name", t), "topic_id": getattr(t, "topic_id", None),
                                        "error_code": e, "error_message": m}
                                       for t in (getattr(r, "topics", None) or getattr(r, "topic_names", None) or ())]},
    21: lambda r, e, _m: {"topics": _topics(r, e)},
    23: lambda r, e, _m: {"topics": _topics(r, e, name="topic", index="partition")},
    24: _add_partitions_to_txn,
    27: _write_txn_markers,
    28: lambda r, e, _m: {"topics": _topics(r, e)},
    30: lambda r, e, m: {"results": [{"error_code": e, "error_message": m} for _ in r.creations]},
    31: lambda r, e, m: {"filter_results": [{"error_code": e, "error_message": m, "matching_acls": []}
                                            for _ in r.filters]},
    32: _resources("results"),
    33: _resources("responses"),
    37: _named("results", "topics", "name", lambda t: t.name),
    42: _named("results", "groups_names", "group_id", lambda g: g),
    43: _elect_leaders,
    44: _resources("responses"),
    45: lambda r, e, m: {"error_code": e, "error_message": m, "responses": [
        {"name": t.name, "partitions": [{"partition_index": p.partition_index, "error_code": e, "error_message": m}
                                        for p in t.partitions]} for t in r.topics]},
    49: lambda r, e, m: {"entries": [{"error_code": e, "error_message": m,
                                      "entity": [{"entity_type": c.entity_type, "entity_name": c.entity_name}
                                                 for c in entry.entity]} for entry in r.entries]},
    50: lambda r, e, m: {"error_code": e, "error_message": m,
                         "results": [{"user": n, "error_code": e, "error_message": m}
                                     for n in dict.fromkeys(u.name for u in r.users or ())]},
    51: lambda r, e, m: {"results": [{"user": u, "error_code": e, "error_message": m}
                                     for u in sorted({x.name for x in (*r.deletions, *r.upsertions)})]},
    61: lambda r, e, _m: {"topics": [{"name": t.name, "partitions": [{"partition_index": p, "error_code": e}
                                                                     for p in t.partition_indexes]}
                                     for t in r.topics]},
    65: lambda r, e, _m: {"transaction_states": [{"transactional_id": t, "error_code": e}
                                                 for t in r.transactional_ids]},
}
