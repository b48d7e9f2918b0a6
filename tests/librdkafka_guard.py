"""Make librdkafka's protocol errors fail the test that caused them.

librdkafka only logs them (odradek/librdkafka_log.py), so a test that only counts records passes
while every client in the field stalls. `install()` (called by tests/conftest.py before any test
module imports confluent_kafka) replaces confluent_kafka's Producer, Consumer and AdminClient
with subclasses that hand librdkafka's log to a Python logger; the log is kept in the
"librdkafka" logger (pytest shows it when a test fails) and every protocol-error line is
recorded for `take_protocol_errors()`, which an autouse fixture checks after each test. Clients
in other processes (the Spark source and sink in Spark's Python workers) report theirs through
a file named in the environment (`client_logger`).

librdkafka delivers its log lines from the application's poll()/flush()/consume() calls, so a
client that is never polled is not checked.
"""
from __future__ import annotations

import atexit
import logging
import os
import tempfile
from typing import Any

import confluent_kafka
import confluent_kafka.admin

from odradek.client.librdkafka_log import PROTOCOL_ERROR_LOG_ENV, ProtocolErrorRecorder

LOGGER = logging.getLogger("librdkafka")
_recorder = ProtocolErrorRecorder()
# clients in other processes (Spark's Python workers) append their protocol errors here
_other_processes = tempfile.NamedTemporaryFile(prefix="odradek-librdkafka-", suffix=".log", delete=False)
_other_processes.close()
atexit.register(os.unlink, _other_processes.name)
_read_up_to = 0


def take_protocol_errors() -> list[str]:
    """The protocol-error lines logged since the last call, in this process or another."""
    global _read_up_to
    with open(_other_processes.name, encoding="utf-8", errors="replace") as f:
        f.seek(_read_up_to)
        others = f.read()
        _read_up_to = f.tell()
    return _recorder.take() + others.splitlines()


def _with_logger(conf: dict[str, Any] | None, kwargs: dict[str, Any]) -> dict[str, Any]:
    merged = dict(conf or {}, **kwargs)
    merged.setdefault("logger", LOGGER)
    return merged


class Producer(confluent_kafka.Producer):
    def __init__(self, conf: dict[str, Any] | None = None, **kwargs: Any) -> None:
        super().__init__(_with_logger(conf, kwargs))


class Consumer(confluent_kafka.Consumer):
    def __init__(self, conf: dict[str, Any] | None = None, **kwargs: Any) -> None:
        super().__init__(_with_logger(conf, kwargs))


def _guard_admin_client() -> None:
    """AdminClient is a Python class whose __init__ names itself in super(), so it is patched in
    place rather than subclassed (a subclass installed under its name would recurse)."""
    cls = confluent_kafka.admin.AdminClient
    original = cls.__init__

    def __init__(self: Any, conf: dict[str, Any] | None = None, **kwargs: Any) -> None:
        original(self, _with_logger(conf, kwargs))

    cls.__init__ = __init__  # type: ignore[method-assign]


def install() -> None:
    if getattr(confluent_kafka, "_odradek_guarded", False):
        return
    LOGGER.addHandler(_recorder)
    os.environ[PROTOCOL_ERROR_LOG_ENV] = _other_processes.name
    LOGGER.setLevel(logging.DEBUG)
    confluent_kafka.Producer = Producer  # type: ignore[misc]
    confluent_kafka.Consumer = Consumer  # type: ignore[misc]
    _guard_admin_client()
    confluent_kafka._odradek_guarded = True  # type: ignore[attr-defined]
