"""JAAS login configuration, as Java's ConfigFile and Kafka's JaasConfig read it: pure text in,
sections of login modules out (the caller reads the file).

A JAAS file (``-Djava.security.auth.login.config=FILE``) holds named sections::

    KafkaServer {
        org.apache.kafka.common.security.plain.PlainLoginModule required
            username="admin" password="admin-secret"
            user_admin="admin-secret";
    };
    Client {   // ZooKeeper's client: DIGEST-MD5 with this user
        org.apache.zookeeper.server.auth.DigestLoginModule required username="kafka" password="k";
    };

Each section is ``NAME { MODULE FLAG [KEY=VALUE ...]; ... };``; the flag is required, requisite,
sufficient or optional (in any case). Kafka's ``sasl.jaas.config`` property is one module
entry without the section around it (``parse_jaas_config_property``).

Tokens as Java's StreamTokenizer makes them there: a value is a word (letters, digits and any
character but white space and ``{ } ; = " '``) or a string in double or single quotes, with
backslash escapes (``\\n``, ``\\t``, ``\\"``, ``\\\\``, octal ``\\101``; any other escaped
character stands for itself); ``// ...`` and ``/* ... */`` are comments between tokens. Stricter
than Java where Java would guess: a quote left open at the end of its line, a section or option
named twice, or an empty section is an error, not a silent truncation or a last-one-wins.
Java's ``${property}`` expansion is not done (odradek has no JVM system properties): the text
stays as written.
"""
from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field

#: the control flags of a login module (javax.security.auth.login.AppConfigurationEntry)
CONTROL_FLAGS = ("required", "requisite", "sufficient", "optional")

PLAIN_LOGIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM_LOGIN_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
#: ZooKeeper's DIGEST-MD5 login module: username/password in a client's section, user_NAME
#: options in the server's
DIGEST_LOGIN_MODULE = "org.apache.zookeeper.server.auth.DigestLoginModule"
#: Kafka's PlainLoginModule (and ZooKeeper's DigestLoginModule in a Server section) name each
#: user's password in an option user_<name>
USER_OPTION_PREFIX = "user_"

_SPECIAL = "{};="
_QUOTES = "\"'"
_ESCAPES = {"a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v"}


@dataclass(frozen=True)
class LoginModule:
    """One entry: the module's class, its control flag (lower case) and its options, in the
    order written; ``line`` is where the entry starts (for messages)."""

    class_name: str
    flag: str
    options: Mapping[str, str] = field(default_factory=dict)
    line: int = 0

    @property
    def simple_name(self) -> str:
        """The class name without its package (PlainLoginModule)."""
        return self.class_name.rpartition(".")[2]

    def __repr__(self) -> str:
        # options hold passwords: never in a log line or a traceback
        return f"LoginModule({self.class_name} {self.flag}, options {sorted(self.options)})"


@dataclass(frozen=True)
class JaasConfig:
    """A JAAS file's sections by name (names are case-sensitive, as in Java)."""

    sections: Mapping[str, tuple[LoginModule, ...]]

    def get(self, name: str) -> tuple[LoginModule, ...] | None:
        return self.sections.get(name)

    def section(self, name: str) -> tuple[LoginModule, ...]:
        """The modules of section ``name``; ValueError naming the sections there are."""
        found = self.sections.get(name)
        if found is None:
            have = ", ".join(sorted(self.sections)) or "none"
            raise ValueError(f"no {name} section in the JAAS configuration (sections: {have})")
        return found

    def module_options(self, section: str, class_name: str | None = None) -> dict[str, str]:
        """The options of the one login module of ``section`` (of ``class_name``, by full or
        simple name, when given): see ``module_options``."""
        try:
            return module_options(self.section(section), class_name)
        except ValueError as exc:
            raise ValueError(f"section {section}: {exc}") from None


@dataclass(frozen=True)
class _Token:
    kind: str  # "word", "string" or one of _SPECIAL
    text: str
    line: int


