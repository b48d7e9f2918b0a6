"""Fuzz cases: byte streams sent on one connection, each made of one or more frames.

Every case comes from its own ``random.Random`` (keyed by the run's stream number and the case
index), so any case can be made again on its own and a run is the same every time. The kinds:

- ``valid``: a template as is (new correlation id).
- ``mutated``: a template after 1-4 stacked byte mutations (bit flips, random bytes,
  boundary integers and varints at any offset, deleted, duplicated or inserted chunks,
  truncation, appended garbage, another template's tail spliced on).
- ``truncated``: a template cut short, the size prefix telling the truth.
- ``bad-length``: a template behind a wrong size prefix: shorter (the rest reads as the next
  frame), longer (the frame never completes), zero, negative, or over the broker's maximum.
- ``sizes``: the length or count in front of a string the template carries (topic name, client
  id) set to a boundary value: -1, 0, off by one, 2^15-1, 2^31-1, as int16, int32 or varint.
- ``utf8``: such a string replaced by invalid UTF-8 of the same length.
- ``batch``: a Produce template's record batch with a header field or record byte changed and
  the CRC made right again, so the broker's batch checks, not the CRC, have to catch it.
- ``structured``: a well-formed request with adversarial field values (structured.py).
- ``random``: a header naming a real API and version followed by random bytes, or random bytes.
- ``pipelined``: two to four of the above on one connection, delivered in random pieces.
"""
from __future__ import annotations

import random
import struct
from dataclasses import dataclass

import crc32c

from odradek.broker import api_keys
from odradek.fuzz import structured, templates
from odradek.protocol import controller_api

_INTERESTING = [0, 1, 2, -1, -2, 0x7F, 0x80, 0xFF, 0x7FFF, 0x8000, 0xFFFF, 0x10000, 0x7FFFFFFF, 0x80000000,
                0xFFFFFFFF, 0x7FFFFFFFFFFFFFFF, 0x8000000000000000, 1 << 20]
_VARINTS = [b"\x00", b"\x01", b"\x02", b"\x7f", b"\x80\x01", b"\xff\x7f", b"\xff\xff\x03", b"\xff\xff\xff\xff\x0f",
            b"\xff\xff\xff\xff\xff\x01", b"\x80", b"\xff"]
_INVALID_UTF8 = [b"\xff", b"\xc0\x80", b"\xed\xa0\x80", b"\xe2\x82", b"\xf8\x88\x80\x80\x80", b"\x80", b"\xf4\x90\x80\x80"]
# batch header fields: (offset, struct format) of records.py's layout, the CRC (17) left out
_BATCH_FIELDS = [(0, ">q"), (8, ">i"), (12, ">i"), (16, ">b"), (21, ">h"), (23, ">i"), (27, ">q"), (35, ">q"),
                 (43, ">q"), (51, ">h"), (53, ">i"), (57, ">i")]

KINDS = ("valid", "mutated", "truncated", "bad-length", "sizes", "utf8", "batch", "structured", "random",
         "pipelined")
_WEIGHTS = (4, 36, 6, 6, 10, 6, 8, 12, 6, 6)


@dataclass
class Case:
    kind: str
    stream: bytes
    #: how many frames the case was made of (what the run counts as generated frames)
    frames: int
    #: offsets at which the stream is cut into separate reads
    cuts: tuple[int, ...] = ()


