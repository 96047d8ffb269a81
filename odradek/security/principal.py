"""Principals: who a connection is, and the mTLS principal taken from a client certificate.

Kafka's ``KafkaPrincipal`` and, for SSL listeners, its ``DefaultKafkaPrincipalBuilder`` with ``SslPrincipalMapper``:

- no client certificate -> ``User:ANONYMOUS``;
- otherwise the certificate's subject distinguished name, printed as Java's ``X500Principal.getName()`` prints it
  (RFC 2253: most specific RDN first, ``CN=alice,OU=eng,O=Acme,C=US``), is passed through
  ``ssl.principal.mapping.rules`` and the result is the name of a ``User`` principal.

DN printing, as Java does it: the keywords CN, C, L, ST, O, OU, STREET, DC and UID; any other attribute as its
dotted OID with ``#`` and the hex of the value's DER encoding (``1.2.840.113549.1.9.1=#1611...`` for an e-mail
address), as are values of string types Java does not print (NumericString, VisibleString, UniversalString).
Values escape ``, = + < > # ; " \\`` with a backslash, NUL as ``\\00``, and leading or trailing spaces.
Multi-valued RDNs join their attributes with ``+`` in the certificate's order.

Mapping rules, as Kafka parses them: a comma-separated list of ``DEFAULT`` (the DN itself) and
``RULE:pattern/replacement/`` with an optional ``L`` or ``U`` after the last slash (lower or upper case the
result); a pattern may hold commas, ``\\/`` is a slash inside pattern or replacement. Rules are tried in order;
the first whose pattern matches the whole DN gives the name (every match of the pattern replaced by the
replacement, Java's ``$n`` group references; a ``$n`` beyond the pattern's groups is literal text, as Kafka
makes it). No rule matching raises :class:`NoMatchingRule`: Kafka then fails the authentication. Patterns are
Python regular expressions; Java's named groups ``(?<name>...)`` are accepted.

Invariants:
- :func:`parse_mapping_rules` validates everything it can up front (regex syntax, replacement syntax) and raises
  :class:`PrincipalMappingError` naming ``ssl.principal.mapping.rules``; applying rules then raises only
  :class:`NoMatchingRule`.
- :func:`subject_dn` reads the subject's DER itself, so attribute order, string types and raw bytes are the
  certificate's, not a library's normalised view. A malformed certificate raises ``ValueError``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from cryptography import x509

MAPPING_RULES_KEY = "ssl.principal.mapping.rules"
USER_TYPE = "User"


@dataclass(frozen=True)
class KafkaPrincipal:
    """A principal as Kafka writes it: ``User:alice``."""

    principal_type: str
    name: str

    def __str__(self) -> str:
        return f"{self.principal_type}:{self.name}"


ANONYMOUS = KafkaPrincipal(USER_TYPE, "ANONYMOUS")


class PrincipalMappingError(ValueError):
    """A malformed ``ssl.principal.mapping.rules`` value; the message names the key and the bad rule."""

    key = MAPPING_RULES_KEY


class NoMatchingRule(Exception):
    """No mapping rule applies to a DN: the connection's authentication fails (Kafka's ``NoMatchingRule``)."""


# ----------------------------------------------------------------------------------------------------------------
# Subject distinguished names, as Java prints them


_KEYWORDS = {
    "2.5.4.3": "CN",
    "2.5.4.6": "C",
    "2.5.4.7": "L",
    "2.5.4.8": "ST",
    "2.5.4.10": "O",
    "2.5.4.11": "OU",
    "2.5.4.9": "STREET",
    "0.9.2342.19200300.100.1.25": "DC",
    "0.9.2342.19200300.100.1.1": "UID",
}
# DER string tags Java prints as text, with the codec it reads them with.
_STRING_TAGS = {0x0C: "utf-8", 0x13: "latin-1", 0x14: "latin-1", 0x16: "latin-1", 0x1B: "latin-1", 0x1E: "utf-16-be"}
_ESCAPED = frozenset(',=+<>#;"\\')


def _tlv(data: bytes, pos: int, end: int) -> tuple[int, int, int]:
    """(tag, content start, content end) of the DER element at ``pos``."""
    if pos + 2 > end:
        raise ValueError("truncated DER element")
    tag, length = data[pos], data[pos + 1]
    pos += 2
    if length & 0x80:
        count = length & 0x7F
        if not 1 <= count <= 4 or pos + count > end:
            raise ValueError("bad DER length")
        length = int.from_bytes(data[pos:pos + count], "big")
        pos += count
    if pos + length > end:
        raise ValueError("DER element overruns its container")
    return tag, pos, pos + length


def _children(data: bytes, start: int, end: int) -> list[tuple[int, int, int, int]]:
    """(tag, element start, content start, content end) of each element in data[start:end]."""
    out = []
    pos = start
    while pos < end:
        tag, cstart, cend = _tlv(data, pos, end)
        out.append((tag, pos, cstart, cend))
        pos = cend
    return out


def _oid(content: bytes) -> str:
    arcs: list[int] = []
    value = 0
    for byte in content:
        value = (value << 7) | (byte & 0x7F)
        if not byte & 0x80:
            arcs.append(value)
            value = 0
    if not arcs:
        raise ValueError("empty OID")
    first = min(arcs[0] // 40, 2)
    return ".".join(str(a) for a in (first, arcs[0] - 40 * first, *arcs[1:]))


def escape_dn_value(text: str) -> str:
    """Escape an attribute value as Java's RFC 2253 printer does."""
    escaped = "".join("\\" + c if c in _ESCAPED else "\\00" if c == "\0" else c for c in text)
    lead = len(escaped) - len(escaped.lstrip(" \r"))
    trail = len(escaped.rstrip(" \r"))
    if lead == len(escaped):
        trail = 0
    return "".join("\\" + c if i < lead or i >= trail else c for i, c in enumerate(escaped))


