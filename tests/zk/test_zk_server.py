"""The local ZooKeeper launcher against the real Debian package."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from odradek.common.netutil import free_port
from odradek.zk.server import ZooKeeperServer, check_installed, four_letter_word

pytestmark = pytest.mark.integration


@pytest.mark.skipif(check_installed() is not None, reason=str(check_installed()))
def test_start_stop_leaves_no_process(tmp_path: Path) -> None:
    server = ZooKeeperServer(tmp_path, free_port())
    server.start()
    pid = int(server.pid_file.read_text())
    try:
        assert server.is_running()
        assert four_letter_word(server.host, server.port, "ruok") == "imok"
        assert "zk_version" in four_letter_word(server.host, server.port, "mntr")
        with pytest.raises(RuntimeError, match="already running"):
            server.start()
    finally:
        server.stop()
    assert not server.is_running()
    assert not server.pid_file.exists()
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    with pytest.raises(OSError):
        four_letter_word(server.host, server.port, "ruok")
    assert "binding to port" in server.log_file.read_text()
