"""librdkafka's log, watched for protocol errors.

librdkafka does not raise when it cannot parse a broker's response: it logs a PROTOERR line
("Protocol parse failure for Fetch v12(flex) ...", "invalid MessageSetSize -1"), drops the whole
response and retries, so an application only sees its partitions stall. Clients given a
`logger` (confluent-kafka's config key) whose handler is a ProtocolErrorRecorder keep every such
line; the tests and the fault-injection suite fail on any.
"""
from __future__ import annotations

import logging
import os
import threading

# librdkafka's facilities and messages for a response it could not parse or did not expect
PROTOCOL_ERROR_MARKS = ("PROTOERR", "PROTOUFLOW", "Protocol parse failure", "invalid MessageSetSize",
                        "Protocol read buffer underflow")


class ProtocolErrorRecorder(logging.Handler):
    """Keeps the protocol-error lines of the log records it is handed."""

    def __init__(self) -> None:
        super().__init__()
        self._found: list[str] = []
        self._guard = threading.Lock()

    def emit(self, record: logging.LogRecord) -> None:
        line = record.getMessage()
        if any(mark in line for mark in PROTOCOL_ERROR_MARKS):
            with self._guard:
                self._found.append(line)

    def take(self) -> list[str]:
        """The protocol-error lines recorded since the last call."""
        with self._guard:
            out = list(self._found)
            self._found.clear()
        return out


#: When set, `client_logger()` loggers also append every protocol-error line to this file, so
#: the clients of other processes (Spark's Python workers) can be watched: the tests set it.
PROTOCOL_ERROR_LOG_ENV = "ODRADEK_LIBRDKAFKA_PROTOCOL_ERROR_LOG"


class _AppendToFile(logging.Handler):
    def __init__(self, path: str) -> None:
        super().__init__()
        self.path = path

    def emit(self, record: logging.LogRecord) -> None:
        line = record.getMessage()
        if any(mark in line for mark in PROTOCOL_ERROR_MARKS):
            with open(self.path, "a", encoding="utf-8") as out:
                out.write(f"{os.getpid()} {line}\n")


def client_logger(name: str) -> logging.Logger:
    """The logger to give a confluent-kafka client (its `logger` setting): librdkafka's lines
    go to Python logging under `name`, and protocol errors also to the file named by
    ODRADEK_LIBRDKAFKA_PROTOCOL_ERROR_LOG when that is set."""
    logger = logging.getLogger(name)
    path = os.environ.get(PROTOCOL_ERROR_LOG_ENV)
    if path and not any(isinstance(h, _AppendToFile) and h.path == path for h in logger.handlers):
        logger.addHandler(_AppendToFile(path))
    return logger
