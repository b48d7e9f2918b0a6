"""A broker config without a value (broker.rack unset) is answered by DescribeConfigs as Kafka
answers it, value null and no synonyms, so no tool shows the text "None"; once set it is the
config file's value."""
from __future__ import annotations

from pathlib import Path

from odradek.broker.config import BrokerConfig
from odradek.broker.config_helper import _config_entry
from odradek.broker.dynamic_broker_config import DEFAULT_CONFIG, STATIC_BROKER_CONFIG, DynamicBrokerConfig, Synonym


def broker_config(rack: str | None) -> BrokerConfig:
    return BrokerConfig(broker_id=1, host="127.0.0.1", port=9092, zookeeper="127.0.0.1:2181",
                        data_dir=Path("/nonexistent"), broker_rack=rack)


def test_an_unset_rack_has_no_layer_and_is_answered_as_null() -> None:
    layers = DynamicBrokerConfig(broker_config(None)).describe(per_broker=True)["broker.rack"]
    assert layers == []
    answered = _config_entry("broker.rack", layers, True, False, True, False)
    assert answered["value"] is None and answered["config_source"] == DEFAULT_CONFIG
    assert answered["synonyms"] == [] and answered["is_default"]


def test_a_set_rack_is_the_static_value() -> None:
    layers = DynamicBrokerConfig(broker_config("eu-west-1a")).describe(per_broker=True)["broker.rack"]
    assert layers == [Synonym("broker.rack", "eu-west-1a", STATIC_BROKER_CONFIG)]
    answered = _config_entry("broker.rack", layers, True, False, True, False)
    assert answered["value"] == "eu-west-1a" and answered["config_source"] == STATIC_BROKER_CONFIG


def test_no_broker_config_value_is_the_text_none() -> None:
    described = DynamicBrokerConfig(broker_config(None)).describe(per_broker=True)
    assert all(s.value != "None" for layers in described.values() for s in layers)
