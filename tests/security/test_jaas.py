"""Kafka's sasl.jaas.config values: the lines server.properties and clients hold, and every kind of mistake."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from odradek.security.jaas import (
    PLAIN_LOGIN_MODULE,
    SCRAM_LOGIN_MODULE,
    ControlFlag,
    JaasConfig,
    JaasConfigError,
    client_credentials,
    parse_jaas_config,
    plain_users,
)

PLAIN_BROKER = (
    'org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" password="admin-secret" '
    'user_admin="admin-secret" user_alice="alice-secret";'
)
SCRAM_CLIENT = 'org.apache.kafka.common.security.scram.ScramLoginModule required username="admin" password="x";'


def test_the_plain_broker_line() -> None:
    config = parse_jaas_config(PLAIN_BROKER)
    assert config.login_module == PLAIN_LOGIN_MODULE
    assert config.control_flag is ControlFlag.REQUIRED
    assert dict(config.options) == {
        "username": "admin",
        "password": "admin-secret",
        "user_admin": "admin-secret",
        "user_alice": "alice-secret",
    }
    assert plain_users(config) == {"admin": "admin-secret", "alice": "alice-secret"}
    assert client_credentials(config) == ("admin", "admin-secret")


def test_the_scram_client_line() -> None:
    config = parse_jaas_config(SCRAM_CLIENT)
    assert config.login_module == SCRAM_LOGIN_MODULE
    assert client_credentials(config) == ("admin", "x")
    with pytest.raises(JaasConfigError, match="PlainLoginModule"):
        plain_users(config)


@pytest.mark.parametrize("flag", ["required", "REQUISITE", "Sufficient", "optional"])
def test_control_flags_in_any_case(flag: str) -> None:
    assert parse_jaas_config(f"m {flag};").control_flag is ControlFlag(flag.lower())


def test_layout_quoting_and_escapes() -> None:
    text = """
        // the broker's own login
        org.apache.kafka.common.security.plain.PlainLoginModule   required
            username = admin   /* unquoted */
            password='single "quotes" too'
            user_bob="a \\"quoted\\" word, a back\\\\slash; \\n\\t and \\101\\0"
            token=$abc-1.2_x
            empty="";
    """
    options = parse_jaas_config(text).options
    assert options["username"] == "admin"
    assert options["user_bob"] == 'a "quoted" word, a back\\slash; \n\t and A\x00'
    assert options["token"] == "$abc-1.2_x" and options["empty"] == ""
    assert options["password"] == 'single "quotes" too'


def test_two_adjacent_quoted_values_are_refused() -> None:
    with pytest.raises(JaasConfigError, match="expected an option name"):
        parse_jaas_config("m required password='it''s';")


@pytest.mark.parametrize(
    ("text", "message", "where"),
    [
        ("", "Login module not specified", None),
        ("   // only a comment\n", "Login module not specified", None),
        ("m", "control flag not specified", "line 1, column 2"),
        ("m maybe;", "Invalid login module control flag 'maybe'", "line 1, column 3"),
        ('m "required";', "Invalid login module control flag a quoted value", "line 1, column 3"),
        ('m required a="1"', "not terminated by semi-colon", "line 1, column 17"),
        ('m required\n  a="1" b="2"\n', "not terminated by semi-colon", "line 3, column 1"),
        ('m required a="hunter2;', "unterminated quoted value", "line 1, column 14"),
        ('m required a="hunter2\n";', "unterminated quoted value", "line 1, column 14"),
        ("m required a=;", "Value not specified for key 'a'", "line 1, column 14"),
        ("m required a hunter2;", "Value not specified for key 'a'", "line 1, column 14"),
        ('m required a="1";n required;', "more than one login module", "line 1, column 18"),
        ('m required a="hunter2" a="hunter3";', "option 'a' is given twice", "line 1, column 24"),
        ("m required a=hunter2@x;", "unexpected character", "line 1, column 21"),
        ('"m" required;', "expected the login module class", "line 1, column 1"),
        ("m required /* hunter2", "unterminated /* comment", "line 1, column 12"),
    ],
)
def test_mistakes_are_named_and_placed_without_values(text: str, message: str, where: str | None) -> None:
    with pytest.raises(JaasConfigError) as info:
        parse_jaas_config(text)
    shown = str(info.value)
    assert message in shown
    if where is not None:
        assert f"(at {where})" in shown
    assert "hunter" not in shown


def test_missing_client_credentials_are_named() -> None:
    with pytest.raises(JaasConfigError, match="no password option"):
        client_credentials(parse_jaas_config('m required username="a";'))
    with pytest.raises(JaasConfigError, match="no username or password option"):
        client_credentials(parse_jaas_config("m required;"))


def test_repr_shows_names_not_values() -> None:
    config = parse_jaas_config(PLAIN_BROKER)
    for shown in (repr(config), str(config)):
        assert "user_alice" in shown and "secret" not in shown
    assert isinstance(config, JaasConfig)
    with pytest.raises(TypeError):
        config.options["x"] = "y"  # type: ignore[index]


values = st.text(alphabet=st.characters(blacklist_characters="\r\n", blacklist_categories=("Cs",)), max_size=30)
keys = st.from_regex(r"[A-Za-z_$][A-Za-z0-9_.$-]{0,15}", fullmatch=True)


def quote(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


@settings(max_examples=200)
@given(st.dictionaries(keys, values, max_size=6))
def test_quoted_options_round_trip(options: dict[str, str]) -> None:
    text = "com.example.Module sufficient " + " ".join(f"{k}={quote(v)}" for k, v in options.items()) + ";"
    config = parse_jaas_config(text)
    assert config.control_flag is ControlFlag.SUFFICIENT and dict(config.options) == options


@settings(max_examples=300)
@given(st.text(max_size=60))
def test_any_text_parses_or_raises_the_named_error(text: str) -> None:
    try:
        parse_jaas_config(text)
    except JaasConfigError:
        pass
