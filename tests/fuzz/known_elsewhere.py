"""Findings of the fuzzer whose cause lies in broker/admin_apis.py, a file changed elsewhere at
the time they were found; reported there, and tolerated here only in exactly this form so that
any other finding still fails the fuzzing tests. Each has a strict xfail regression test in
test_fuzz_findings.py, which starts failing (XPASS) once the cause is fixed; then delete the
entry and the xfail marker."""
from __future__ import annotations

import struct

from odradek.fuzz import oracle
from odradek.fuzz.report import Finding


def _apis(stream_hex: str) -> set[int]:
    """The API keys of the frames in a case's stream."""
    frames = oracle.split_frames(bytes.fromhex(stream_hex), 1 << 30)[0]
    return {struct.unpack_from(">h", f)[0] for f in frames if len(f) >= 2}


def known_elsewhere(f: Finding) -> bool:
    # Metadata v10+ naming a topic by id with a null name: _metadata_response echoes the null
    # into the response, whose name kio cannot encode (TypeError out of the handler)
    if f.category == "crash" and "Unexpectedly received None value" in f.signature \
            and "_metadata_response" in f.detail:
        return True
    # CreateTopics with a partition count in the millions: _plan_topic assigns every replica
    # before check_fits_in_zookeeper refuses the assignment, holding the event loop for seconds
    if f.category == "hang" and "real time" in f.signature and 19 in _apis(f.frame_hex):
        return True
    return False
