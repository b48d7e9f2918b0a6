"""odradek: a Kafka-compatible broker cluster on ZooKeeper.

kio, the Kafka protocol library every part of odradek uses, registers Hypothesis strategies
for its types at import whenever Hypothesis is installed (it is, for the protocol fuzz tests).
That costs every process ~120 ms (kio.index: 162 ms instead of 44 ms on a 2-core AMD EPYC),
each `odradek` command and each broker start alike, and nothing of odradek uses those
strategies (the fuzzer draws its own). So kio is first imported with Hypothesis hidden; where
Hypothesis is already imported (a test process) nothing changes, and it stays importable.
"""
from __future__ import annotations

import sys


def _import_kio_without_hypothesis() -> None:
    if "hypothesis" in sys.modules or "kio.static._phantom" in sys.modules:
        return
    sys.modules["hypothesis"] = None  # type: ignore[assignment]  # `import hypothesis` fails
    try:
        import kio.static._phantom  # noqa: F401 - the module that looks for Hypothesis
    finally:
        del sys.modules["hypothesis"]


_import_kio_without_hypothesis()