def _tokens(text: str) -> Iterator[_Token]:
    i, line, n = 0, 1, len(text)
    while i < n:
        c = text[i]
        if c == "\n":
            line += 1
            i += 1
        elif c.isspace():
            i += 1
        elif text.startswith("//", i):
            end = text.find("\n", i)
            i = n if end < 0 else end
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            if end < 0:
                raise ValueError(f"line {line}: a /* comment is not closed")
            line += text.count("\n", i, end)
            i = end + 2
        elif c in _SPECIAL:
            yield _Token(c, c, line)
            i += 1
        elif c in _QUOTES:
            value, i = _quoted(text, i, line)
            yield _Token("string", value, line)
        else:
            start = i
            while (i < n and not text[i].isspace() and text[i] not in _SPECIAL and text[i] not in _QUOTES
                   and not text.startswith(("//", "/*"), i)):
                i += 1
            yield _Token("word", text[start:i], line)


def _quoted(text: str, i: int, line: int) -> tuple[str, int]:
    """The string that opens at ``text[i]`` (a quote) with its escapes undone, and the index
    past its closing quote."""
    quote = text[i]
    out: list[str] = []
    i += 1
    n = len(text)
    while True:
        if i >= n or text[i] == "\n":
            raise ValueError(f"line {line}: the value opened with {quote} is not closed on its line")
        c = text[i]
        if c == quote:
            return "".join(out), i + 1
        if c != "\\":
            out.append(c)
            i += 1
            continue
        if i + 1 >= n or text[i + 1] == "\n":
            raise ValueError(f"line {line}: a backslash ends the line inside a quoted value")
        e = text[i + 1]
        if "0" <= e <= "7":  # up to three octal digits, at most \377 (StreamTokenizer's rule)
            j = i + 1
            limit = j + (3 if e <= "3" else 2)
            while j < limit and j < n and "0" <= text[j] <= "7":
                j += 1
            out.append(chr(int(text[i + 1:j], 8)))
            i = j
        else:
            out.append(_ESCAPES.get(e, e))
            i += 2


class _Parser:
    def __init__(self, text: str) -> None:
        self._tokens = _tokens(text)
        self._next: _Token | None = None
        self._last_line = 1
        self._advance()

    def _advance(self) -> None:
        self._next = next(self._tokens, None)
        if self._next is not None:
            self._last_line = self._next.line

    def peek(self) -> _Token | None:
        return self._next

    def take(self, what: str, *kinds: str) -> _Token:
        """The next token, which must be of one of ``kinds``; ValueError naming ``what`` was
        expected and what came instead."""
        token = self._next
        if token is None:
            raise ValueError(f"line {self._last_line}: the text ends where {what} is expected")
        if token.kind not in kinds:
            shown = f"{token.text!r}" if token.kind != "string" else f'the quoted value "{token.text}"'
            raise ValueError(f"line {token.line}: {what} is expected, not {shown}")
        self._advance()
        return token

    def module(self, closing: str | None) -> LoginModule:
        """``CLASS FLAG [KEY=VALUE ...];`` (``closing``: the token that may end the list, for
        the message when a ';' is missing before it)."""
        name = self.take("a login module class name", "word", "string")
        flag = self.take(f"the control flag of {name.text} ({', '.join(CONTROL_FLAGS)})", "word", "string")
        if flag.text.lower() not in CONTROL_FLAGS:
            raise ValueError(f"line {flag.line}: control flag {flag.text!r} of {name.text} is not one of "
                             f"{', '.join(CONTROL_FLAGS)}")
        options: dict[str, str] = {}
        while True:
            token = self.peek()
            if token is None:
                raise ValueError(f"line {self._last_line}: the entry of {name.text} (line {name.line}) is not "
                                 f"ended by ';'")
            if token.kind == ";":
                self._advance()
                break
            if closing is not None and token.kind == closing:
                raise ValueError(f"line {token.line}: the entry of {name.text} (line {name.line}) is not "
                                 f"ended by ';' before {closing!r}")
            key = self.take(f"an option name of {name.text} or ';'", "word", "string")
            self.take(f"'=' after option {key.text!r}", "=")
            value = self.take(f"the value of option {key.text!r}", "word", "string")
            if key.text in options:
                raise ValueError(f"line {key.line}: option {key.text!r} of {name.text} is given twice")
            options[key.text] = value.text
        return LoginModule(name.text, flag.text.lower(), options, name.line)


