"""authorizer.class.name, super.users and allow.everyone.if.no.acl.found read from a
server.properties (broker/config.py): Kafka's ZooKeeper authorizer under both its names, KRaft's
StandardAuthorizer and other classes refused as one line naming the key, super.users checked."""
from __future__ import annotations

from pathlib import Path

import pytest

from odradek.broker.config import BrokerConfig, check_authorizer_class, parse_properties

REQUIRED = "broker.id=1\nlisteners=PLAINTEXT://127.0.0.1:9092\nzookeeper.connect=z:2181\nlog.dirs=/tmp/d\n"


@pytest.mark.parametrize("name, enabled", [
    ("", False), ("  ", False),
    ("kafka.security.authorizer.AclAuthorizer", True),
    ("kafka.security.auth.SimpleAclAuthorizer", True),
])
def test_the_accepted_authorizers(name: str, enabled: bool) -> None:
    assert check_authorizer_class(name) is enabled
    values, unknown = parse_properties(f"authorizer.class.name={name}")
    assert values["authorizer_class_name"] == name.strip() and unknown == []


@pytest.mark.parametrize("name, words", [
    ("org.apache.kafka.metadata.authorizer.StandardAuthorizer", "KRaft's StandardAuthorizer"),
    ("com.example.MyAuthorizer", "odradek's authorizer is kafka.security.authorizer.AclAuthorizer"),
])
def test_other_authorizers_are_refused_in_one_line(tmp_path: Path, name: str, words: str) -> None:
    props = tmp_path / "server.properties"
    props.write_text(REQUIRED + f"authorizer.class.name={name}\n")
    with pytest.raises(ValueError) as info:
        BrokerConfig.from_file(props)
    message = str(info.value)
    assert message.startswith(f"line 5: authorizer.class.name={name}: ") and words in message
    assert "\n" not in message


def test_super_users_and_allow_everyone(tmp_path: Path) -> None:
    props = tmp_path / "server.properties"
    props.write_text(REQUIRED + "authorizer.class.name=kafka.security.authorizer.AclAuthorizer\n"
                     "super.users=User:admin;User:CN=broker,O=x\nallow.everyone.if.no.acl.found=TRUE\n")
    config = BrokerConfig.from_file(props)
    assert config.super_users == "User:admin;User:CN=broker,O=x"
    assert config.allow_everyone_if_no_acl_found is True
    defaults = BrokerConfig.from_file(_write(tmp_path, REQUIRED))
    assert (defaults.authorizer_class_name, defaults.super_users, defaults.allow_everyone_if_no_acl_found) == (
        "", "", False)


@pytest.mark.parametrize("line, words", [
    ("super.users=admin", "super.users=admin: expected a string in format principalType:principalName"),
    ("allow.everyone.if.no.acl.found=yes", "allow.everyone.if.no.acl.found=yes: true or false is expected"),
])
def test_malformed_values_name_their_key(tmp_path: Path, line: str, words: str) -> None:
    with pytest.raises(ValueError, match="^line 5: " + words.replace("(", r"\(")):
        BrokerConfig.from_file(_write(tmp_path, REQUIRED + line + "\n"))


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "broker.properties"
    path.write_text(text)
    return path
