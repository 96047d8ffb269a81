"""The ACL authorizer's decisions (odradek/security/authorizer.py) and the ACL model's filters
(odradek/security/acl.py): Kafka's documented cases one by one, then hypothesis against a brute-force model of
Kafka's rules; and the stored form (odradek/security/acl_stored.py) round-tripping."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from odradek.security import acl_stored
from odradek.security.acl import (
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
    binding_problem,
)
from odradek.security.authorizer import IMPLIED_BY, Authorizer, parse_authorizer_class_name, parse_super_users

ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY
Op = AclOperation
TOPIC, GROUP = ResourceType.TOPIC, ResourceType.GROUP
LITERAL, PREFIXED = PatternType.LITERAL, PatternType.PREFIXED


def ace(principal: str, op: AclOperation, permission: AclPermissionType = ALLOW, host: str = "*") -> AccessControlEntry:
    return AccessControlEntry(principal, host, op, permission)


def authorizer(acls: dict[ResourcePattern, list[AccessControlEntry]], **kw: object) -> Authorizer:
    a = Authorizer(**kw)  # type: ignore[arg-type]
    a.replace_all(acls)
    return a


def topic(name: str, pattern: PatternType = LITERAL) -> ResourcePattern:
    return ResourcePattern(TOPIC, name, pattern)


# -- Kafka's documented cases ------------------------------------------------------------------------------------


def test_no_acls_denies_unless_allow_everyone_if_no_acl_found() -> None:
    assert not authorizer({}).authorize("alice", "1.1.1.1", Op.READ, TOPIC, "orders")
    assert authorizer({}, allow_everyone_if_no_acl_found=True).authorize("alice", "1.1.1.1", Op.READ, TOPIC, "orders")


def test_an_acl_of_anyone_on_the_resource_turns_the_no_acl_rule_off() -> None:
    a = authorizer({topic("orders"): [ace("User:bob", Op.WRITE)]}, allow_everyone_if_no_acl_found=True)
    assert not a.authorize("alice", "h", Op.READ, TOPIC, "orders")  # bob's ACL exists: alice has none
    assert a.authorize("alice", "h", Op.READ, TOPIC, "other")  # no ACL applies to 'other'
    b = authorizer({topic("ord", PREFIXED): [ace("User:bob", Op.WRITE)]}, allow_everyone_if_no_acl_found=True)
    assert not b.authorize("alice", "h", Op.READ, TOPIC, "orders")  # a prefixed ACL applies
    c = authorizer({ResourcePattern(GROUP, "orders", LITERAL): [ace("User:bob", Op.READ)]},
                   allow_everyone_if_no_acl_found=True)
    assert c.authorize("alice", "h", Op.READ, TOPIC, "orders")  # another resource type's ACL does not


def test_super_users_may_do_everything() -> None:
    a = authorizer({topic("orders"): [ace("User:*", Op.ALL, DENY)]}, super_users=["User:admin", "User:root"])
    assert a.authorize("admin", "h", Op.READ, TOPIC, "orders")
    assert a.authorize("root", "h", Op.CLUSTER_ACTION, ResourceType.CLUSTER, "kafka-cluster")
    assert not a.authorize("alice", "h", Op.READ, TOPIC, "orders")


def test_deny_wins_over_allow() -> None:
    a = authorizer({topic("orders"): [ace("User:alice", Op.READ), ace("User:alice", Op.READ, DENY, "10.0.0.1")]})
    assert not a.authorize("alice", "10.0.0.1", Op.READ, TOPIC, "orders")
    assert a.authorize("alice", "10.0.0.2", Op.READ, TOPIC, "orders")
    b = authorizer({topic("*"): [ace("User:*", Op.ALL)], topic("ord", PREFIXED): [ace("User:alice", Op.ALL, DENY)]})
    assert not b.authorize("alice", "h", Op.WRITE, TOPIC, "orders")
    assert b.authorize("bob", "h", Op.WRITE, TOPIC, "orders")


def test_wildcards_of_principal_host_and_resource() -> None:
    a = authorizer({topic("*"): [ace("User:*", Op.READ, host="10.0.0.1")]})
    assert a.authorize("anyone", "10.0.0.1", Op.READ, TOPIC, "any-topic")
    assert not a.authorize("anyone", "10.0.0.2", Op.READ, TOPIC, "any-topic")
    assert not a.authorize("anyone", "10.0.0.1", Op.READ, GROUP, "any-topic")


def test_prefixed_patterns() -> None:
    a = authorizer({topic("orders-", PREFIXED): [ace("User:alice", Op.WRITE)]})
    assert a.authorize("alice", "h", Op.WRITE, TOPIC, "orders-eu")
    assert a.authorize("alice", "h", Op.WRITE, TOPIC, "orders-")
    assert not a.authorize("alice", "h", Op.WRITE, TOPIC, "orders")
    assert not a.authorize("alice", "h", Op.WRITE, TOPIC, "x-orders-eu")


def test_implied_operations_of_allow_only() -> None:
    for op in (Op.READ, Op.WRITE, Op.DELETE, Op.ALTER):
        assert authorizer({topic("t"): [ace("User:a", op)]}).authorize("a", "h", Op.DESCRIBE, TOPIC, "t")
    assert not authorizer({topic("t"): [ace("User:a", Op.CREATE)]}).authorize("a", "h", Op.DESCRIBE, TOPIC, "t")
    assert authorizer({topic("t"): [ace("User:a", Op.ALTER_CONFIGS)]}).authorize("a", "h", Op.DESCRIBE_CONFIGS,
                                                                               TOPIC, "t")
    assert not authorizer({topic("t"): [ace("User:a", Op.DESCRIBE)]}).authorize("a", "h", Op.READ, TOPIC, "t")
    # a DENY of READ does not deny DESCRIBE, a DENY of ALL denies everything
    a = authorizer({topic("t"): [ace("User:a", Op.ALL), ace("User:a", Op.READ, DENY)]})
    assert a.authorize("a", "h", Op.DESCRIBE, TOPIC, "t") and not a.authorize("a", "h", Op.READ, TOPIC, "t")
    assert not authorizer({topic("t"): [ace("User:a", Op.ALL), ace("User:a", Op.ALL, DENY)]}).authorize(
        "a", "h", Op.DESCRIBE, TOPIC, "t")


def test_the_cache_is_dropped_on_every_change() -> None:
    a = authorizer({})
    assert not a.authorize("alice", "h", Op.READ, TOPIC, "orders")
    a.replace_resource(topic("orders"), [ace("User:alice", Op.READ)])
    assert a.authorize("alice", "h", Op.READ, TOPIC, "orders")
    a.replace_resource(topic("orders"), [])
    assert not a.authorize("alice", "h", Op.READ, TOPIC, "orders")
    small = Authorizer(cache_limit=2)
    for i in range(5):
        assert not small.authorize("u", "h", Op.READ, TOPIC, f"t{i}")
    assert len(small._cache) <= 2


def test_authorized_operations_bitfield() -> None:
    a = authorizer({topic("t"): [ace("User:a", Op.READ), ace("User:a", Op.ALTER_CONFIGS)]})
    bits = a.authorized_operations("a", "h", TOPIC, "t")
    assert bits == (1 << Op.READ) | (1 << Op.DESCRIBE) | (1 << Op.ALTER_CONFIGS) | (1 << Op.DESCRIBE_CONFIGS)
    assert authorizer({}, super_users=["User:s"]).authorized_operations("s", "h", GROUP, "g") == sum(
        1 << o for o in (Op.READ, Op.DESCRIBE, Op.DELETE, Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS))


def test_config_values() -> None:
    assert parse_authorizer_class_name(" kafka.security.authorizer.AclAuthorizer ") == \
        "kafka.security.authorizer.AclAuthorizer"
    assert parse_authorizer_class_name("") == ""
    with pytest.raises(ValueError, match="StandardAuthorizer"):
        parse_authorizer_class_name("com.example.MyAuthorizer")
    assert parse_super_users("User:a; User:b") == "User:a; User:b"
    with pytest.raises(ValueError):
        parse_super_users("User:a;bob")


def test_binding_problems() -> None:
    ok = AclBinding(topic("t"), ace("User:a", Op.READ))
    assert binding_problem(ok) is None
    assert "CLUSTER" in str(binding_problem(AclBinding(ResourcePattern(ResourceType.CLUSTER, "x", LITERAL),
                                                       ace("User:a", Op.ALTER))))
    for bad in (AclBinding(topic(""), ace("User:a", Op.READ)), AclBinding(topic("a/b"), ace("User:a", Op.READ)),
                AclBinding(topic("t", PatternType.MATCH), ace("User:a", Op.READ)),
                AclBinding(topic("t"), ace("User:a", Op.ANY)), AclBinding(topic("t"), ace("alice", Op.READ)),
                AclBinding(topic("t"), ace("User:a", Op.READ, AclPermissionType.ANY)),
                AclBinding(ResourcePattern(ResourceType.UNKNOWN, "t", LITERAL), ace("User:a", Op.READ))):
        assert binding_problem(bad) is not None, bad


def test_filters_match_as_kafka() -> None:
    literal, wildcard, prefixed = topic("orders"), topic("*"), topic("ord", PREFIXED)
    match = AclBindingFilter(TOPIC, "orders", PatternType.MATCH)
    assert all(match.matches_pattern(p) for p in (literal, wildcard, prefixed))
    assert not match.matches_pattern(topic("orders-eu")) and not match.matches_pattern(topic("x", PREFIXED))
    anyp = AclBindingFilter(TOPIC, "orders", PatternType.ANY)
    assert anyp.matches_pattern(literal) and not anyp.matches_pattern(wildcard) and not anyp.matches_pattern(prefixed)
    assert AclBindingFilter(TOPIC, "ord", PatternType.ANY).matches_pattern(prefixed)
    assert not AclBindingFilter(GROUP).matches_pattern(literal)
    entry = AclBindingFilter(principal="User:a", operation=Op.READ)
    assert entry.matches_entry(ace("User:a", Op.READ)) and not entry.matches_entry(ace("User:a", Op.WRITE))
    assert AclBindingFilter(resource_type=ResourceType.UNKNOWN).unknown_element() is not None


def test_stored_form_is_kafkas() -> None:
    entries = [ace("User:alice", Op.READ), ace("User:bob", Op.CLUSTER_ACTION, DENY, "10.0.0.1")]
    data = acl_stored.encode_acls(entries)
    assert data == (b'{"version":1,"acls":[{"principal":"User:alice","permissionType":"Allow","operation":"Read",'
                    b'"host":"*"},{"principal":"User:bob","permissionType":"Deny","operation":"ClusterAction",'
                    b'"host":"10.0.0.1"}]}')
    assert acl_stored.decode_acls("/x", data) == frozenset(entries)
    assert acl_stored.resource_path(topic("orders")) == "/kafka-acl/Topic/orders"
    assert acl_stored.resource_path(ResourcePattern(ResourceType.TRANSACTIONAL_ID, "tx", PREFIXED)) == \
        "/kafka-acl-extended/prefixed/TransactionalId/tx"
    for p in (topic("orders"), ResourcePattern(GROUP, "g:1", PREFIXED)):
        path = acl_stored.changes_path(p.pattern_type) + "/acl_changes_0000000001"
        assert acl_stored.decode_change(path, acl_stored.encode_change(p)) == p
    assert acl_stored.encode_change(topic("orders")) == b"TOPIC:orders"
    assert acl_stored.change_sequence("acl_changes_0000000042") == 42
    doc = acl_stored.to_document({topic("orders"): frozenset(entries)})
    assert acl_stored.from_document(doc) == {topic("orders"): frozenset(entries)}
    with pytest.raises(acl_stored.AclDataError):
        acl_stored.decode_acls("/x", b'{"acls":[{"principal":"alice"}]}')


# -- hypothesis against a brute-force model ----------------------------------------------------------------------

NAMES = st.sampled_from(["a", "ab", "abc", "b", "*", "ba"])
USERS = st.sampled_from(["alice", "bob", "*"])
HOSTS = st.sampled_from(["10.0.0.1", "10.0.0.2", "*"])
OPS = st.sampled_from([o for o in AclOperation if o not in (Op.UNKNOWN, Op.ANY)])
TYPES = st.sampled_from([TOPIC, GROUP])
BINDINGS = st.builds(
    lambda t, n, p, u, h, o, perm: AclBinding(ResourcePattern(t, n, p), AccessControlEntry(f"User:{u}", h, o, perm)),
    TYPES, NAMES, st.sampled_from([LITERAL, PREFIXED]), USERS, HOSTS, OPS, st.sampled_from([ALLOW, DENY]))


def model(bindings: set[AclBinding], supers: set[str], allow_if_none: bool, user: str, host: str,
          op: AclOperation, rtype: ResourceType, name: str) -> bool:
    """Kafka's rules written out plainly, over every binding (no index, no cache)."""
    if f"User:{user}" in supers:
        return True
    resource = AclBindingFilter(rtype, name, PatternType.MATCH)
    applicable = [b.entry for b in bindings if resource.matches_pattern(b.pattern)]
    if not applicable:
        return allow_if_none
    mine = [e for e in applicable if e.principal in (f"User:{user}", "User:*") and e.host in (host, "*")]
    if any(e.permission == DENY and e.operation in (op, Op.ALL) for e in mine):
        return False
    return any(e.permission == ALLOW and (e.operation in (op, Op.ALL) or e.operation in IMPLIED_BY.get(op, ()))
               for e in mine)


