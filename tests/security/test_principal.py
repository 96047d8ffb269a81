"""mTLS principals: subject DNs printed as Java prints them, and ssl.principal.mapping.rules as Kafka applies them."""

from __future__ import annotations

import re

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from hypothesis import given, settings
from hypothesis import strategies as st

from odradek.security.principal import (
    ANONYMOUS,
    KafkaPrincipal,
    NoMatchingRule,
    PrincipalMappingError,
    SslPrincipalMapper,
    dn_from_name_der,
    escape_dn_value,
    parse_mapping_rules,
    ssl_principal,
    subject_dn,
)
from tests.security import certs

CA = certs.make_ca()
KEY = ec.generate_private_key(ec.SECP256R1())


def cert_with(subject: x509.Name) -> bytes:
    return certs.issue(CA, None, subject_name=subject, sans=(), client=True, server=False, key=KEY).der


def attr(oid: x509.ObjectIdentifier, value: str, kind: x509.name._ASN1Type | None = None) -> x509.NameAttribute:
    return x509.NameAttribute(oid, value, kind) if kind else x509.NameAttribute(oid, value)


def test_principal_basics() -> None:
    assert str(ANONYMOUS) == "User:ANONYMOUS"
    assert str(KafkaPrincipal("User", "alice")) == "User:alice"
    assert ssl_principal(None) == ANONYMOUS
    assert ssl_principal(b"") == ANONYMOUS


def test_subject_dn_most_specific_first() -> None:
    der = cert_with(certs.name("alice", [("C", "US"), ("ST", "CA"), ("L", "SF"), ("O", "Acme"), ("OU", "eng")]))
    assert subject_dn(der) == "CN=alice,OU=eng,O=Acme,L=SF,ST=CA,C=US"
    assert ssl_principal(der) == KafkaPrincipal("User", "CN=alice,OU=eng,O=Acme,L=SF,ST=CA,C=US")


def test_subject_dn_java_keywords_and_oids() -> None:
    subject = x509.Name([
        attr(NameOID.DOMAIN_COMPONENT, "com"),
        attr(NameOID.DOMAIN_COMPONENT, "acme"),
        attr(NameOID.USER_ID, "u42"),
        attr(NameOID.STREET_ADDRESS, "Main St"),
        attr(NameOID.EMAIL_ADDRESS, "a@b.c"),
        attr(NameOID.SERIAL_NUMBER, "7"),
        attr(NameOID.COMMON_NAME, "alice"),
    ])
    # Java prints attributes it has no RFC 2253 keyword for as OID=#<DER of the value>: IA5String "a@b.c" is
    # 16 05 61 40 62 2e 63, PrintableString "7" is 13 01 37.
    assert subject_dn(cert_with(subject)) == (
        "CN=alice,2.5.4.5=#130137,1.2.840.113549.1.9.1=#1605614062 2e63".replace(" ", "")
        + ",STREET=Main St,UID=u42,DC=acme,DC=com"
    )


def test_subject_dn_escaping() -> None:
    subject = x509.Name([
        attr(NameOID.ORGANIZATION_NAME, 'Acme, Inc. + "Friends" <x>; #1 = \\'),
        attr(NameOID.COMMON_NAME, " two  spaces "),
        attr(NameOID.ORGANIZATIONAL_UNIT_NAME, "#lead"),
        attr(NameOID.LOCALITY_NAME, "Zürich"),
    ])
    assert subject_dn(cert_with(subject)) == (
        "L=Zürich,OU=\\#lead,CN=\\ two  spaces\\ ,O=Acme\\, Inc. \\+ \\\"Friends\\\" \\<x\\>\\; \\#1 \\= \\\\"
    )
    assert escape_dn_value("a\0b") == "a\\00b"
    assert escape_dn_value("  ") == "\\ \\ "


def test_subject_dn_string_types() -> None:
    subject = x509.Name([
        attr(NameOID.COUNTRY_NAME, "US", x509.name._ASN1Type.PrintableString),
        attr(NameOID.ORGANIZATION_NAME, "bmp", x509.name._ASN1Type.BMPString),
        attr(NameOID.ORGANIZATIONAL_UNIT_NAME, "vis", x509.name._ASN1Type.VisibleString),
        attr(NameOID.COMMON_NAME, "ia5", x509.name._ASN1Type.IA5String),
    ])
    # Java prints VisibleString values as hex even for keywords it knows.
    assert subject_dn(cert_with(subject)) == "CN=ia5,OU=#1a03766973,O=bmp,C=US"