def _attribute(data: bytes, start: int, end: int) -> str:
    parts = _children(data, start, end)
    if len(parts) != 2 or parts[0][0] != 0x06:
        raise ValueError("bad AttributeTypeAndValue")
    oid = _oid(data[parts[0][2]:parts[0][3]])
    tag, vpos, vstart, vend = parts[1]
    keyword = _KEYWORDS.get(oid)
    if keyword is None or tag not in _STRING_TAGS:
        return f"{keyword or oid}=#{data[vpos:vend].hex()}"
    return f"{keyword}={escape_dn_value(data[vstart:vend].decode(_STRING_TAGS[tag], errors='replace'))}"


def dn_from_name_der(name_der: bytes) -> str:
    """RFC 2253 string of a DER-encoded X.501 Name, as Java's ``X500Principal.getName()``."""
    tag, start, end = _tlv(name_der, 0, len(name_der))
    if tag != 0x30:
        raise ValueError("a Name is a SEQUENCE")
    rdns = []
    for rtag, _, rstart, rend in _children(name_der, start, end):
        if rtag != 0x31:
            raise ValueError("an RDN is a SET")
        attributes = []
        for atag, _, astart, aend in _children(name_der, rstart, rend):
            if atag != 0x30:
                raise ValueError("an attribute is a SEQUENCE")
            attributes.append(_attribute(name_der, astart, aend))
        rdns.append("+".join(attributes))
    return ",".join(reversed(rdns))


def subject_dn(cert_der: bytes) -> str:
    """The subject DN of a DER certificate (``SSLObject.getpeercert(binary_form=True)``), as Java prints it."""
    cert = x509.load_der_x509_certificate(cert_der)
    return dn_from_name_der(cert.subject.public_bytes())


# ----------------------------------------------------------------------------------------------------------------
# ssl.principal.mapping.rules


_RULE_BODY = r"(DEFAULT)|RULE:((?:\\.|[^\\/])*)/((?:\\.|[^\\/])*)/([LU]?)(.*?)|(.*?)"
_RULE_SPLITTER = re.compile(r"\s*(" + _RULE_BODY + r")\s*(?:,\s*|$)")
_RULE_PARSER = re.compile(_RULE_BODY)
_JAVA_NAMED_GROUP = re.compile(r"(?<!\\)\(\?<(?=[A-Za-z])")


@dataclass(frozen=True)
class MappingRule:
    """One rule: ``pattern`` None is ``DEFAULT``; ``case`` is "", "L" or "U"."""

    pattern: re.Pattern[str] | None
    replacement: str = ""
    case: str = ""
    parts: tuple[str | int, ...] = ()  # the replacement as literal text and group numbers

    def apply(self, dn: str) -> str | None:
        """The mapped name, or None if the pattern does not match the whole DN."""
        if self.pattern is None:
            return dn
        if self.pattern.fullmatch(dn) is None:
            return None
        result = self.pattern.sub(self._expand, dn)
        if self.case == "L":
            return result.lower()
        if self.case == "U":
            return result.upper()
        return result

    def _expand(self, match: re.Match[str]) -> str:
        return "".join(p if isinstance(p, str) else (match.group(p) or "") for p in self.parts)

    def __str__(self) -> str:
        if self.pattern is None:
            return "DEFAULT"
        return f"RULE:{self.pattern.pattern}/{self.replacement}/{self.case}"


