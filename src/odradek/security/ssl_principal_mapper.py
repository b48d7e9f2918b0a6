"""Who a TLS client is: Kafka's SslPrincipalMapper (``ssl.principal.mapping.rules``) applied to the
distinguished name of the client's certificate, written as Java's X500Principal.getName() writes it
(RFC 2253), the way DefaultKafkaPrincipalBuilder names an SSL connection's principal:

    certificate subject   C=US, O=odradek, OU=eng, CN=client        (the order in the certificate)
    RFC 2253 name         CN=client,OU=eng,O=odradek,C=US           (last RDN first)
    rules                 RULE:^CN=([^,]+),.*$/$1/L,DEFAULT
    principal             User:client

A client that shows no certificate (``ssl.client.auth=requested`` or ``none``) is User:ANONYMOUS.

The rules: ``RULE:pattern/replacement/`` with an optional L or U after the last slash (lower or
upper case the result), and ``DEFAULT`` (the whole name), separated by commas; the first rule whose
pattern matches the whole name gives the principal. They are split and parsed with Kafka's own
grammar, so a rule list Kafka accepts or refuses is accepted or refused here, and the
replacement keeps Java's syntax: ``$1`` is the first group, ``\\$`` a dollar sign, and a ``$n``
naming a group the pattern does not have stays as it is written (Kafka escapes those).

Where this differs from Kafka: the pattern is a Python regular expression, compiled ASCII-only
like Java's default (``\\w`` is [a-zA-Z0-9_]); the common constructs mean the same, Java-only ones
(``(?<name>...)``, ``\\p{Lu}``) are refused as an invalid rule when the rules are read, not when a
client connects. A replacement naming a group of a pattern without groups is kept as written where
Java fails the connection, and a malformed replacement (``$x``) is refused when the rules are read.
"""
from __future__ import annotations

import re
import ssl
from collections.abc import Iterator
from dataclasses import dataclass

#: BrokerSecurityConfigs.DEFAULT_SSL_PRINCIPAL_MAPPING_RULES
DEFAULT_RULES = "DEFAULT"
ANONYMOUS = "User:ANONYMOUS"
USER_TYPE = "User"

# Kafka's grammar of one rule, and of a rule followed by its comma; the last alternative takes
# anything else, which parse_rules() then refuses (or ignores when empty).
_RULE = r"(DEFAULT)|RULE:((\\.|[^\\/])*)/((\\.|[^\\/])*)/([LU]?).*?|(.*?)"
_RULE_SPLITTER = re.compile(r"\s*(" + _RULE + r")\s*(,\s*|$)")
_RULE_PARSER = re.compile(_RULE)
_DIGITS = re.compile(r"[0-9]+")
_GROUP_NAME = re.compile(r"\{([A-Za-z][A-Za-z0-9]*)\}")


class NoMatchingRule(ValueError):
    """No rule applies to a name (Kafka's SslPrincipalMapper.NoMatchingRule): the connection is
    refused, since no principal can be given to it."""


#: a literal piece of a replacement, or the number of the group to put there
_Part = str | int


@dataclass(frozen=True, slots=True)
class Rule:
    """One rule: DEFAULT (``pattern`` None), or a pattern, its Java-syntax replacement and the case
    to put the result in (``case`` "L", "U" or "")."""

    pattern: re.Pattern[str] | None
    replacement: str = ""
    case: str = ""
    parts: tuple[_Part, ...] = ()

    def apply(self, name: str) -> str | None:
        """The principal name this rule gives ``name``, None when its pattern does not match the
        whole name. Like Java's String.replaceAll, every match of the pattern is replaced, so a
        pattern that can also match the empty string at the end adds the replacement twice."""
        if self.pattern is None:
            return name
        if self.pattern.fullmatch(name) is None:
            return None
        result = self.pattern.sub(self._expand, name)
        if self.case == "L":
            return result.lower()
        return result.upper() if self.case == "U" else result

    def _expand(self, match: re.Match[str]) -> str:
        return "".join(part if isinstance(part, str) else (match.group(part) or "") for part in self.parts)

    def __str__(self) -> str:
        """Kafka's Rule.toString (its tests compare these)."""
        if self.pattern is None:
            return "DEFAULT"
        return f"RULE:{self.pattern.pattern}/{self.replacement}" + (f"/{self.case}" if self.case else "")


def _replacement_parts(replacement: str, pattern: re.Pattern[str]) -> tuple[_Part, ...]:
    """A Java replacement string (Matcher.appendReplacement's syntax) as literal pieces and group
    numbers: ``\\x`` is x, ``$12`` the longest group number the pattern has (group 1 then "2" when
    it has fewer than 12), ``${name}`` a named group. A ``$n`` beyond the groups is literal, as
    Kafka's escapeLiteralBackReferences makes it."""
    parts: list[_Part] = []
    literal: list[str] = []
    i = 0
    while i < len(replacement):
        char = replacement[i]
        if char == "\\":
            if i + 1 == len(replacement):
                raise ValueError(f"replacement {replacement!r} ends in a lone backslash")
            literal.append(replacement[i + 1])
            i += 2
            continue
        if char != "$":
            literal.append(char)
            i += 1
            continue
        group, i = _group_reference(replacement, i, pattern)
        if isinstance(group, str):
            literal.append(group)
            continue
        if literal:
            parts.append("".join(literal))
            literal.clear()
        parts.append(group)
    if literal:
        parts.append("".join(literal))
    return tuple(parts)


