"""How the `odradek` command line talks to a terminal: counted nouns, durations, a progress
bar for long operations, `--watch` redraws, and kcat's `-f` record format for `consume`.

A layer below the rest of the cli package, which builds the command tree and dispatches:
admin/, cluster/ and bench/ print through it too. Nothing here speaks Kafka or ZooKeeper.
"""
from __future__ import annotations

import re
import sys
import time
from typing import Any, Callable, TextIO


def plural(count: int, noun: str, nouns: str | None = None) -> str:
    """`1 partition`, `3 partitions`."""
    return f"{count} {noun if count == 1 else (nouns or noun + 's')}"


def duration(seconds: float) -> str:
    """A duration as a person reads it: `0.25 s`, `3.2 s`, `60 s`, `2 min 5 s`; never `59.9973 s`."""
    if seconds < 1:
        return f"{seconds:.2g} s"
    if seconds < 10:
        return f"{seconds:.1f}".removesuffix(".0") + " s"
    if seconds < 120:
        return f"{round(seconds)} s"
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes} min {rest} s" if rest else f"{minutes} min"


class Progress:
    """A one-line progress bar with rate and ETA on stderr, drawn only when stderr is a
    terminal (a script or a test reading stderr sees nothing of it). tqdm would do; one
    small class is less than a dependency."""

    WIDTH = 30

    def __init__(self, total: int, what: str, stream: TextIO | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.total, self.what, self.done = max(total, 1), what, 0
        self.stream = stream or sys.stderr
        self.enabled = bool(getattr(self.stream, "isatty", lambda: False)())
        self.clock = clock
        self.started = self.drawn_at = clock()

    def update(self, done: int) -> None:
        self.done = min(done, self.total)
        now = self.clock()
        if self.enabled and (now - self.drawn_at >= 0.1 or self.done == self.total):
            self.drawn_at = now
            self.stream.write("\r" + self.line(now) + "\x1b[K")
            self.stream.flush()

    def line(self, now: float) -> str:
        elapsed = max(now - self.started, 1e-9)
        filled = self.WIDTH * self.done // self.total
        rate = self.done / elapsed
        eta = (self.total - self.done) / rate if rate > 0 else None
        tail = f"ETA {duration(eta)}" if eta is not None and self.done < self.total else duration(elapsed)
        return (f"{self.what} [{'#' * filled}{'.' * (self.WIDTH - filled)}] {self.done}/{self.total} "
                f"{rate:,.0f}/s {tail}")

    def close(self) -> None:
        if self.enabled:
            self.stream.write("\r\x1b[K")
            self.stream.flush()


def watch(render: Callable[[], str], interval_s: float, out: TextIO | None = None,
          sleep: Callable[[float], None] = time.sleep, until: Callable[[], bool] | None = None) -> None:
    """Redraw ``render()`` in place every ``interval_s`` until Ctrl-C (then return normally,
    so the command exits 0), or until ``until()`` is true after a frame. On a terminal the
    screen is cleared and redrawn as `watch(1)` does; otherwise each frame is printed after a
    timestamp line, so a log keeps them all."""
    out = out or sys.stdout
    tty = bool(getattr(out, "isatty", lambda: False)())
    try:
        while True:
            frame = render()
            stamp = time.strftime("%Y-%m-%d %H:%M:%S")
            header = f"every {duration(interval_s)}: {stamp} (Ctrl-C to stop)"
            out.write(("\x1b[H\x1b[2J" if tty else "") + header + "\n" + frame + "\n" + ("" if tty else "\n"))
            out.flush()
            if until is not None and until():
                return
            sleep(interval_s)
    except KeyboardInterrupt:
        if tty:
            out.write("\n")
        return


#: kcat's -f tokens (https://github.com/edenhill/kcat#format): topic, partition, offset, key,
#: value, timestamp, headers, and the key and value lengths; backslash escapes \n \t \r \\.
_TOKEN = re.compile(r"%[tpokvThKS%]|\\[ntr\\]")
_ESCAPES = {"\\n": b"\n", "\\t": b"\t", "\\r": b"\r", "\\\\": b"\\", "%%": b"%"}


def check_format(fmt: str) -> str:
    """``fmt`` if every `%` starts a kcat token, else ValueError naming the bad one."""
    for match in re.finditer(r"%.?", fmt):
        if not _TOKEN.fullmatch(match.group()):
            raise ValueError(f"unknown token {match.group()!r} (known: %t %p %o %k %v %T %h %K %S %%)")
    return fmt


def format_record(fmt: str, msg: Any) -> bytes:
    """One record in kcat's -f format. Headers (%h) are `k=v` joined by commas."""
    def token(m: re.Match[str]) -> bytes:
        t = m.group()
        if t in _ESCAPES:
            return _ESCAPES[t]
        key, value = msg.key() or b"", msg.value() or b""
        if t == "%t":
            return msg.topic().encode()
        if t == "%p":
            return str(msg.partition()).encode()
        if t == "%o":
            return str(msg.offset()).encode()
        if t == "%k":
            return key
        if t == "%v":
            return value
        if t == "%K":
            return str(len(key) if msg.key() is not None else -1).encode()
        if t == "%S":
            return str(len(value) if msg.value() is not None else -1).encode()
        if t == "%T":
            return str(msg.timestamp()[1]).encode()
        headers = msg.headers() or []
        return b",".join(k.encode() + b"=" + (v or b"") for k, v in headers)

    out, pos = [], 0
    for m in _TOKEN.finditer(fmt):
        out.append(fmt[pos:m.start()].encode())
        out.append(token(m))
        pos = m.end()
    out.append(fmt[pos:].encode())
    return b"".join(out)
