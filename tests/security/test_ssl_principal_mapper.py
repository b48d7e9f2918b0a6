"""ssl.principal.mapping.rules against Kafka's SslPrincipalMapperTest, and the RFC 2253 names the
rules are applied to, as Java's X500Principal.getName() writes them."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.name import _ASN1Type
from cryptography.x509.oid import NameOID

from odradek.security import local_ca
from odradek.security.ssl_principal_mapper import (
    ANONYMOUS,
    NoMatchingRule,
    SslPrincipalMapper,
    certificate_dn,
    principal_for,
    rfc2253_name,
)


@pytest.mark.parametrize("rules", [
    "DEFAULT",
    "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/",
    "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L, DEFAULT",
    "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/",
    "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/L",
    "RULE:^cn=(.?),ou=(.?),dc=(.?),dc=(.?)$/$1@$2/U",
    "RULE:^CN=([^,ADEFLTU,]+)(,.*|$)/$1/",
    "RULE:^CN=([^,DEFAULT,]+)(,.*|$)/$1/",
])
def test_kafka_valid_rules(rules: str) -> None:
    SslPrincipalMapper(rules)


@pytest.mark.parametrize("rules", [
    "default",
    "DEFAUL",
    "DEFAULT/L",
    "DEFAULT/U",
    "RULE:CN=(.*?),OU=ServiceUsers.*/$1",
    "rule:^CN=(.*?),OU=ServiceUsers.*$/$1/",
    "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L/U",
    "RULE:^CN=(.*?),OU=ServiceUsers.*$/L",
    "RULE:^CN=(.*?),OU=ServiceUsers.*$/U",
    "RULE:^CN=(.*?),OU=ServiceUsers.*$/LU",
])
def test_kafka_invalid_rules(rules: str) -> None:
    with pytest.raises(ValueError, match="Invalid rule"):
        SslPrincipalMapper(rules)


def test_kafka_mapping() -> None:
    mapper = SslPrincipalMapper(", ".join([
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L",
        "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L",
        "RULE:^cn=(.*?),ou=(.*?),dc=(.*?),dc=(.*?)$/$1@$2/U",
        "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/U",
        "DEFAULT",
    ]))
    assert mapper.name("CN=Duke,OU=ServiceUsers,O=Org,C=US") == "duke"
    assert mapper.name("CN=Duke,OU=SME,O=mycp,L=Fulton,ST=MD,C=US") == "duke@sme"
    assert mapper.name("cn=duke,ou=sme,dc=mycp,dc=com") == "DUKE@SME"
    assert mapper.name("cN=duke,OU=JavaSoft,O=Sun Microsystems") == "DUKE"
    assert mapper.name("OU=JavaSoft,O=Sun Microsystems,C=US") == "OU=JavaSoft,O=Sun Microsystems,C=US"


@pytest.mark.parametrize(("expected", "rules"), [
    ("[]", ""),
    ("[DEFAULT]", "DEFAULT"),
    ("[RULE:/]", "RULE://"),
    ("[RULE:/.*]", "RULE:/.*/"),
    ("[RULE:/.*/L]", "RULE:/.*/L"),
    ("[RULE:/, DEFAULT]", "RULE://,DEFAULT"),
    ("[RULE:/, DEFAULT]", "  RULE:// ,  DEFAULT  "),
    ("[RULE:   /     , DEFAULT]", "  RULE:   /     / ,  DEFAULT  "),
    ("[RULE:  /     /U, DEFAULT]", "  RULE:  /     /U   ,DEFAULT  "),
    ("[RULE:([A-Z]*)/$1/U, RULE:([a-z]+)/$1, DEFAULT]", "  RULE:([A-Z]*)/$1/U   ,RULE:([a-z]+)/$1/,   DEFAULT  "),
    # empty rules are ignored
    ("[]", ",   , , ,      , , ,   "),
    ("[RULE:/, DEFAULT]", ",,RULE://,,,DEFAULT,,"),
    ("[RULE: /   , DEFAULT]", ",  , RULE: /   /    ,,,   DEFAULT, ,   "),
    ("[RULE:   /  /U, DEFAULT]", "     ,  , RULE:   /  /U    ,,  ,DEFAULT, ,"),
    # escape sequences
    ("[RULE:\\/\\\\\\(\\)\\n\\t/\\/\\/]", "RULE:\\/\\\\\\(\\)\\n\\t/\\/\\//"),
    ("[RULE:\\**\\/+/*/L, RULE:\\/*\\**/**]", "RULE:\\**\\/+/*/L,RULE:\\/*\\**/**/"),
    # rules rule
    ("[RULE:,RULE:,/,RULE:,\\//U, RULE:,/RULE:,, RULE:,RULE:,/L,RULE:,/L, RULE:, DEFAULT, /DEFAULT, DEFAULT]",
     "RULE:,RULE:,/,RULE:,\\//U,RULE:,/RULE:,/,RULE:,RULE:,/L,RULE:,/L,RULE:, DEFAULT, /DEFAULT/,DEFAULT"),
])
def test_kafka_rules_splitting(expected: str, rules: str) -> None:
    assert str(SslPrincipalMapper(rules)) == f"SslPrincipalMapper(rules = {expected})"


def test_kafka_comma_with_whitespace() -> None:
    mapper = SslPrincipalMapper("RULE:^CN=((\\\\, *|\\w)+)(,.*|$)/$1/,DEFAULT")
    assert mapper.name("CN=Tkac\\, Adam,OU=ITZ,DC=geodis,DC=cz") == "Tkac\\, Adam"


def test_default_rules_keep_the_whole_name() -> None:
    assert SslPrincipalMapper().name("CN=client,O=odradek") == "CN=client,O=odradek"
    assert SslPrincipalMapper(None).name("CN=a") == "CN=a"


def test_the_first_matching_rule_wins_and_no_match_is_refused() -> None:
    mapper = SslPrincipalMapper("RULE:^CN=([^,]+),O=odradek$/$1/,RULE:^CN=([^,]+).*$/other-$1/")
    assert mapper.name("CN=broker,O=odradek") == "broker"
    assert mapper.name("CN=broker,O=elsewhere") == "other-broker"
    with pytest.raises(NoMatchingRule, match="No rules apply to O=odradek"):
        mapper.name("O=odradek")


@pytest.mark.parametrize(("rule", "name", "expected"), [
    ("RULE:^CN=(.*),(.*),(.*)$/$1@$4/", "CN=a,b,c", "a@$4"),  # no group 4: kept as written (Kafka escapes it)
    ("RULE:^CN=(.*)$/$12/", "CN=a", "a2"),  # the longest group number the pattern has, as Java reads it
    ("RULE:^CN=(.*)$/\\$1-$1/", "CN=a", "$1-a"),  # \$ is a dollar sign
    ("RULE:^CN=(?P<user>.*)$/${user}/U", "CN=a", "A"),
    ("RULE:^CN=(.*)$/[$0]/", "CN=a", "[CN=a]"),
    ("RULE:^CN=(x)?(.*)$/$1$2/", "CN=a", "a"),  # a group that took no part is empty
    ("RULE:([A-Z]*)/x/", "ABC", "xx"),  # replaceAll also replaces the empty match at the end, as in Java
])
def test_java_replacement_syntax(rule: str, name: str, expected: str) -> None:
    assert SslPrincipalMapper(rule).name(name) == expected


@pytest.mark.parametrize("rules", ["RULE:^CN=(.*)$/$x/", "RULE:^CN=(.*)$/a\\/", "RULE:^CN=(.*$/$1/"])
def test_malformed_replacement_or_pattern_is_refused_when_read(rules: str) -> None:
    with pytest.raises(ValueError, match="Invalid rule"):
        SslPrincipalMapper(rules)


def test_patterns_are_ascii_like_javas() -> None:
    assert SslPrincipalMapper("RULE:^CN=(\\w+)$/$1/,DEFAULT").name("CN=zoë") == "CN=zoë"


def _name_der(*rdns: list[x509.NameAttribute]) -> bytes:
    return x509.Name([x509.RelativeDistinguishedName(rdn) for rdn in rdns]).public_bytes()


def test_rfc2253_name_is_last_rdn_first() -> None:
    der = _name_der([x509.NameAttribute(NameOID.COUNTRY_NAME, "US")],
                    [x509.NameAttribute(NameOID.ORGANIZATION_NAME, "odradek")],
                    [x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, "eng")],
                    [x509.NameAttribute(NameOID.COMMON_NAME, "client")])
    assert rfc2253_name(der) == "CN=client,OU=eng,O=odradek,C=US"


def test_rfc2253_name_escapes_as_java_does() -> None:
    der = _name_der([x509.NameAttribute(NameOID.ORGANIZATION_NAME, 'a,b=c+d<e>f#g;h"i\\j')],
                    [x509.NameAttribute(NameOID.COMMON_NAME, "  two spaces ")])
    # Java escapes = and # anywhere too (AVA.toRFC2253String), and every leading and trailing space
    assert rfc2253_name(der) == 'CN=\\ \\ two spaces\\ ,O=a\\,b\\=c\\+d\\<e\\>f\\#g\\;h\\"i\\\\j'


def test_rfc2253_name_writes_other_attributes_as_oid_and_hex() -> None:
    der = _name_der([x509.NameAttribute(NameOID.DOMAIN_COMPONENT, "com")],
                    [x509.NameAttribute(NameOID.DOMAIN_COMPONENT, "example")],
                    [x509.NameAttribute(NameOID.EMAIL_ADDRESS, "a@b")],
                    [x509.NameAttribute(NameOID.COMMON_NAME, "x"), x509.NameAttribute(NameOID.USER_ID, "u1")])
    # emailAddress is no RFC 2253 keyword: its IA5String (tag 0x16, 3 bytes) in hex
    assert rfc2253_name(der) == "CN=x+UID=u1,1.2.840.113549.1.9.1=#1603614062,DC=example,DC=com"


def test_rfc2253_name_of_other_string_types() -> None:
    der = _name_der([x509.NameAttribute(NameOID.COMMON_NAME, "zoë", _ASN1Type.BMPString)],
                    [x509.NameAttribute(NameOID.ORGANIZATION_NAME, "plain", _ASN1Type.PrintableString)])
    assert rfc2253_name(der) == "O=plain,CN=zoë"


def test_rfc2253_name_refuses_malformed_der() -> None:
    with pytest.raises(ValueError):
        rfc2253_name(b"\x30\x05\x31\x03")


def _self_signed(name: x509.Name) -> bytes:
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.now(timezone.utc)
    certificate = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
                   .serial_number(1).not_valid_before(now).not_valid_after(now + timedelta(days=1))
                   .sign(key, hashes.SHA256()))
    return certificate.public_bytes(serialization.Encoding.DER)


def test_certificate_dn_and_principal() -> None:
    ca = local_ca.create_ca()
    der = local_ca.issue(ca, "client").certificate.public_bytes(serialization.Encoding.DER)
    assert certificate_dn(der) == "CN=client,O=odradek"
    assert principal_for(der, SslPrincipalMapper()) == "User:CN=client,O=odradek"
    assert principal_for(der, SslPrincipalMapper("RULE:^CN=([^,]+),O=odradek$/$1/U")) == "User:CLIENT"
    assert principal_for(None, SslPrincipalMapper()) == ANONYMOUS == "User:ANONYMOUS"


def test_certificate_dn_of_a_certificate_made_elsewhere() -> None:
    name = x509.Name([x509.NameAttribute(NameOID.COUNTRY_NAME, "US"),
                      x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Sun Microsystems"),
                      x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, "JavaSoft"),
                      x509.NameAttribute(NameOID.COMMON_NAME, "Duke")])
    der = _self_signed(name)
    assert certificate_dn(der) == "CN=Duke,OU=JavaSoft,O=Sun Microsystems,C=US"
    assert principal_for(der, SslPrincipalMapper("RULE:^CN=(.*?),OU=(.*?),.*$/$1@$2/L")) == "User:duke@javasoft"
