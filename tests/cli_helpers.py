"""The `odradek` console script run as an operator runs it, and the contract every mistake on
its command line keeps: one readable line on stderr, never a traceback (tests/cli and the
`up`/`down` tests of tests/cluster)."""
from __future__ import annotations

import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

ODRADEK = str(Path(sys.executable).with_name("odradek"))


def run(*args: str, stdin: str = "", timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """`odradek ARGS` in a subprocess, stdin given, output captured as text."""
    return subprocess.run([ODRADEK, *args], input=stdin, capture_output=True, text=True, timeout=timeout)


def assert_one_line_error(proc: subprocess.CompletedProcess[str], status: int, *fragments: str) -> None:
    """``proc`` exited with ``status`` after one `odradek: error: ` line naming every fragment."""
    assert proc.returncode == status, proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("odradek: error: "), lines[0]
    assert "Traceback" not in proc.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


class Running:
    """`odradek ARGS` running in the background (a --watch, a consume -f), its output lines
    gathered by threads so that a test can poll them; interrupt() is the operator's Ctrl-C."""

    def __init__(self, *args: str) -> None:
        self.proc = subprocess.Popen([ODRADEK, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.lines: list[str] = []
        self.errors: list[str] = []
        self._threads = [threading.Thread(target=_gather, args=(stream, into), daemon=True)
                         for stream, into in ((self.proc.stdout, self.lines), (self.proc.stderr, self.errors))]
        for thread in self._threads:
            thread.start()

    def interrupt(self, timeout: float = 30) -> str:
        """SIGINT, then wait for the exit (SIGKILL and TimeoutExpired if it does not come in
        time: the process is never left running); its whole stderr."""
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise
        for thread in self._threads:
            thread.join(10)
        return "".join(self.errors)


def _gather(stream: Any, into: list[str]) -> None:
    for line in stream:
        into.append(line)
