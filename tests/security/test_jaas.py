"""JAAS configuration text (security/jaas.py): sections, modules, flags and options as Java's
ConfigFile and Kafka's JaasConfig read them, and a message naming the line for each mistake."""
from __future__ import annotations

import pytest

from odradek.security.jaas import (
    DIGEST_LOGIN_MODULE,
    PLAIN_LOGIN_MODULE,
    JaasConfig,
    LoginModule,
    digest_client_login,
    module_options,
    parse_jaas,
    parse_jaas_config_property,
    parse_login_modules,
    user_passwords,
)

KAFKA_DOCS_EXAMPLE = """\
// the broker's file, as Kafka's security docs write it
KafkaServer {
    org.apache.kafka.common.security.plain.PlainLoginModule required
    username="admin"
    password="admin-secret"
    user_admin="admin-secret"
    user_alice="alice-secret";
};

/* ZooKeeper's client
   (DIGEST-MD5) */
Client {
    org.apache.zookeeper.server.auth.DigestLoginModule required
    username="kafka"
    password="kafka-secret";
};
"""


def test_kafka_docs_example() -> None:
    config = parse_jaas(KAFKA_DOCS_EXAMPLE)
    assert sorted(config.sections) == ["Client", "KafkaServer"]
    (plain,) = config.section("KafkaServer")
    assert plain == LoginModule(PLAIN_LOGIN_MODULE, "required",
                                {"username": "admin", "password": "admin-secret", "user_admin": "admin-secret",
                                 "user_alice": "alice-secret"}, 3)
    assert plain.simple_name == "PlainLoginModule"
    assert list(plain.options) == ["username", "password", "user_admin", "user_alice"]  # as written
    assert config.section("Client")[0].line == 13
    assert digest_client_login(config.section("Client")) == ("kafka", "kafka-secret")


def test_plain_users_helper() -> None:
    config = parse_jaas(KAFKA_DOCS_EXAMPLE)
    options = config.module_options("KafkaServer", "PlainLoginModule")
    assert options == config.module_options("KafkaServer", PLAIN_LOGIN_MODULE) == config.module_options("KafkaServer")
    assert user_passwords(options) == {"admin": "admin-secret", "alice": "alice-secret"}
    assert user_passwords({"user_": "x", "username": "u", "user_bob": ""}) == {"bob": ""}


def test_unquoted_values_flags_in_any_case_and_several_modules() -> None:
    config = parse_jaas("""
        Server{org.apache.zookeeper.server.auth.DigestLoginModule REQUIRED user_kafka=secret-1 user_b.c=x_y;};
        Other { a.B Sufficient; c.D optional debug=true ; e.F requisite; };
    """)
    assert config.section("Server")[0].flag == "required"
    assert user_passwords(config.module_options("Server")) == {"kafka": "secret-1", "b.c": "x_y"}
    assert [(m.class_name, m.flag, dict(m.options)) for m in config.section("Other")] == [
        ("a.B", "sufficient", {}), ("c.D", "optional", {"debug": "true"}), ("e.F", "requisite", {})]
    with pytest.raises(ValueError, match="section Other: 3 login modules where exactly one is expected"):
        config.module_options("Other")
    assert config.module_options("Other", "D") == {"debug": "true"}
    with pytest.raises(ValueError, match=r"no PlainLoginModule login module .*modules: a.B, c.D, e.F"):
        module_options(config.section("Other"), "PlainLoginModule")


def test_quoted_values_escapes_and_comments() -> None:
    (module,) = parse_jaas(r"""
        S { m.M required
              a="quote \" backslash \\ tab \t newline \n octal \101\7x"
              b='single "quotes" // not a comment'
              c = "/* nor this */"  // but this is
              /* and this, "with a quote" */ d="" e=x//comment right after a word
              ;
        };""").section("S")
    assert module.options == {"a": 'quote " backslash \\ tab \t newline \n octal A\x07x',
                              "b": 'single "quotes" // not a comment', "c": "/* nor this */", "d": "", "e": "x"}


def test_section_names_are_case_sensitive_and_lookups_say_what_exists() -> None:
    config = parse_jaas(KAFKA_DOCS_EXAMPLE)
    assert config.get("client") is None and config.get("Client") is not None
    with pytest.raises(ValueError, match=r"no Server section .*\(sections: Client, KafkaServer\)"):
        config.section("Server")


