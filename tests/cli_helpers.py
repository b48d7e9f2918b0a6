"""The `odradek` console script run as an operator runs it, and the contract every mistake on
its command line keeps: one readable line on stderr, never a traceback (tests/cli and the
`up`/`down` tests of tests/cluster)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

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
