"""Glue between plain Python values and kio's per-version entity classes.

kio generates one frozen dataclass per API version, each with its own nested classes and strict
field types (ErrorCode, timedelta). Handlers describe a response once as nested dicts and build it
for whichever version the client asked for; fields a version lacks are dropped, fields it has that
the dict omits take their schema default.
"""
from __future__ import annotations

import datetime
import io
import struct
import types
import typing
from dataclasses import MISSING, fields, is_dataclass
from functools import cache
from typing import Any

from kio.index import load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer
from kio.static.protocol import RequestPayload, ResponsePayload

from odradek.protocol import wire_bounds


@cache
def request_class(api_key: int, version: int) -> type[RequestPayload]:
    return load_request_schema(api_key, version)


@cache
def response_class(api_key: int, version: int) -> type[ResponsePayload]:
    return load_response_schema(api_key, version)


@cache
def _reader(cls: type) -> Any:
    return entity_reader(cls)


@cache
def _writer(cls: type) -> Any:
    return entity_writer(cls)


@cache
def _field_plan(cls: type) -> tuple[tuple[str, Any, bool], ...]:
    """(name, nested entity class or None, has_default) per field of an entity class."""
    hints = typing.get_type_hints(cls)
    plan = []
    for f in fields(cls):
        plan.append((f.name, _nested_entity(hints[f.name]), f.default is not MISSING))
    return tuple(plan)


def _nested_entity(tp: Any) -> Any:
    """The entity class inside `X`, `tuple[X, ...]` or `X | None`, if X is an entity."""
    origin = typing.get_origin(tp)
    if origin in (tuple, typing.Union, types.UnionType):
        for arg in typing.get_args(tp):
            found = _nested_entity(arg)
            if found is not None:
                return found
        return None
    return tp if is_dataclass(tp) else None


def _convert(hint_cls: type, name: str, value: Any) -> Any:
    if name == "error_code" or name.endswith("_error_code"):
        return ErrorCode(int(value))
    if name in ("throttle_time", "max_wait", "timeout", "timeout_ms", "session_timeout",
                "rebalance_timeout", "transaction_timeout") and isinstance(value, int):
        return datetime.timedelta(milliseconds=value)
    return value


def build(cls: type, data: dict[str, Any], codes: list[int] | None = None) -> Any:
    """Build entity `cls` from nested dicts, keeping only the fields this version has; every
    error code it sets is appended to ``codes`` when given."""
    kwargs: dict[str, Any] = {}
    for name, nested, has_default in _field_plan(cls):
        if name not in data:
            if not has_default:
                raise KeyError(f"{cls.__qualname__} v{getattr(cls, '__version__')} needs field {name!r}")
            continue
        value = data[name]
        if nested is not None and value is not None:
            if isinstance(value, (list, tuple)):
                value = tuple(build(nested, v, codes) if isinstance(v, dict) else v for v in value)
            elif isinstance(value, dict):
                value = build(nested, value, codes)
        else:
            value = _convert(cls, name, value)
            if codes is not None and type(value) is ErrorCode:
                codes.append(value.value)
        kwargs[name] = value
    return cls(**kwargs)


class EncodedResponse(bytes):
    """A response as encoded for the client, with the error codes it carries (Kafka's
    AbstractResponse.errorCounts: the top-level one and every topic's and partition's), so the
    broker's request error counts need not read the response back."""

    error_codes: list[int]
    #: the traceback of the handler failure this response answers, if it answers one (for the
    #: fuzzer, which must still see a handler's bug that the client only sees as an error code)
    handler_failure: str | None = None


def decode_request(frame: memoryview | bytes) -> tuple[Any, Any]:
    """Decode a whole request frame (without size prefix) into (header, body entity).

    Raises kio's errors for unknown keys/versions and ValueError/struct.error for garbage.
    Lengths and counts are checked against the frame first (wire_bounds.py): kio's reader
    trusts them when it allocates, and a failed allocation aborts the process. Tagged fields
    the schema does not know are cut out there too, as Kafka's readers skip them.
    """
    api_key, version = struct.unpack_from(">hh", frame, 0)
    cls = request_class(api_key, version)
    header_cls: type = cls.__header_schema__
    frame, body_at = wire_bounds.checked(header_cls, frame, 0)
    frame, _end = wire_bounds.checked(cls, frame, body_at)
    header, offset = _reader(header_cls)(frame, 0)
    body, _size = _reader(cls)(frame, offset)
    return header, body


def encode_response(api_key: int, version: int, correlation_id: int, body: dict[str, Any]) -> EncodedResponse:
    """Encode a response (with its 4-byte size prefix) from nested dicts."""
    cls = response_class(api_key, version)
    codes: list[int] = []
    encoded = EncodedResponse(encode_entity(cls.__header_schema__, {"correlation_id": correlation_id},
                                            build(cls, body, codes)))
    encoded.error_codes = codes
    return encoded


def encode_entity(header_cls: type, header: dict[str, Any], entity: Any) -> bytes:
    """Size prefix + header + body, as one bytes object."""
    buf = io.BytesIO()
    buf.write(b"\0\0\0\0")
    _writer(header_cls)(buf, build(header_cls, header))
    entity_cls: type = type(entity)
    _writer(entity_cls)(buf, entity)
    out = buf.getbuffer()
    struct.pack_into(">i", out, 0, len(out) - 4)
    del out
    return buf.getvalue()


def encode_request(api_key: int, version: int, correlation_id: int, client_id: str,
                   body: dict[str, Any]) -> bytes:
    """Encode a request (with size prefix); used by the follower fetcher and tests."""
    cls = request_class(api_key, version)
    header = {"request_api_key": api_key, "request_api_version": version,
              "correlation_id": correlation_id, "client_id": client_id}
    return encode_entity(cls.__header_schema__, header, build(cls, body))


def decode_response(api_key: int, version: int, frame: memoryview | bytes) -> tuple[int, Any]:
    """Decode a response frame (without size prefix) into (correlation_id, body entity)."""
    cls = response_class(api_key, version)
    header_cls: type = cls.__header_schema__
    header, offset = _reader(header_cls)(frame, 0)
    body, _size = _reader(cls)(frame, offset)
    return header.correlation_id, body
