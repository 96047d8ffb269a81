"""Client quota entities and their config values (odradek/quota/entity.py), as KIP-546 names them."""

from __future__ import annotations

import math

import pytest

from odradek.protocol.errors import ErrorCode
from odradek.quota import entity as qe
from odradek.quota.entity import (
    CLIENT_ID,
    CONNECTION_CREATION_RATE,
    CONSUMER_BYTE_RATE,
    CONTROLLER_MUTATION_RATE,
    IP,
    PRODUCER_BYTE_RATE,
    REQUEST_PERCENTAGE,
    USER,
    QuotaConfigError,
    check_value,
    describe,
    entity,
)

ALICE = ((USER, "alice"),)
APP = ((CLIENT_ID, "app"),)
ALICE_APP = ((USER, "alice"), (CLIENT_ID, "app"))
AN_IP = ((IP, "10.0.0.7"),)


# -- valid shapes -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("components", [
    [(USER, "alice")],
    [(USER, None)],
    [(CLIENT_ID, "app")],
    [(CLIENT_ID, None)],
    [(USER, "alice"), (CLIENT_ID, "app")],
    [(USER, None), (CLIENT_ID, "app")],
    [(USER, "alice"), (CLIENT_ID, None)],
    [(USER, None), (CLIENT_ID, None)],
    [(IP, "10.0.0.7")],
    [(IP, "::1")],
    [(IP, "2001:db8::7")],
    [(IP, None)],
])
def test_valid_shapes_are_kept_as_given(components: list[tuple[str, str | None]]) -> None:
    assert entity(components) == tuple(components)


def test_user_and_client_id_in_either_order_are_one_canonical_entity() -> None:
    given_backwards = entity([(CLIENT_ID, "app"), (USER, "alice")])
    assert given_backwards == ALICE_APP
    assert entity([(USER, "alice"), (CLIENT_ID, "app")]) == given_backwards
    assert hash(given_backwards) == hash(ALICE_APP)
    assert {given_backwards: 1}[ALICE_APP] == 1
    assert entity([(CLIENT_ID, None), (USER, None)]) == ((USER, None), (CLIENT_ID, None))


def test_entity_takes_any_iterable_of_components() -> None:
    assert entity(iter([(CLIENT_ID, "app"), (USER, "alice")])) == ALICE_APP
    assert entity(c for c in [(USER, "bob")]) == ((USER, "bob"),)


def test_an_empty_client_id_is_a_name_not_the_default() -> None:
    # Clients may send an empty client-id, so it names an entity of its own; only user and ip names may not
    # be empty.
    assert entity([(CLIENT_ID, "")]) == ((CLIENT_ID, ""),)
    assert entity([(USER, "alice"), (CLIENT_ID, "")]) == ((USER, "alice"), (CLIENT_ID, ""))


# -- invalid shapes ---------------------------------------------------------------------------------------


def _refused(components: list[tuple[str, str | None]]) -> str:
    with pytest.raises(QuotaConfigError) as info:
        entity(components)
    assert info.value.code == ErrorCode.INVALID_REQUEST
    return info.value.message


@pytest.mark.parametrize("components", [
    [(IP, "10.0.0.7"), (USER, "alice")],
    [(USER, "alice"), (IP, "10.0.0.7")],
    [(IP, None), (CLIENT_ID, "app")],
    [(USER, "alice"), (CLIENT_ID, "app"), (IP, "10.0.0.7")],
])
def test_an_ip_has_no_other_component(components: list[tuple[str, str | None]]) -> None:
    message = _refused(components)
    assert message.startswith("a quota entity is a user, a client-id, a user with a client-id, or an ip; got ")
    assert message.endswith(", ".join(t for t, _ in components))


def test_no_component_is_refused() -> None:
    assert _refused([]) == ("a quota entity is a user, a client-id, a user with a client-id, or an ip; "
                            "got no component")