def _group_reference(replacement: str, dollar: int, pattern: re.Pattern[str]) -> tuple[_Part, int]:
    """The group a ``$`` at ``dollar`` names (or the literal text it stays as) and where the
    replacement goes on."""
    digits = _DIGITS.match(replacement, dollar + 1)
    if digits is not None:
        text = digits.group()
        if int(text[0]) > pattern.groups:
            return "$" + text, digits.end()
        number, used = int(text[0]), 1
        while used < len(text) and number * 10 + int(text[used]) <= pattern.groups:
            number, used = number * 10 + int(text[used]), used + 1
        return number, dollar + 1 + used
    named = _GROUP_NAME.match(replacement, dollar + 1)
    if named is not None and named.group(1) in pattern.groupindex:
        return pattern.groupindex[named.group(1)], named.end()
    raise ValueError(f"replacement {replacement!r}: illegal group reference at {replacement[dollar:dollar + 8]!r}")


def _split_rules(rules: str) -> Iterator[str]:
    """SslPrincipalMapper.splitRules: the rules of the config value, found the way Java's
    Matcher.find() walks a string (after an empty match the search goes on one character later)."""
    text = rules.strip()
    position = 0
    while position <= len(text):
        match = _RULE_SPLITTER.search(text, position)
        if match is None:
            return
        yield match.group(1)
        position = match.end() if match.end() > match.start() else match.end() + 1


def _parse_rule(text: str) -> Rule | None:
    """One rule, None for an empty one (Kafka ignores those); ValueError for anything else."""
    match = _RULE_PARSER.match(text)
    if match is None or match.end() != len(text):
        unmatched = text[match.end():] if match is not None else text
        raise ValueError(f"Invalid rule: `{text}`, unmatched substring: `{unmatched}`")
    if match.group(1) is not None:
        return Rule(None)
    if match.group(2) is None:
        return None
    source, replacement, case = match.group(2), match.group(4), match.group(6)
    try:
        pattern = re.compile(source, re.ASCII)
        parts = _replacement_parts(replacement, pattern)
    except (re.error, ValueError) as e:
        raise ValueError(f"Invalid rule: `{text}`: {e}") from None
    return Rule(pattern, replacement, case, parts)


def parse_rules(rules: str | None) -> tuple[Rule, ...]:
    """The rules of an ``ssl.principal.mapping.rules`` value (None: Kafka's default, DEFAULT);
    ValueError naming the first invalid one."""
    parsed = (_parse_rule(text) for text in _split_rules(DEFAULT_RULES if rules is None else rules))
    return tuple(rule for rule in parsed if rule is not None)


class SslPrincipalMapper:
    """The rules of one listener, applied in order to a distinguished name."""

    def __init__(self, rules: str | None = None) -> None:
        self.rules = parse_rules(rules)

    def name(self, distinguished_name: str) -> str:
        """The principal name (without "User:") of an RFC 2253 name; NoMatchingRule when no rule
        applies (a list without DEFAULT can leave a name unmatched)."""
        for rule in self.rules:
            mapped = rule.apply(distinguished_name)
            if mapped is not None:
                return mapped
        raise NoMatchingRule(f"No rules apply to {distinguished_name}, rules [{', '.join(map(str, self.rules))}]")

    def __str__(self) -> str:
        return f"SslPrincipalMapper(rules = [{', '.join(map(str, self.rules))}])"


# --- the distinguished name, as Java's X500Principal.getName() writes it -----------------------

#: the attribute types Java's RFC 2253 form names by keyword (AVAKeyword's RFC 2253 set); the
#: others are written as their OID with the value as #hex of its DER encoding
_RFC2253_KEYWORDS = {
    "2.5.4.3": "CN",
    "2.5.4.6": "C",
    "2.5.4.7": "L",
    "2.5.4.8": "ST",
    "2.5.4.9": "STREET",
    "2.5.4.10": "O",
    "2.5.4.11": "OU",
    "0.9.2342.19200300.100.1.1": "UID",
    "0.9.2342.19200300.100.1.25": "DC",
}
#: the DER string types Java writes as text (AVA.isDerString, non-canonical) and their encodings
_STRING_TAGS = {12: "utf-8", 19: "ascii", 20: "latin-1", 22: "ascii", 27: "latin-1", 30: "utf-16-be"}
#: escaped with a backslash wherever they stand (AVA.toRFC2253String's escapees)
_ESCAPED = frozenset(',=+<>#;"\\')
_SEQUENCE, _SET, _OID = 0x30, 0x31, 0x06


