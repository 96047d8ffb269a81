"""Kafka's ``sasl.jaas.config`` values: one JAAS login-module entry on one line.

What server.properties (``listener.name.<l>.<mechanism>.sasl.jaas.config``) and client configs hold::

    org.apache.kafka.common.security.plain.PlainLoginModule required
        username="admin" password="admin-secret" user_admin="admin-secret" user_alice="alice-secret";

Grammar, as Kafka's JaasConfig reads it (a java.io.StreamTokenizer)::

    config  = entry                      ; exactly one, as Kafka's JaasContext demands of this property
    entry   = module flag option* ";"
    module  = word                       ; the login module class
    flag    = "required" | "requisite" | "sufficient" | "optional"   (any case)
    option  = word "=" (word | quoted)
    word    = 1*(letter / digit / "." / "_" / "-" / "$")
    quoted  = '"' ... '"' | "'" ... "'"  ; backslash escapes as Java's: \\n \\t \\r \\b \\f \\a \\v,
                                         ; octal \\0-\\377, and \\<c> for any other c (so \\" and \\\\)

Whitespace (newlines included) and ``// ...`` and ``/* ... */`` comments separate tokens.

Invariants:

- ``parse_jaas_config`` returns a ``JaasConfig`` or raises ``JaasConfigError``, whose message names what is
  wrong and where (line and column) and never quotes an option's value, since values hold passwords.
  Kafka's wording is kept where it has one ("JAAS config entry not terminated by semi-colon").
- ``repr(JaasConfig)`` shows option names, never their values.
- Stricter than Kafka in two places, both mistakes in practice: an option given twice is refused (Kafka
  keeps the last), and a quoted value may not run past the end of its line (Kafka silently ends it there).
- Pure and immutable.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final

PLAIN_LOGIN_MODULE: Final = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM_LOGIN_MODULE: Final = "org.apache.kafka.common.security.scram.ScramLoginModule"
#: Prefix of the PLAIN server's user options: ``user_<name>="<password>"``.
PLAIN_USER_PREFIX: Final = "user_"

_WORD_EXTRA: Final = frozenset("._-$")
_ESCAPES: Final = {"a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v"}


class ControlFlag(enum.Enum):
    REQUIRED = "required"
    REQUISITE = "requisite"
    SUFFICIENT = "sufficient"
    OPTIONAL = "optional"


class JaasConfigError(ValueError):
    """A JAAS config value that cannot be used. Never quotes an option's value."""

    def __init__(self, message: str, position: int | None = None, text: str = "") -> None:
        if position is not None:
            line = text.count("\n", 0, position) + 1
            column = position - (text.rfind("\n", 0, position) + 1) + 1
            message = f"{message} (at line {line}, column {column})"
        super().__init__(message)
        self.position = position


@dataclass(frozen=True, repr=False)
class JaasConfig:
    """One login-module entry: its class, control flag and options (read-only)."""

    login_module: str
    control_flag: ControlFlag
    options: Mapping[str, str]

    def __repr__(self) -> str:
        names = ", ".join(sorted(self.options))
        return f"JaasConfig({self.login_module}, {self.control_flag.value}, options=[{names}])"

    __str__ = __repr__


class _Token(enum.Enum):
    WORD = "a word"
    QUOTED = "a quoted value"
    EQUALS = "'='"
    SEMICOLON = "';'"
    END = "the end of the value"


