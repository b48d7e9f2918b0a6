"""A failed handler's answer (broker/error_responses.py): for every API the broker serves, at
every version it speaks (the fuzzer's templates where they have the API, else a request naming
one of everything), a response that decodes, carries the request's correlation id, and has
UNKNOWN_SERVER_ERROR for each entry the request named."""
from __future__ import annotations

import datetime
import types
import typing
from dataclasses import fields, is_dataclass
from typing import Any

import pytest

from odradek.broker import api_keys
from odradek.broker.error_responses import error_response
from odradek.fuzz import templates
from odradek.protocol import kio_util
from odradek.protocol.errors import ErrorCode

TOPOLOGY = templates.Topology(broker_id=1, host="127.0.0.1", port=9092, controller_epoch=3, broker_epoch=7)
SERVED = sorted(k for k in api_keys.VERSIONS if k not in api_keys.ORDERED_DELIVERY_VERSIONS)


def _is_tuple(hint: Any) -> bool:
    return typing.get_origin(hint) is tuple or any(typing.get_origin(a) is tuple for a in typing.get_args(hint))


def _sample(cls: type) -> dict[str, Any]:
    """A request body naming one of everything: one entry in each list, "x" for strings."""
    hints = typing.get_type_hints(cls)
    body: dict[str, Any] = {}
    for name, nested, _default in kio_util._field_plan(cls):
        hint = hints[name]
        args = typing.get_args(hint)
        if nested is not None:
            body[name] = [_sample(nested)] if _is_tuple(hint) else _sample(nested)
        elif typing.get_origin(hint) in (typing.Union, types.UnionType) and type(None) in args:
            body[name] = None
        elif typing.get_origin(hint) is tuple:
            body[name] = ["x"] if args and isinstance(args[0], type) and issubclass(args[0], str) else [0]
        elif isinstance(hint, type) and issubclass(hint, datetime.timedelta):
            body[name] = datetime.timedelta(0)
        elif isinstance(hint, type) and issubclass(hint, str):
            body[name] = "x"
        elif isinstance(hint, type) and issubclass(hint, bytes):
            body[name] = b""
        else:
            body[name] = 0
    return body


def _cases() -> list[templates.Template]:
    cases = [t for t in templates.build(TOPOLOGY)
             if t.api_key in SERVED and api_keys.supported(t.api_key, t.version)]
    covered = {(t.api_key, t.version) for t in cases}
    for api_key in SERVED:
        lo, hi = api_keys.VERSIONS[api_key]
        for version in range(lo, hi + 1):
            if (api_key, version) not in covered:
                body = _sample(kio_util.request_class(api_key, version))
                frame = kio_util.encode_request(api_key, version, 5, "test", body)
                cases.append(templates.Template("sample", api_key, version, frame[4:]))
    return cases


TEMPLATES = _cases()
#: the response entries that stand for one partition of the request, per API
PARTITION_ENTRIES = {0: "partition_responses", 2: "partitions", 8: "partitions", 21: "partitions",
                     23: "partitions", 28: "partitions"}


def _codes(entity: Any) -> list[int]:
    """Every error code in a decoded response, nested entries included."""
    out = []
    for f in fields(entity):
        value = getattr(entity, f.name)
        if f.name.endswith("error_code"):
            out.append(int(value))
        elif is_dataclass(value):
            out += _codes(value)
        elif isinstance(value, tuple):
            out += [c for v in value if is_dataclass(v) for c in _codes(v)]
    return out


def _request_partitions(request: Any) -> int:
    """How many partitions a request names (topics[partitions] or topic_data[partition_data])."""
    topics = getattr(request, "topics", None) or getattr(request, "topic_data", None) or ()
    return sum(len(getattr(t, "partitions", None) or getattr(t, "partition_data", None) or ()) for t in topics)


def test_every_version_of_every_api_served_is_a_case() -> None:
    assert {(t.api_key, t.version) for t in TEMPLATES} == {
        (k, v) for k in SERVED for v in range(api_keys.VERSIONS[k][0], api_keys.VERSIONS[k][1] + 1)}


@pytest.mark.parametrize("template", TEMPLATES, ids=lambda t: f"{t.name}-v{t.version}")
def test_a_failed_request_is_answered_with_the_error_in_every_entry(template: templates.Template) -> None:
    header, request = kio_util.decode_request(template.payload)
    response = error_response(template.api_key, template.version, header.correlation_id, request,
                              ErrorCode.UNKNOWN_SERVER_ERROR, "RuntimeError: planted")
    if template.api_key == api_keys.METADATA and not request.topics:
        assert response is None  # every topic: nowhere to say it
        return
    if template.api_key == 35 and template.version < 3:  # DescribeLogDirs: no error field before v3
        assert response is None
        return
    if template.api_key == 43 and template.version == 0 and not request.topic_partitions:
        assert response is None  # ElectLeaders v0 for every partition: no top-level error yet
        return
    assert response is not None, "the response has a place for the error"
    correlation_id, body = kio_util.decode_response(template.api_key, template.version, response[4:])
    assert correlation_id == header.correlation_id
    codes = _codes(body)
    assert ErrorCode.UNKNOWN_SERVER_ERROR in codes and set(codes) <= {ErrorCode.UNKNOWN_SERVER_ERROR, 0}, codes
    entries = PARTITION_ENTRIES.get(template.api_key)
    if entries is not None:
        answered = sum(len(getattr(t, entries)) for t in (getattr(body, "responses", None) or body.topics))
        assert answered == _request_partitions(request)