@settings(max_examples=300, deadline=None)
@given(st.lists(BINDINGS, max_size=12), st.lists(BINDINGS, max_size=4), st.sets(USERS.map(lambda u: f"User:{u}"),
       max_size=1), st.booleans(),
       st.lists(st.tuples(USERS.filter(lambda u: u != "*"), HOSTS.filter(lambda h: h != "*"), OPS, TYPES, NAMES),
                min_size=1, max_size=8))
def test_decisions_match_the_model(initial: list[AclBinding], removed: list[AclBinding], supers: set[str],
                                   allow_if_none: bool, questions: list[tuple]) -> None:
    a = Authorizer(supers, allow_everyone_if_no_acl_found=allow_if_none)
    by_pattern: dict[ResourcePattern, set[AccessControlEntry]] = {}
    for b in initial:
        by_pattern.setdefault(b.pattern, set()).add(b.entry)
    a.replace_all(by_pattern)
    for q in questions:  # fill the cache before the change
        a.authorize(*q)
    for b in removed:  # changes one resource at a time, as the notifications bring them
        entries = by_pattern.setdefault(b.pattern, set())
        entries.symmetric_difference_update({b.entry})
        a.replace_resource(b.pattern, entries)
    bindings = {AclBinding(p, e) for p, es in by_pattern.items() for e in es}
    for q in questions:
        assert a.authorize(*q) == model(bindings, supers, allow_if_none, *q), q
    assert set(a.acls()) == bindings
    for rtype, name, ptype in ((TOPIC, "ab", PatternType.MATCH), (GROUP, None, PatternType.ANY),
                               (TOPIC, "a", PREFIXED), (ResourceType.ANY, "*", LITERAL)):
        selector = AclBindingFilter(rtype, name, ptype, principal="User:alice")
        assert a.acls(selector) == sorted(b for b in bindings if selector.matches(b))