def parse_jaas(text: str) -> JaasConfig:
    """Every section of a JAAS file's text. ValueError naming the line and what is wrong."""
    parser = _Parser(text)
    sections: dict[str, tuple[LoginModule, ...]] = {}
    while parser.peek() is not None:
        name = parser.take("a section name (like KafkaServer or Client)", "word", "string")
        if name.text in sections:
            raise ValueError(f"line {name.line}: section {name.text} is given twice")
        parser.take(f"'{{' after section name {name.text}", "{")
        modules: list[LoginModule] = []
        while (token := parser.peek()) is not None and token.kind != "}":
            modules.append(parser.module("}"))
        closing = parser.take(f"'}}' closing section {name.text} (line {name.line})", "}")
        if not modules:
            raise ValueError(f"line {closing.line}: section {name.text} has no login module")
        parser.take(f"';' after the '}}' of section {name.text}", ";")
        sections[name.text] = tuple(modules)
    if not sections:
        raise ValueError("the JAAS configuration has no section")
    return JaasConfig(sections)


def parse_login_modules(text: str) -> list[LoginModule]:
    """The login module entries of a ``sasl.jaas.config`` value (no section around them)."""
    parser = _Parser(text)
    modules = []
    while parser.peek() is not None:
        modules.append(parser.module(None))
    if not modules:
        raise ValueError("no login module in the JAAS config")
    return modules


def parse_jaas_config_property(text: str) -> LoginModule:
    """The one login module of a ``sasl.jaas.config`` value, such as
    ``org.apache.kafka.common.security.plain.PlainLoginModule required username="a" password="b";``
    Kafka takes exactly one there (JaasContext: "should be 1 module")."""
    modules = parse_login_modules(text)
    if len(modules) != 1:
        raise ValueError(f"the JAAS config contains {len(modules)} login modules; it should be 1 module")
    return modules[0]


def module_options(modules: Sequence[LoginModule], class_name: str | None = None) -> dict[str, str]:
    """The options of the one module among ``modules`` (the one of ``class_name``, by full or
    simple name, when given). ValueError when there is none or more than one."""
    found = [m for m in modules if class_name is None or class_name in (m.class_name, m.simple_name)]
    if len(found) != 1:
        what = f"{class_name} login module" if class_name else "login module"
        names = ", ".join(m.class_name for m in modules) or "none"
        raise ValueError(f"{'no' if not found else len(found)} {what}{'s' if len(found) > 1 else ''} "
                         f"where exactly one is expected (modules: {names})")
    return dict(found[0].options)


def user_passwords(options: Mapping[str, str]) -> dict[str, str]:
    """user name -> password from the ``user_<name>="<password>"`` options (Kafka's
    PlainLoginModule in a KafkaServer section, ZooKeeper's DigestLoginModule in its Server
    section)."""
    return {key[len(USER_OPTION_PREFIX):]: value for key, value in options.items()
            if key.startswith(USER_OPTION_PREFIX) and len(key) > len(USER_OPTION_PREFIX)}


def digest_client_login(modules: Sequence[LoginModule]) -> tuple[str, str]:
    """(username, password) of a ZooKeeper client section (Kafka's "Client"): one
    DigestLoginModule with both options. ValueError otherwise, e.g. for a Kerberos module,
    which odradek does not speak."""
    others = [m.class_name for m in modules if m.class_name != DIGEST_LOGIN_MODULE]
    if others:
        raise ValueError(f"only {DIGEST_LOGIN_MODULE} (SASL DIGEST-MD5) is supported for ZooKeeper, "
                         f"not {', '.join(others)}")
    options = module_options(modules, DIGEST_LOGIN_MODULE)
    missing = [key for key in ("username", "password") if not options.get(key)]
    if missing:
        raise ValueError(f"{DIGEST_LOGIN_MODULE} lacks {' and '.join(missing)}")
    return options["username"], options["password"]
