"""Helpers for the log tests (a module of its own: `conftest` is ambiguous when several test
folders have one, so tests never import from it)."""
from odradek.log.log import Log
from odradek.protocol.records import build_batch, decode_records, iter_batches


def batch(n: int = 1, ts: int = 1000, size: int = 10, base_offset: int = 0) -> bytes:
    """n records of `size` bytes each, all stamped ts."""
    return build_batch([(None, b"v" * size)] * n, base_offset=base_offset, timestamp_ms=ts)


def offsets_in(data) -> list[int]:
    """Every record offset in a buffer of whole batches."""
    out = []
    for h in iter_batches(data):
        out += [r[0] for r in decode_records(memoryview(data)[h.position:h.position + h.size])]
    return out


def read_all(log: Log, start: int | None = None) -> list[int]:
    """All offsets from start to the log end, read batch run by batch run."""
    offset = log.log_start_offset if start is None else start
    found = []
    while offset < log.log_end_offset:
        data = log.read(offset, 1 << 20)
        assert data, f"no data at {offset}"
        found += [o for o in offsets_in(data) if o >= offset]
        offset = found[-1] + 1
    return found
