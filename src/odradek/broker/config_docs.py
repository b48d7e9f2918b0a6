"""The config tables of docs/operations.md, generated from the config definitions themselves
(BrokerConfig and its FIELD_DOCS, dynamic_broker_config's broker and topic configs), so the
documentation cannot drift from what a broker accepts: tests/broker/test_config_docs.py fails
when the tables in the doc differ from what this module prints.

    python -m odradek.broker.config_docs --markdown             # print the tables
    python -m odradek.broker.config_docs --write docs/operations.md   # replace them in the doc
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from odradek.broker.dynamic_broker_config import broker_config_definitions
from odradek.broker.topic_admin import TOPIC_CONFIG_DEFAULTS
from odradek.broker.topic_config_synonyms import TOPIC_CONFIGS

BEGIN = "<!-- BEGIN GENERATED CONFIG TABLES: python -m odradek.broker.config_docs --write docs/operations.md -->"
END = "<!-- END GENERATED CONFIG TABLES -->"

_LONG_MAX = 2**63 - 1
_UNITS = ((".ms", ((86_400_000, "days"), (3_600_000, "hours"), (60_000, "minutes"))),
          (".bytes", ((1024**3, "GiB"), (1024**2, "MiB"), (1024, "KiB"))),
          (".size", ((1024**3, "GiB"), (1024**2, "MiB"), (1024, "KiB"))))


def _readable(name: str, value: str | None, required: bool = False) -> str:
    """The default as a config file would spell it, with its size or duration for large ones."""
    if required:
        return "required"
    if not value:
        return "(none)"
    try:
        number = int(value)
    except ValueError:
        return f"`{value}`"
    if number == _LONG_MAX:
        return f"`{value}` (no limit)"
    for suffix, units in _UNITS:
        if name.endswith(suffix):
            for size, unit in units:
                if number >= size and number % size == 0:
                    count = number // size
                    return f"`{value}` ({count} {unit[:-1] if count == 1 and unit.endswith('s') else unit})"
    return f"`{value}`"


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def topic_config_defaults() -> dict[str, str]:
    """What a topic that does not set a config gets from a broker with every default: its broker
    synonym's default where it has one (log.segment.bytes for segment.bytes), else its own."""
    broker = {d.name: d.default for d in broker_config_definitions()}
    return {name: broker.get(synonym or "") or TOPIC_CONFIG_DEFAULTS[name]
            for name, (synonym, _type, _doc) in TOPIC_CONFIGS.items()}


def markdown() -> str:
    """Both tables, between the markers, as docs/operations.md holds them."""
    lines = [BEGIN, "",
             "| broker config | in server.properties (`--config`) | default | changes live | what it does |",
             "|---|---|---|---|---|"]
    for d in broker_config_definitions():
        key = "yes" if d.file_key else "no: `odradek configs alter`"
        live = "yes" if d.dynamic else "no (restart)"
        lines.append(f"| `{d.name}` | {key} | {_readable(d.name, d.default, d.required)} | {live} "
                     f"| {_cell(d.documentation)} |")
    lines += ["", "| topic config | default | broker config it defaults to | what it does |", "|---|---|---|---|"]
    defaults = topic_config_defaults()
    for name in sorted(TOPIC_CONFIGS):
        synonym, _type, doc = TOPIC_CONFIGS[name]
        lines.append(f"| `{name}` | {_readable(name, defaults[name])} "
                     f"| {f'`{synonym}`' if synonym else '-'} | {_cell(doc)} |")
    lines += ["", END]
    return "\n".join(lines)


def replace_generated(text: str) -> str:
    """`text` with the part between the markers (markers included) replaced by markdown()."""
    start, end = text.find(BEGIN), text.find(END)
    if start < 0 or end < start:
        raise ValueError(f"the doc lacks the markers {BEGIN!r} ... {END!r}")
    return text[:start] + markdown() + text[end + len(END):]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m odradek.broker.config_docs", description=__doc__.split("\n\n")[0])
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--markdown", action="store_true", help="print the tables")
    which.add_argument("--write", type=Path, metavar="DOC", help="replace the tables between the markers in DOC")
    args = p.parse_args(argv)
    if args.markdown:
        print(markdown())
        return 0
    try:
        args.write.write_text(replace_generated(args.write.read_text()))
    except (OSError, ValueError) as exc:
        print(f"config_docs: error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