@pytest.mark.parametrize("components", [
    [(USER, "alice"), (USER, "bob")],
    [(USER, None), (USER, "bob")],
    [(CLIENT_ID, "a"), (CLIENT_ID, "a")],
    [(IP, "10.0.0.7"), (IP, "10.0.0.8")],
])
def test_a_type_named_twice_is_refused(components: list[tuple[str, str | None]]) -> None:
    assert _refused(components) == f"quota entity type {components[0][0]!r} is named twice in one entity"


def test_the_message_names_the_type_that_is_repeated() -> None:
    message = _refused([(USER, "alice"), (CLIENT_ID, "a"), (CLIENT_ID, "b")])
    assert message == "quota entity type 'client-id' is named twice in one entity"


@pytest.mark.parametrize("kind", ["group", "users", "clients", "client_id", "", "USER"])
def test_an_unknown_type_is_refused(kind: str) -> None:
    assert _refused([(kind, "x")]) == f"unknown quota entity type {kind!r}: use user, client-id, ip"
    # an unknown type is reported before any other mistake of the entity
    assert _refused([(USER, "a"), (USER, "b"), (kind, "x")]).startswith(f"unknown quota entity type {kind!r}")


@pytest.mark.parametrize("components, kind", [
    ([(USER, "")], USER),
    ([(USER, ""), (CLIENT_ID, "app")], USER),
    ([(IP, "")], IP),
])
def test_an_empty_user_or_ip_name_is_refused(components: list[tuple[str, str | None]], kind: str) -> None:
    assert _refused(components) == f"an empty {kind} name is not allowed (a null name is the default {kind})"


@pytest.mark.parametrize("address", ["localhost", "10.0.0", "256.1.1.1", "10.0.0.7/32", "10.0.0.7:9092",
                                     "::g", " 10.0.0.7", "example.com"])
def test_an_ip_entity_is_named_by_an_address(address: str) -> None:
    assert _refused([(IP, address)]) == (
        f"{address!r} is not an IP address (an ip quota entity is named by its address)")


# -- config values ----------------------------------------------------------------------------------------


def _bad_value(e: qe.Entity, key: str, value: float) -> str:
    with pytest.raises(QuotaConfigError) as info:
        check_value(e, key, value)
    assert info.value.code == ErrorCode.INVALID_REQUEST
    return info.value.message


@pytest.mark.parametrize("e", [ALICE, APP, ALICE_APP, ((USER, None),), ((CLIENT_ID, None),)])
def test_client_entities_take_the_client_keys(e: qe.Entity) -> None:
    assert check_value(e, PRODUCER_BYTE_RATE, 1048576) == "1048576"
    assert check_value(e, CONSUMER_BYTE_RATE, 2097152.0) == "2097152"
    assert check_value(e, REQUEST_PERCENTAGE, 12.5) == "12.5"
    assert check_value(e, CONTROLLER_MUTATION_RATE, 0.5) == "0.5"
    message = _bad_value(e, CONNECTION_CREATION_RATE, 10)
    assert message == (f"'connection_creation_rate' is not a quota config of {describe(e)}: use "
                       "producer_byte_rate, consumer_byte_rate, request_percentage, controller_mutation_rate")


@pytest.mark.parametrize("e", [AN_IP, ((IP, None),)])
def test_ip_entities_take_only_the_connection_creation_rate(e: qe.Entity) -> None:
    assert check_value(e, CONNECTION_CREATION_RATE, 10) == "10"
    assert check_value(e, CONNECTION_CREATION_RATE, 10.0) == "10"
    for key in (PRODUCER_BYTE_RATE, CONSUMER_BYTE_RATE, REQUEST_PERCENTAGE, CONTROLLER_MUTATION_RATE):
        assert _bad_value(e, key, 10) == (
            f"{key!r} is not a quota config of {describe(e)}: use connection_creation_rate")


@pytest.mark.parametrize("key", ["foo", "producer.byte.rate", "PRODUCER_BYTE_RATE", ""])
def test_an_unknown_key_is_refused(key: str) -> None:
    assert _bad_value(ALICE, key, 1).startswith(f"{key!r} is not a quota config of user 'alice': use ")
    assert _bad_value(AN_IP, key, 1).startswith(f"{key!r} is not a quota config of ip '10.0.0.7': use ")


