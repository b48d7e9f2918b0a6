"""cli_output: what the command line prints to a person (no cluster needed)."""
from __future__ import annotations

import io

import pytest

from odradek.cli.output import Progress, check_format, duration, format_record, plural, watch


@pytest.mark.parametrize("seconds, shown", [(0.25, "0.25 s"), (1.0, "1 s"), (3.24, "3.2 s"), (59.9973, "60 s"),
                                            (125, "2 min 5 s"), (180, "3 min")])
def test_durations_are_rounded(seconds: float, shown: str) -> None:
    assert duration(seconds) == shown


def test_plural() -> None:
    assert (plural(1, "partition"), plural(0, "partition"), plural(3, "record")) == \
        ("1 partition", "0 partitions", "3 records")


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_draws_rate_and_eta_only_on_a_terminal() -> None:
    now = [0.0]
    tty, pipe = _Tty(), io.StringIO()
    bar = Progress(100, "creating", stream=tty, clock=lambda: now[0])
    quiet = Progress(100, "creating", stream=pipe, clock=lambda: now[0])
    now[0] = 2.0
    bar.update(50)
    quiet.update(50)
    assert "50/100" in tty.getvalue() and "25/s" in tty.getvalue() and "ETA 2.0 s" not in tty.getvalue()
    assert "ETA 2 s" in tty.getvalue()
    bar.close()
    assert pipe.getvalue() == "" and not quiet.enabled


def test_watch_redraws_until_ctrl_c() -> None:
    out, frames = io.StringIO(), iter(["one", "two"])

    def sleep(_s: float) -> None:
        if out.getvalue().count("every 2 s") == 2:
            raise KeyboardInterrupt

    watch(lambda: next(frames), 2.0, out=out, sleep=sleep)  # returns: the command exits 0
    assert out.getvalue().count("every 2 s") == 2 and "one" in out.getvalue() and "two" in out.getvalue()


def test_watch_stops_once_until_is_true() -> None:
    out, frames = io.StringIO(), iter(["moving", "moving", "done"])
    last: list[str] = []

    def render() -> str:
        last.append(next(frames))
        return last[-1]

    watch(render, 0.5, out=out, sleep=lambda _s: None, until=lambda: last[-1] == "done")
    assert last == ["moving", "moving", "done"] and out.getvalue().count("every 0.5 s") == 3


class _Msg:
    def topic(self) -> str: return "t"
    def partition(self) -> int: return 1
    def offset(self) -> int: return 42
    def key(self) -> bytes | None: return None
    def value(self) -> bytes: return b"v"
    def timestamp(self) -> tuple[int, int]: return (1, 1700000000000)
    def headers(self) -> list[tuple[str, bytes]]: return [("a", b"1"), ("b", b"2")]


def test_kcat_format() -> None:
    assert format_record(r"%t %p %o %k|%v %T %h %K %S 100%%\n", _Msg()) == \
        b"t 1 42 |v 1700000000000 a=1,b=2 -1 1 100%\n"
    with pytest.raises(ValueError, match="%x"):
        check_format("%x")