def test_multi_valued_rdn() -> None:
    subject = x509.Name([
        x509.RelativeDistinguishedName([attr(NameOID.COUNTRY_NAME, "US")]),
        x509.RelativeDistinguishedName([attr(NameOID.COMMON_NAME, "alice"), attr(NameOID.USER_ID, "42")]),
    ])
    dn = subject_dn(cert_with(subject))
    assert dn in ("CN=alice+UID=42,C=US", "UID=42+CN=alice,C=US")
    # The DER order of the SET, which is what Java keeps.
    der_order = [a.oid for a in list(subject.rdns)[1]]
    assert dn.startswith("CN=" if der_order[0] == NameOID.COMMON_NAME else "UID=")


def test_malformed_name() -> None:
    with pytest.raises(ValueError):
        dn_from_name_der(b"\x31\x00")
    with pytest.raises(ValueError):
        dn_from_name_der(b"\x30\x05\x31\x03\x30\x01")


# ---------------------------------------------------------------------------------------------------------------
# Mapping rules (the cases of Kafka's SslPrincipalMapperTest, in spirit)


KAFKA_RULES = (
    "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,"
    "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L,"
    "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/U,"
    "DEFAULT"
)


@pytest.mark.parametrize(
    ("dn", "expected"),
    [
        ("CN=Duke,OU=ServiceUsers,O=Org,C=US", "Duke"),
        ("CN=Duke,OU=SME,O=mycp,L=Fulton,ST=MD,C=US", "duke@sme"),
        ("cn=duke,ou=sme,dc=mycp,dc=com", "DUKE"),
        ("cN=duke,OU=JavaSoft,O=Sun Microsystems", "DUKE"),
        ("OU=JavaSoft,O=Sun Microsystems,C=US", "OU=JavaSoft,O=Sun Microsystems,C=US"),
    ],
)
def test_kafka_rules(dn: str, expected: str) -> None:
    assert SslPrincipalMapper(KAFKA_RULES).name(dn) == expected


def test_rules_with_spaces_and_newlines_between() -> None:
    mapper = SslPrincipalMapper("  RULE:^CN=([^,]*),.*$/$1/L ,  DEFAULT  ")
    assert mapper.name("CN=Bob,O=x") == "bob"
    assert mapper.name("O=x") == "O=x"


def test_default_when_unset() -> None:
    assert SslPrincipalMapper(None).name("CN=a,O=b") == "CN=a,O=b"
    assert SslPrincipalMapper("").name("CN=a,O=b") == "CN=a,O=b"


def test_no_matching_rule() -> None:
    mapper = SslPrincipalMapper("RULE:^CN=([^,]*)$/$1/")
    with pytest.raises(NoMatchingRule, match=r"no rule of ssl\.principal\.mapping\.rules applies to 'OU=x'"):
        mapper.name("OU=x")
    der = cert_with(certs.name(None, [("OU", "x")]))
    with pytest.raises(NoMatchingRule):
        mapper.principal(der)


def test_replacement_syntax() -> None:
    # $n beyond the pattern's groups is literal, as Kafka escapes it; \$ and \/ are literal; ${name} works.
    assert SslPrincipalMapper("RULE:^CN=(.*?),O=(.*)$/$1@$2$3/").name("CN=a,O=b") == "a@b$3"
    assert SslPrincipalMapper(r"RULE:^CN=(.*?),O=(.*)$/\$1-$12\/x/").name("CN=a,O=b") == "$1-a2/x"
    assert SslPrincipalMapper(r"RULE:^CN=(?<user>[^,]*),.*$/${user}/U").name("CN=ann,O=b") == "ANN"
    assert SslPrincipalMapper(r"RULE:^CN=([^,]*)\/x,.*$/$1/").name("CN=a/x,O=b") == "a"
    assert SslPrincipalMapper("RULE:^CN=([^,]*),.*$/$0/").name("CN=a,O=b") == "CN=a,O=b"
    # The whole DN matched: replaceAll also meets the empty match at the end, as Java's does.
    assert SslPrincipalMapper("RULE:.*/x/").name("CN=a") == "xx"