def _replacement_parts(replacement: str, groups: int, names: dict[str, int]) -> list[str | int]:
    """Java's replacement syntax as literal strings and group numbers; raises ValueError if malformed."""
    parts: list[str | int] = []
    i = 0
    while i < len(replacement):
        c = replacement[i]
        if c == "\\":
            if i + 1 == len(replacement):
                raise ValueError("the replacement ends with a lone backslash")
            parts.append(replacement[i + 1])
            i += 2
        elif c == "$":
            rest = replacement[i + 1:]
            named = re.match(r"\{([A-Za-z][A-Za-z0-9]*)\}", rest)
            if named:
                if named.group(1) not in names:
                    raise ValueError(f"the replacement names group {named.group(1)!r}, which the pattern lacks")
                parts.append(names[named.group(1)])
                i += 1 + named.end()
                continue
            if not rest[:1].isdigit():
                raise ValueError("a $ in the replacement must be followed by a group number (write \\$ for a $)")
            number = int(rest[0])
            if number > groups:
                # Kafka escapes references beyond the pattern's groups: they are literal text.
                if groups == 0:
                    raise ValueError(f"the replacement refers to ${number} but the pattern has no groups")
                parts.append("$")
                i += 1
                continue
            j = 1
            while j < len(rest) and rest[j].isdigit() and number * 10 + int(rest[j]) <= groups:
                number = number * 10 + int(rest[j])
                j += 1
            parts.append(number)
            i += 1 + j
        else:
            parts.append(c)
            i += 1
    return parts


def _bad_rule(rule: str, why: str) -> PrincipalMappingError:
    return PrincipalMappingError(f"{MAPPING_RULES_KEY}: invalid rule {rule!r}: {why}")


def parse_mapping_rules(text: str | None) -> tuple[MappingRule, ...]:
    """Parse ``ssl.principal.mapping.rules`` (None or blank: ``DEFAULT``). Raises :class:`PrincipalMappingError`."""
    if text is None or not text.strip():
        return (MappingRule(None),)
    rules: list[MappingRule] = []
    for found in _RULE_SPLITTER.finditer(text.strip()):
        rule = found.group(1)
        if not rule:
            continue
        parsed = _RULE_PARSER.match(rule)
        assert parsed is not None  # the last alternative matches anything
        if parsed.end() != len(rule) or parsed.group(5):
            unmatched = rule[parsed.end():] or parsed.group(5)
            raise _bad_rule(rule, f"unexpected {unmatched!r}; write DEFAULT or RULE:pattern/replacement/[L|U]")
        if parsed.group(1):
            rules.append(MappingRule(None))
            continue
        if parsed.group(2) is None:
            raise _bad_rule(rule, "write DEFAULT or RULE:pattern/replacement/[L|U]")
        try:
            pattern = re.compile(_JAVA_NAMED_GROUP.sub("(?P<", parsed.group(2)))
        except re.error as e:
            raise _bad_rule(rule, f"the pattern is not a valid regular expression ({e})") from None
        try:
            parts = _replacement_parts(parsed.group(3), pattern.groups, dict(pattern.groupindex))
        except ValueError as e:
            raise _bad_rule(rule, str(e)) from None
        rules.append(MappingRule(pattern, parsed.group(3), parsed.group(4), tuple(parts)))
    if not rules:
        raise PrincipalMappingError(f"{MAPPING_RULES_KEY}: {text!r} holds no rule; leave it unset for DEFAULT")
    return tuple(rules)


class SslPrincipalMapper:
    """Maps a DN to a principal name with ``ssl.principal.mapping.rules``."""

    def __init__(self, rules: str | None = None) -> None:
        self.rules = parse_mapping_rules(rules)

    def name(self, dn: str) -> str:
        """The first rule's result; raises :class:`NoMatchingRule` if no rule matches."""
        for rule in self.rules:
            result = rule.apply(dn)
            if result is not None:
                return result
        raise NoMatchingRule(f"no rule of {MAPPING_RULES_KEY} applies to {dn!r} (rules: "
                             f"{', '.join(str(r) for r in self.rules)})")

    def principal(self, peer_cert_der: bytes | None) -> KafkaPrincipal:
        """The principal of an SSL connection: ANONYMOUS without a client certificate, else the mapped subject DN.
        Raises :class:`NoMatchingRule` as :meth:`name` does."""
        if not peer_cert_der:
            return ANONYMOUS
        return KafkaPrincipal(USER_TYPE, self.name(subject_dn(peer_cert_der)))


def ssl_principal(peer_cert_der: bytes | None, rules: str | None = None) -> KafkaPrincipal:
    """One-shot form of :meth:`SslPrincipalMapper.principal` (parse rules once with the class on a hot path)."""
    return SslPrincipalMapper(rules).principal(peer_cert_der)