class CaseMaker:
    def __init__(self, topology: templates.Topology, max_frame_bytes: int, stream_number: int) -> None:
        self.topology = topology
        self.max_frame_bytes = max_frame_bytes
        self.stream_number = stream_number
        self.templates = templates.build(topology)
        by_api: dict[int, dict[int, list[templates.Template]]] = {}
        for t in self.templates:
            by_api.setdefault(t.api_key, {}).setdefault(t.version, []).append(t)
        # every API equally often, then every version of it equally often
        self._by_api = [(key, sorted(versions.items())) for key, versions in sorted(by_api.items())]
        self._produce = [t for t in self.templates if t.api_key == api_keys.PRODUCE and _batch_span(t.payload)]
        self._strings = [s.encode() for s in topology.strings]

    def case(self, index: int) -> Case:
        rng = random.Random(self.stream_number * 1_000_000_007 + index)
        kind = rng.choices(KINDS, _WEIGHTS)[0]
        if kind == "pipelined":
            parts = [self._single(rng, rng.choices(KINDS[:-1], _WEIGHTS[:-1])[0]) for _ in range(rng.randint(2, 4))]
            stream = b"".join(p.stream for p in parts)
            cuts = tuple(sorted(rng.sample(range(1, len(stream)), min(len(stream) - 1, rng.randint(1, 4)))))
            return Case(kind, stream, sum(p.frames for p in parts), cuts)
        return self._single(rng, kind)

    def template(self, rng: random.Random) -> templates.Template:
        _key, versions = self._by_api[rng.randrange(len(self._by_api))]
        _version, ts = versions[rng.randrange(len(versions))]
        return ts[rng.randrange(len(ts))]

    def _payload(self, rng: random.Random, t: templates.Template) -> bytearray:
        payload = bytearray(t.payload)
        payload[4:8] = rng.randint(-(1 << 31), (1 << 31) - 1).to_bytes(4, "big", signed=True)
        return payload

    def _single(self, rng: random.Random, kind: str) -> Case:
        if kind == "random":
            return Case(kind, self._random(rng), 1)
        if kind == "structured":
            key, versions = self._by_api[rng.randrange(len(self._by_api))]
            if key in controller_api.VERSIONS:  # kio has no schema for these: mutate instead
                kind = "mutated"
            else:
                version = versions[rng.randrange(len(versions))][0]
                if not api_keys.supported(key, version):
                    version = api_keys.VERSIONS[key][1]
                return Case(kind, _framed(structured.request(structured.RandomChoices(rng), self.topology, key,
                                                             version)), 1)
        if kind == "batch":
            t = self._produce[rng.randrange(len(self._produce))]
            return Case(kind, _framed(self._batch(rng, self._payload(rng, t))), 1)
        t = self.template(rng)
        payload = self._payload(rng, t)
        if kind == "mutated":
            for _ in range(rng.choice((1, 1, 2, 3, 4))):
                payload = self._mutate(rng, payload)
        elif kind == "truncated":
            payload = payload[:rng.randrange(len(payload))]
        elif kind == "bad-length":
            return Case(kind, self._bad_length(rng, payload), 1)
        elif kind == "sizes":
            payload = self._sizes(rng, payload)
        elif kind == "utf8":
            payload = self._utf8(rng, payload)
        return Case(kind, _framed(payload), 1)

    # -- the mutations ------------------------------------------------------------------------

    def _offset(self, rng: random.Random, payload: bytearray) -> int:
        """Mostly past the API key and version: changing those mostly makes an unsupported request."""
        if not payload:
            return 0
        if rng.random() < 0.85 and len(payload) > 4:
            return rng.randrange(4, len(payload))
        return rng.randrange(len(payload))

    def _mutate(self, rng: random.Random, p: bytearray) -> bytearray:
        op = rng.randrange(10)
        if not p:
            return bytearray(rng.randbytes(rng.randint(1, 16)))
        at = self._offset(rng, p)
        if op == 0:
            p[at] ^= 1 << rng.randrange(8)
        elif op == 1:
            p[at] = rng.randrange(256)
        elif op in (2, 3):
            width = rng.choice((1, 2, 4, 8))
            value = rng.choice(_INTERESTING + [len(p), len(p) - at, rng.randrange(300)])
            p[at:at + width] = (value & ((1 << (8 * width)) - 1)).to_bytes(width, "big")
        elif op == 4:
            p[at:at + 1] = rng.choice(_VARINTS)
        elif op == 5:
            del p[at:at + rng.randint(1, 16)]
        elif op == 6:
            chunk = p[at:at + rng.randint(1, 32)]
            p[at:at] = chunk * rng.randint(1, 8)
        elif op == 7:
            p[at:at] = rng.randbytes(rng.randint(1, 32))
        elif op == 8:
            del p[at:]
        else:
            other = self.templates[rng.randrange(len(self.templates))].payload
            p[at:] = other[rng.randrange(len(other)):]
        return p

    def _bad_length(self, rng: random.Random, payload: bytearray) -> bytes:
        n = len(payload)
        size = rng.choice([max(0, n - rng.randint(1, 8)), n + rng.randint(1, 8), n + (1 << 20), 0, -1,
                           -(1 << 31), self.max_frame_bytes + 1, (1 << 31) - 1])
        return struct.pack(">i", size) + bytes(payload)

    def _string_at(self, rng: random.Random, p: bytearray) -> tuple[int, int] | None:
        """(offset, length) of a known string in the payload, if any."""
        found = [(at, len(s)) for s in self._strings for at in _find_all(p, s)]
        return found[rng.randrange(len(found))] if found else None

    def _sizes(self, rng: random.Random, p: bytearray) -> bytearray:
        spot = self._string_at(rng, p)
        if spot is None:
            return self._mutate(rng, p)
        at, n = spot
        how = rng.randrange(4)
        if how == 0 and at >= 2:  # classic int16 string length
            value = rng.choice([-1, -2, 0, n - 1, n + 1, 0x7FFF, -0x8000])
            p[at - 2:at] = struct.pack(">h", value)
        elif how == 1 and at >= 1:  # compact (varint) string length
            p[at - 1:at] = rng.choice(_VARINTS)
        elif how == 2 and at >= 6:  # the int32 array count before a classic string
            p[at - 6:at - 2] = struct.pack(">i", rng.choice([-1, -2, 0, 2, 1000, 0x7FFFFFFF, -0x80000000]))
        elif at >= 2:  # the varint array count before a compact string
            p[at - 2:at - 1] = rng.choice(_VARINTS)
        return p

    def _utf8(self, rng: random.Random, p: bytearray) -> bytearray:
        spot = self._string_at(rng, p)
        if spot is None:
            return self._mutate(rng, p)
        at, n = spot
        bad = rng.choice(_INVALID_UTF8)
        inside = rng.randrange(n)
        p[at + inside:at + inside + len(bad)] = bad[:n - inside] if rng.random() < 0.5 else bad
        return p

    def _batch(self, rng: random.Random, p: bytearray) -> bytearray:
        span = _batch_span(p)
        assert span is not None
        start, end = span
        for _ in range(rng.randint(1, 2)):
            if rng.random() < 0.7:
                offset, fmt = rng.choice(_BATCH_FIELDS)
                width = struct.calcsize(fmt)
                value = rng.choice(_INTERESTING + [0x10, 0x07, 0x20, 2, end - start, rng.randrange(100)])
                p[start + offset:start + offset + width] = (value & ((1 << (8 * width)) - 1)).to_bytes(width, "big")
            else:
                at = rng.randrange(start + 61, end) if end > start + 61 else start
                p[at] = rng.randrange(256)
        struct.pack_into(">I", p, start + 17, crc32c.crc32c(bytes(p[start + 21:end])))
        return p

    def _random(self, rng: random.Random) -> bytes:
        if rng.random() < 0.3:
            return rng.randbytes(rng.randint(1, 64))
        key = rng.choice(sorted(api_keys.VERSIONS) + sorted(controller_api.VERSIONS) + [rng.randrange(-5, 100)])
        lo, hi = api_keys.VERSIONS.get(key, (0, controller_api.VERSIONS.get(key, 3)))
        header = struct.pack(">hhi", key, rng.randint(lo, hi), rng.randint(0, 1000))
        return _framed(header + rng.randbytes(rng.randint(0, 120)))


def _framed(payload: bytes | bytearray) -> bytes:
    return struct.pack(">i", len(payload)) + bytes(payload)


def _find_all(haystack: bytearray, needle: bytes) -> list[int]:
    out, at = [], haystack.find(needle)
    while at >= 0:
        out.append(at)
        at = haystack.find(needle, at + 1)
    return out


def _batch_span(payload: bytes | bytearray) -> tuple[int, int] | None:
    """(start, end) of the first record batch in a Produce template: found by its fixed
    timestamp (templates.BATCH_TIMESTAMP_MS), 27 bytes into the batch header."""
    at = bytes(payload).find(struct.pack(">q", templates.BATCH_TIMESTAMP_MS))
    if at < 27:
        return None
    start = at - 27
    (length,) = struct.unpack_from(">i", payload, start + 8)
    end = start + 12 + length
    return (start, end) if end <= len(payload) else None
