"""docs/operations.md's config tables are what `python -m odradek.broker.config_docs` generates
from the config definitions, so a new or changed broker setting fails here until the doc is
regenerated; and what the tables tell an operator (the --config key of each setting, its
default) is what a broker reading that file gets."""
from __future__ import annotations

from dataclasses import fields
from pathlib import Path

from odradek.broker.config import FIELD_DOCS, BrokerConfig
from odradek.broker.config_docs import BEGIN, END, main, markdown, replace_generated, topic_config_defaults
from odradek.broker.dynamic_broker_config import DynamicBrokerConfig, broker_config_definitions

OPERATIONS = Path(__file__).resolve().parents[2] / "docs" / "operations.md"


def test_operations_doc_holds_the_generated_config_tables() -> None:
    text = OPERATIONS.read_text()
    assert text.count(BEGIN) == 1 and text.count(END) == 1
    assert replace_generated(text) == text, (
        "docs/operations.md's config tables differ from the config definitions: run "
        "`.venv/bin/python -m odradek.broker.config_docs --write docs/operations.md`")


def test_every_broker_config_is_documented_and_no_stale_doc_is_left() -> None:
    assert all(d.documentation for d in broker_config_definitions())
    assert set(FIELD_DOCS) <= {f.name for f in fields(BrokerConfig)}


def test_a_config_file_with_every_listed_key_gives_the_listed_defaults(tmp_path: Path) -> None:
    definitions = [d for d in broker_config_definitions() if d.file_key]
    required = {"broker.id": "7", "host.name": "10.0.0.7", "port": "9092", "zookeeper.connect": "zk1:2181/odradek",
                "log.dirs": str(tmp_path)}
    lines = [f"{d.file_key}={required[d.file_key] if d.required else d.default}"
             for d in definitions if d.default is not None or d.required]
    (tmp_path / "server.properties").write_text("\n".join(lines) + "\n")
    config = BrokerConfig.from_file(tmp_path / "server.properties")
    layered = DynamicBrokerConfig(config)
    for d in definitions:
        if not d.required and d.default is not None:
            assert layered.value(d.name) == d.default, d.name
    assert (config.broker_id, config.host, config.port) == (7, "10.0.0.7", 9092)
    assert layered.topic_defaults() == topic_config_defaults()


def test_write_replaces_only_the_part_between_the_markers(tmp_path: Path) -> None:
    doc = tmp_path / "ops.md"
    doc.write_text(f"# before\n\n{BEGIN}\nstale\n{END}\n\nafter\n")
    assert main(["--write", str(doc)]) == 0
    assert doc.read_text() == f"# before\n\n{markdown()}\n\nafter\n"
    doc.write_text("no markers\n")
    assert main(["--write", str(doc)]) == 1
    assert doc.read_text() == "no markers\n"