class _Lexer:
    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0

    def error(self, message: str, position: int) -> JaasConfigError:
        return JaasConfigError(message, position, self.text)

    def _skip_space(self) -> None:
        text = self.text
        while self.pos < len(text):
            if text[self.pos].isspace():
                self.pos += 1
            elif text.startswith("//", self.pos):
                end = text.find("\n", self.pos)
                self.pos = len(text) if end < 0 else end + 1
            elif text.startswith("/*", self.pos):
                end = text.find("*/", self.pos + 2)
                if end < 0:
                    raise self.error("unterminated /* comment", self.pos)
                self.pos = end + 2
            else:
                return

    def next(self) -> tuple[_Token, str, int]:
        """The next token, its text (unescaped for quoted values) and where it starts."""
        self._skip_space()
        start, text = self.pos, self.text
        if start >= len(text):
            return _Token.END, "", start
        char = text[start]
        if char in "=;":
            self.pos += 1
            return (_Token.EQUALS if char == "=" else _Token.SEMICOLON), char, start
        if char in "\"'":
            return _Token.QUOTED, self._quoted(char), start
        end = start
        while end < len(text) and (text[end].isalnum() or text[end] in _WORD_EXTRA):
            end += 1
        if end == start:
            raise self.error(
                "unexpected character (a value with characters other than letters, digits and ._-$ must be quoted)",
                start,
            )
        self.pos = end
        return _Token.WORD, text[start:end], start

    def _quoted(self, quote: str) -> str:
        text, start = self.text, self.pos
        out: list[str] = []
        i = start + 1
        while i < len(text):
            char = text[i]
            if char == quote:
                self.pos = i + 1
                return "".join(out)
            if char in "\r\n":
                break
            if char == "\\" and i + 1 < len(text):
                i, char = self._escape(i + 1)
            else:
                i += 1
            out.append(char)
        raise self.error("unterminated quoted value (a quoted value ends on its own line)", start)

    def _escape(self, i: int) -> tuple[int, str]:
        """The character an escape starting at ``text[i]`` (after the backslash) stands for, and what follows."""
        text = self.text
        char = text[i]
        if char in "01234567":
            digits = 3 if char <= "3" else 2
            end = i
            while end < len(text) and end - i < digits and text[end] in "01234567":
                end += 1
            return end, chr(int(text[i:end], 8))
        return i + 1, _ESCAPES.get(char, char)


def parse_jaas_config(text: str) -> JaasConfig:
    """Parse one ``sasl.jaas.config`` value (see the module docstring); ``JaasConfigError`` if unusable."""
    lexer = _Lexer(text)
    kind, module, position = lexer.next()
    if kind is _Token.END:
        raise JaasConfigError("Login module not specified in JAAS config")
    if kind is not _Token.WORD:
        raise lexer.error(f"expected the login module class, found {kind.value}", position)
    kind, flag_text, position = lexer.next()
    if kind is _Token.END:
        raise lexer.error("Login module control flag not specified in JAAS config", position)
    try:
        flag = ControlFlag(flag_text.lower()) if kind is _Token.WORD else None
    except ValueError:
        flag = None
    if flag is None:
        shown = repr(flag_text[:40]) if kind is _Token.WORD else kind.value
        raise lexer.error(
            f"Invalid login module control flag {shown} in JAAS config: expected required, requisite, "
            "sufficient or optional",
            position,
        )
    options = _options(lexer)
    kind, _, position = lexer.next()
    if kind is not _Token.END:
        raise lexer.error("JAAS config property contains more than one login module, should be 1 module", position)
    return JaasConfig(module, flag, MappingProxyType(options))


def _options(lexer: _Lexer) -> dict[str, str]:
    """Options up to and including the entry's ';'."""
    options: dict[str, str] = {}
    while True:
        kind, key, position = lexer.next()
        if kind is _Token.SEMICOLON:
            return options
        if kind is _Token.END:
            raise lexer.error("JAAS config entry not terminated by semi-colon", position)
        if kind is not _Token.WORD:
            raise lexer.error(f"expected an option name or ';', found {kind.value}", position)
        kind, _, equals_at = lexer.next()
        if kind is not _Token.EQUALS:
            raise lexer.error(f"Value not specified for key '{key}' in JAAS config: expected '='", equals_at)
        kind, value, value_at = lexer.next()
        if kind not in (_Token.WORD, _Token.QUOTED):
            raise lexer.error(f"Value not specified for key '{key}' in JAAS config", value_at)
        if key in options:
            raise lexer.error(f"option '{key}' is given twice in JAAS config", position)
        options[key] = value


def plain_users(config: JaasConfig) -> dict[str, str]:
    """The PLAIN server's users and passwords, from its ``user_<name>="<password>"`` options.

    ``JaasConfigError`` if ``config`` is not a PlainLoginModule entry (Kafka reads these options only there).
    """
    if config.login_module != PLAIN_LOGIN_MODULE:
        raise JaasConfigError(f"PLAIN users are read from a {PLAIN_LOGIN_MODULE} entry, not {config.login_module}")
    return {
        key[len(PLAIN_USER_PREFIX) :]: value
        for key, value in config.options.items()
        if key.startswith(PLAIN_USER_PREFIX) and len(key) > len(PLAIN_USER_PREFIX)
    }


def client_credentials(config: JaasConfig) -> tuple[str, str]:
    """The ``(username, password)`` a client (or a broker, to other brokers) logs in with.

    ``JaasConfigError`` naming the option that is missing.
    """
    missing = [name for name in ("username", "password") if name not in config.options]
    if missing:
        raise JaasConfigError(f"JAAS config for {config.login_module} has no {' or '.join(missing)} option")
    return config.options["username"], config.options["password"]