def test_sasl_jaas_config_property() -> None:
    module = parse_jaas_config_property(
        'org.apache.kafka.common.security.plain.PlainLoginModule required username="a" password="b";')
    assert (module.class_name, module.flag, dict(module.options)) == (PLAIN_LOGIN_MODULE, "required",
                                                                      {"username": "a", "password": "b"})
    two = "a.A required; b.B optional x=1;"
    assert [m.class_name for m in parse_login_modules(two)] == ["a.A", "b.B"]
    with pytest.raises(ValueError, match="contains 2 login modules; it should be 1 module"):
        parse_jaas_config_property(two)
    with pytest.raises(ValueError, match="no login module"):
        parse_jaas_config_property("  // nothing\n")
    with pytest.raises(ValueError, match=r"line 1: the entry of a.A \(line 1\) is not ended by ';'"):
        parse_jaas_config_property('a.A required username="x"')


def test_passwords_stay_out_of_repr() -> None:
    module = parse_jaas_config_property('a.A required username="alice" password="s3cret";')
    assert "s3cret" not in repr(module) and "password" in repr(module)
    assert "s3cret" not in repr(JaasConfig({"S": (module,)}))


@pytest.mark.parametrize(("text", "message"), [
    ("", "has no section"),
    ("// only a comment", "has no section"),
    ("KafkaServer", "line 1: the text ends where '{' after section name KafkaServer is expected"),
    ("KafkaServer {\n  a.A required;\n", r"line 2: the text ends where '}' closing section KafkaServer \(line 1\)"),
    ("KafkaServer {\n  a.A required;\n}", "line 3: the text ends where ';' after the '}' of section KafkaServer"),
    ("S {\n  a.A required x=1\n};", r"line 3: the entry of a.A \(line 2\) is not ended by ';' before '}'"),
    ("S {\n a.A required\n x=\"open\n};", "line 3: the value opened with \" is not closed on its line"),
    ("S { a.A required x='open};", "line 1: the value opened with ' is not closed"),
    ("S {\n\n a.A mandatory;\n};", "line 3: control flag 'mandatory' of a.A is not one of required, requisite"),
    ("S { a.A };", r"line 1: the control flag of a.A \(required, requisite, sufficient, optional\) is expected, "
                   r"not '}'"),
    ("S { a.A required\n x y; };", "line 2: '=' after option 'x' is expected, not 'y'"),
    ("S { a.A required x=; };", "line 1: the value of option 'x' is expected, not ';'"),
    ("S { a.A required x=1 x=2; };", "line 1: option 'x' of a.A is given twice"),
    ("S { a.A required =1; };", "line 1: an option name of a.A or ';' is expected, not '='"),
    ("S {\n};", "line 2: section S has no login module"),
    ("S { a.A required; };\nS { b.B required; };", "line 2: section S is given twice"),
    ("S { a.A required; };\n/* open", "line 2: a /\\* comment is not closed"),
    ("{ a.A required; };", r"line 1: a section name \(like KafkaServer or Client\) is expected, not '\{'"),
    ('S { a.A required x="\\\n"; };', "line 1: a backslash ends the line inside a quoted value"),
])
def test_mistakes_name_their_line(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_jaas(text)


def test_zookeeper_client_section() -> None:
    ok = parse_jaas(f'Client {{ {DIGEST_LOGIN_MODULE} required username="kafka" password="pw"; }};')
    assert digest_client_login(ok.section("Client")) == ("kafka", "pw")
    krb = parse_jaas("Client { com.sun.security.auth.module.Krb5LoginModule required useKeyTab=true; };")
    with pytest.raises(ValueError, match="only org.apache.zookeeper.server.auth.DigestLoginModule .* not "
                                         "com.sun.security.auth.module.Krb5LoginModule"):
        digest_client_login(krb.section("Client"))
    no_password = parse_jaas(f'Client {{ {DIGEST_LOGIN_MODULE} required username="kafka"; }};')
    with pytest.raises(ValueError, match="DigestLoginModule lacks password"):
        digest_client_login(no_password.section("Client"))