@pytest.mark.parametrize("key, e", [
    (PRODUCER_BYTE_RATE, APP), (CONSUMER_BYTE_RATE, APP), (REQUEST_PERCENTAGE, APP),
    (CONTROLLER_MUTATION_RATE, APP), (CONNECTION_CREATION_RATE, AN_IP),
])
@pytest.mark.parametrize("value", [0, 0.0, -0.0, -1, -1048576, -0.5, math.nan, math.inf, -math.inf])
def test_values_must_be_positive_numbers(key: str, e: qe.Entity, value: float) -> None:
    assert _bad_value(e, key, value) == f"{key} must be a positive number, got {value!r}"


@pytest.mark.parametrize("key, e", [
    (PRODUCER_BYTE_RATE, APP), (CONSUMER_BYTE_RATE, ALICE_APP), (CONNECTION_CREATION_RATE, AN_IP),
])
@pytest.mark.parametrize("value", [1.5, 0.5, 1048576.25, 2.001])
def test_byte_rates_and_the_connection_rate_are_whole_numbers(key: str, e: qe.Entity, value: float) -> None:
    assert _bad_value(e, key, value) == f"{key} must be a whole number, got {value!r}"


@pytest.mark.parametrize("key, e", [
    (PRODUCER_BYTE_RATE, APP), (CONSUMER_BYTE_RATE, ALICE_APP), (CONNECTION_CREATION_RATE, AN_IP),
])
def test_whole_numbers_are_stored_without_a_fraction(key: str, e: qe.Entity) -> None:
    assert check_value(e, key, 1048576) == "1048576"
    assert check_value(e, key, 1048576.0) == "1048576"
    assert check_value(e, key, 1) == "1"
    assert check_value(e, key, 2_000_000.0) == "2000000"
    assert check_value(e, key, 5.0000000001) == "5"  # the float a client sent for a whole number


@pytest.mark.parametrize("key", [REQUEST_PERCENTAGE, CONTROLLER_MUTATION_RATE])
def test_double_keys_keep_their_fraction_and_read_back(key: str) -> None:
    for value, stored in ((12.5, "12.5"), (100, "100.0"), (0.001, "0.001"), (1e-9, "1e-09"), (250.75, "250.75")):
        assert check_value(APP, key, value) == stored
        assert float(stored) == value


def test_stored_values_read_back_as_the_same_number() -> None:
    for e, key, value in ((APP, PRODUCER_BYTE_RATE, 1048576), (ALICE, REQUEST_PERCENTAGE, 33.3),
                          (AN_IP, CONNECTION_CREATION_RATE, 7), (ALICE_APP, CONTROLLER_MUTATION_RATE, 0.1)):
        assert float(check_value(e, key, value)) == value


def test_keys_for_each_entity() -> None:
    assert set(qe.keys_for(ALICE)) == set(qe.keys_for(APP)) == set(qe.keys_for(ALICE_APP)) == {
        PRODUCER_BYTE_RATE, CONSUMER_BYTE_RATE, REQUEST_PERCENTAGE, CONTROLLER_MUTATION_RATE}
    assert set(qe.keys_for(AN_IP)) == set(qe.keys_for(((IP, None),))) == {CONNECTION_CREATION_RATE}


# -- describe ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("e, words", [
    (ALICE, "user 'alice'"),
    (APP, "client-id 'app'"),
    (ALICE_APP, "user 'alice', client-id 'app'"),
    (((USER, None),), "the default user"),
    (((CLIENT_ID, None),), "the default client-id"),
    (((USER, "alice"), (CLIENT_ID, None)), "user 'alice', the default client-id"),
    (((USER, None), (CLIENT_ID, "app")), "the default user, client-id 'app'"),
    (((USER, None), (CLIENT_ID, None)), "the default user, the default client-id"),
    (AN_IP, "ip '10.0.0.7'"),
    (((IP, None),), "the default ip"),
    (((CLIENT_ID, ""),), "client-id ''"),
])
def test_describe_wording(e: qe.Entity, words: str) -> None:
    assert describe(e) == words