@pytest.mark.parametrize(
    "rules",
    [
        "DEFAULTa",
        "DEFAULT/L",
        "DEFAULT/U",
        "RULE:/",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L/U",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/L",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/U",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/LU",
        "RULE:^CN=(.*?,OU=ServiceUsers.*$/$1/",
        "RULE:^CN=.*$/$1/",
        "RULE:^CN=(.*)$/$x/",
        "RULE:^CN=(.*)$/${nope}/",
        "RULE:^CN=(.*)$/abc\\/",
        "DEFAULT,garbage",
        " , ",
    ],
)
def test_invalid_rules(rules: str) -> None:
    with pytest.raises(PrincipalMappingError, match=r"^ssl\.principal\.mapping\.rules: ") as info:
        parse_mapping_rules(rules)
    assert info.value.key == "ssl.principal.mapping.rules"


# ---------------------------------------------------------------------------------------------------------------
# Properties: DNs of generated certificates against a small model of Java's printer; rules against a model


KEYWORD_OIDS = {"CN": NameOID.COMMON_NAME, "OU": NameOID.ORGANIZATIONAL_UNIT_NAME, "O": NameOID.ORGANIZATION_NAME,
                "L": NameOID.LOCALITY_NAME, "ST": NameOID.STATE_OR_PROVINCE_NAME, "DC": NameOID.DOMAIN_COMPONENT}
values = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=12)
dn_attributes = st.lists(st.tuples(st.sampled_from(sorted(KEYWORD_OIDS)), values), min_size=1, max_size=5)


def model_escape(value: str) -> str:
    """Java's escaping restated per position: specials and NUL anywhere, spaces/CRs at either end."""
    out = []
    for c in value:
        out.append("\\00" if c == "\0" else ("\\" + c if c in ',=+<>#;"\\' else c))
    text = "".join(out)
    stripped = text.strip(" \r")
    if not stripped:
        return "".join("\\" + c for c in text)
    start = text.index(stripped)
    end = start + len(stripped)
    return "".join("\\" + c for c in text[:start]) + stripped + "".join("\\" + c for c in text[end:])


@settings(max_examples=60, deadline=None)
@given(dn_attributes)
def test_subject_dn_matches_model(pairs: list[tuple[str, str]]) -> None:
    subject = x509.Name([attr(KEYWORD_OIDS[k], v, x509.name._ASN1Type.UTF8String) for k, v in pairs])
    expected = ",".join(f"{k}={model_escape(v)}" for k, v in reversed(pairs))
    assert dn_from_name_der(subject.public_bytes()) == expected


simple_values = st.text("abcXYZ019.-_ ", min_size=1, max_size=8).map(str.strip).filter(bool)
rule_specs = st.lists(
    st.one_of(st.just(("DEFAULT", "")), st.tuples(st.sampled_from(["CN", "OU", "O", "DC"]), st.sampled_from("LU "))),
    min_size=1, max_size=4,
)


def model_map(pairs: list[tuple[str, str]], specs: list[tuple[str, str]]) -> str | None:
    dn = ",".join(f"{k}={v}" for k, v in pairs)
    for keyword, case in specs:
        if keyword == "DEFAULT":
            return dn
        found = [v for k, v in pairs if k == keyword]
        if found:
            value = found[-1]  # the rule's leading .* is greedy: the last occurrence
            return value.lower() if case == "L" else value.upper() if case == "U" else value
    return None


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["CN", "OU", "O", "DC", "C"]), simple_values), min_size=1, max_size=5),
       rule_specs)
def test_mapping_rules_match_model(pairs: list[tuple[str, str]], specs: list[tuple[str, str]]) -> None:
    text = ",".join(
        "DEFAULT" if k == "DEFAULT" else f"RULE:^(?:.*,)?{k}=([^,]*)(?:,.*)?$/$1/{c.strip()}" for k, c in specs
    )
    mapper = SslPrincipalMapper(text)
    dn = ",".join(f"{k}={v}" for k, v in pairs)
    expected = model_map(pairs, specs)
    if expected is None:
        with pytest.raises(NoMatchingRule):
            mapper.name(dn)
    else:
        assert mapper.name(dn) == expected


@settings(max_examples=100, deadline=None)
@given(st.lists(st.text("abc/\\$,x", max_size=6), min_size=1, max_size=3))
def test_rule_parser_never_crashes(pieces: list[str]) -> None:
    text = "RULE:" + "/".join(pieces)
    try:
        rules = parse_mapping_rules(text)
    except PrincipalMappingError as e:
        assert str(e).startswith("ssl.principal.mapping.rules: ")
    else:
        for rule in rules:
            assert rule.pattern is None or isinstance(rule.pattern, re.Pattern)