def _der_elements(data: bytes) -> Iterator[tuple[int, bytes, bytes]]:
    """The (tag, contents, whole encoding) of each DER element in ``data``; ValueError if it is
    cut short. Certificates only use the short tags, so a tag is one byte."""
    position = 0
    while position < len(data):
        if position + 2 > len(data):
            raise ValueError("truncated DER element")
        tag, length, header = data[position], data[position + 1], 2
        if length & 0x80:
            size = length & 0x7F
            length = int.from_bytes(data[position + 2:position + 2 + size], "big")
            header += size
        end = position + header + length
        if end > len(data):
            raise ValueError("truncated DER element")
        yield tag, data[position + header:end], data[position:end]
        position = end


def _only(data: bytes, tag: int, what: str) -> bytes:
    elements = list(_der_elements(data))
    if len(elements) != 1 or elements[0][0] != tag:
        raise ValueError(f"not a DER {what}")
    return elements[0][1]


def _oid(contents: bytes) -> str:
    arcs: list[int] = []
    value = 0
    for byte in contents:
        value = (value << 7) | (byte & 0x7F)
        if not byte & 0x80:
            arcs.append(value)
            value = 0
    if not arcs:
        raise ValueError("empty OID")
    first = min(arcs[0] // 40, 2)
    return ".".join(str(arc) for arc in (first, arcs[0] - 40 * first, *arcs[1:]))


def _escape_value(text: str) -> str:
    """AVA.toRFC2253String's escaping of a text value: the special characters anywhere, NUL as
    \\00, and leading or trailing spaces and carriage returns."""
    chars = ["\\" + c if c in _ESCAPED else ("\\00" if c == "\x00" else c) for c in text]
    lead = 0
    while lead < len(chars) and chars[lead] in (" ", "\r"):
        lead += 1
    trail = len(chars)
    while trail > lead and chars[trail - 1] in (" ", "\r"):
        trail -= 1
    return "".join(("\\" + c if i < lead or i >= trail else c) for i, c in enumerate(chars))


def _attribute(encoding: bytes) -> str:
    """One AttributeTypeAndValue as Java writes it in an RFC 2253 name."""
    (oid_tag, oid, _), (value_tag, value, whole) = list(_der_elements(_only(encoding, _SEQUENCE, "attribute")))
    if oid_tag != _OID:
        raise ValueError("attribute type is not an OID")
    dotted = _oid(oid)
    keyword = _RFC2253_KEYWORDS.get(dotted)
    if keyword is None or value_tag not in _STRING_TAGS:
        return f"{keyword or dotted}=#{whole.hex()}"
    return f"{keyword}={_escape_value(value.decode(_STRING_TAGS[value_tag], errors='replace'))}"


def rfc2253_name(name_der: bytes) -> str:
    """The RFC 2253 string of a DER X.509 Name, as Java's X500Principal.getName() gives it (the
    name Kafka's principal mapping rules see): relative names last to first, joined by commas,
    the attributes of a multi-valued one joined by "+" in their encoded order; the RFC 2253
    keywords (CN, C, L, ST, STREET, O, OU, UID, DC) with their text escaped, any other attribute
    (emailAddress, serialNumber) as its OID and #hex value. ValueError for malformed DER."""
    rdns = []
    for tag, contents, _ in _der_elements(_only(name_der, _SEQUENCE, "Name")):
        if tag != _SET:
            raise ValueError("relative name is not a SET")
        rdns.append("+".join(_attribute(whole) for _, _, whole in _der_elements(contents)))
    return ",".join(reversed(rdns))


def _subject_der(certificate_der: bytes) -> bytes:
    """The subject Name of a DER certificate: the sixth field of its TBSCertificate after the
    optional [0] version (serial, signature algorithm, issuer, validity, subject)."""
    certificate = _only(certificate_der, _SEQUENCE, "certificate")
    tbs = next(_der_elements(certificate), None)
    if tbs is None or tbs[0] != _SEQUENCE:
        raise ValueError("not a DER certificate")
    fields = [whole for tag, _, whole in _der_elements(tbs[1]) if tag != 0xA0]
    if len(fields) < 5:
        raise ValueError("certificate without a subject")
    return fields[4]


def certificate_dn(certificate_der: bytes) -> str:
    """The RFC 2253 subject name of a DER certificate (``SSLObject.getpeercert(binary_form=True)``)."""
    return rfc2253_name(_subject_der(certificate_der))


def principal_for(certificate_der: bytes | None, mapper: SslPrincipalMapper) -> str:
    """DefaultKafkaPrincipalBuilder's principal of an SSL connection: User:ANONYMOUS without a
    client certificate, else "User:" and the mapped name of its subject. NoMatchingRule when no
    rule applies, which fails the connection in Kafka."""
    if certificate_der is None:
        return ANONYMOUS
    return f"{USER_TYPE}:{mapper.name(certificate_dn(certificate_der))}"


def peer_principal(connection: ssl.SSLObject | ssl.SSLSocket, mapper: SslPrincipalMapper) -> str:
    """The principal of a finished handshake's peer (an asyncio transport's ``ssl_object`` or a
    blocking SSLSocket). The certificate is read in binary form: the dict form is empty when the
    context did not verify it, and it drops the string types Java's name depends on."""
    return principal_for(connection.getpeercert(binary_form=True), mapper)
