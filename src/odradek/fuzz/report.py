"""Counts and findings of a fuzzing run, mergeable across worker processes."""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

#: outcomes a frame can have; the last four are findings
OUTCOMES = ("answered-with-error", "answered-without-error", "no-response (acks=0)", "closed",
            "incomplete (waits for more bytes)", "crash", "hang", "malformed-response", "state-changed")
#: the SASL fuzzer's own findings (sasl_driver.py): a request served to a connection that had not
#: authenticated (or as another principal), and a correct login refused
SASL_FAILURES = ("auth-bypass", "login-refused")
FAILURES = ("crash", "hang", "malformed-response", "state-changed") + SASL_FAILURES


@dataclass
class Finding:
    """One kind of failure: the first (shortest) frame that showed it, and how often it showed."""

    category: str
    signature: str
    frame_hex: str
    detail: str
    count: int = 1

    def line(self) -> str:
        return (f"[{self.category}] x{self.count} {self.signature}\n    frame: {self.frame_hex}\n"
                + "\n".join("    " + line for line in self.detail.splitlines()))


@dataclass
class Report:
    frames: int = 0
    cases: int = 0
    kinds: Counter[str] = field(default_factory=Counter)
    outcomes: Counter[str] = field(default_factory=Counter)
    #: frames that legitimately wrote: appends to the sink topic, controller requests that pass
    #: the epoch fence (the broker is then rebuilt), topics CreateTopics asked for
    writes: Counter[str] = field(default_factory=Counter)
    findings: dict[tuple[str, str], Finding] = field(default_factory=dict)
    seconds: float = 0.0

    def find(self, category: str, signature: str, frame: bytes, detail: str) -> None:
        self.outcomes[category] += 1
        key = (category, signature)
        old = self.findings.get(key)
        if old is None:
            self.findings[key] = Finding(category, signature, frame.hex(), detail)
            return
        old.count += 1
        if len(frame) * 2 < len(old.frame_hex):
            old.frame_hex, old.detail = frame.hex(), detail

    def merge(self, other: "Report") -> None:
        self.frames += other.frames
        self.cases += other.cases
        self.kinds.update(other.kinds)
        self.outcomes.update(other.outcomes)
        self.writes.update(other.writes)
        self.seconds = max(self.seconds, other.seconds)
        for key, f in other.findings.items():
            mine = self.findings.get(key)
            if mine is None:
                self.findings[key] = f
            else:
                mine.count += f.count
                if len(f.frame_hex) < len(mine.frame_hex):
                    mine.frame_hex, mine.detail = f.frame_hex, f.detail

    @property
    def failures(self) -> int:
        return sum(self.outcomes[c] for c in FAILURES)

    def summary(self, title: str) -> str:
        lines = [f"{title}: {self.frames:,} frames in {self.cases:,} cases, {self.seconds:.1f} s"]
        lines.append("  frames by kind: " + ", ".join(f"{k} {n:,}" for k, n in sorted(self.kinds.items())))
        shown = OUTCOMES + tuple(k for k in SASL_FAILURES if k in self.outcomes)
        lines.append("  outcomes: " + ", ".join(f"{k} {self.outcomes[k]:,}" for k in shown))
        if self.writes:
            lines.append("  counted apart: " + ", ".join(f"{k} {n:,}" for k, n in sorted(self.writes.items())))
        lines.append(f"  findings: {len(self.findings)}")
        for f in sorted(self.findings.values(), key=lambda f: (f.category, -f.count)):
            lines.append("  " + f.line().replace("\n", "\n  "))
        return "\n".join(lines)
