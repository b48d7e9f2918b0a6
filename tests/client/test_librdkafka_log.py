"""librdkafka's log lines sorted: protocol errors kept, everything else only logged."""
from __future__ import annotations

import logging
from pathlib import Path

import pytest

from odradek.client.librdkafka_log import PROTOCOL_ERROR_LOG_ENV, ProtocolErrorRecorder, client_logger

PARSE_FAILURE = ("PROTOERR [rdkafka#consumer-3] [thrd:127.0.0.1:1/1]: 127.0.0.1:1/1: Protocol parse failure "
                 "for Fetch v12(flex) at 214/217")
HARMLESS = "FAIL [rdkafka#producer-2] [thrd:127.0.0.1:1/1]: Connect to ipv4#127.0.0.1:1 failed: Connection refused"


def test_the_recorder_keeps_protocol_errors_only() -> None:
    logger = logging.getLogger("test.librdkafka.recorder")
    recorder = ProtocolErrorRecorder()
    logger.addHandler(recorder)
    try:
        logger.error(HARMLESS)
        logger.error(PARSE_FAILURE)
        assert recorder.take() == [PARSE_FAILURE]
        assert recorder.take() == []
    finally:
        logger.removeHandler(recorder)


def test_client_logger_appends_protocol_errors_to_the_named_file(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "errors.log"
    monkeypatch.setenv(PROTOCOL_ERROR_LOG_ENV, str(target))
    logger = client_logger("test.librdkafka.client")
    logger.error(HARMLESS)
    logger.error(PARSE_FAILURE)
    lines = target.read_text().splitlines()
    assert len(lines) == 1 and lines[0].endswith(PARSE_FAILURE)
