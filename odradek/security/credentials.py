"""The broker's SCRAM credential store: every user's credentials, by (user, mechanism), as SCRAM logins look them up.

Where they live is the broker's business (Kafka's layout): in a cluster, ZooKeeper's ``/config/users/<user>``
holds them beside the user's quota configs, as ``{"SCRAM-SHA-256": "salt=...,stored_key=...,server_key=...,
iterations=4096"}`` (a ``/config/changes`` notification makes every broker re-read the user); on a single node
the metadata file holds the same strings. The broker feeds this store from there (``replace_all`` at start,
``replace_user`` after each change); SASL logins read it through ``lookup``, and AlterUserScramCredentials
computes a user's new stored form with ``alteration``.

Invariants:
- Only ``ScramCredential`` values (salt, stored and server keys, iterations) are held; never a password or a
  salted password. Nothing here logs or shows a key: warnings name the user and mechanism only.
- A user is always replaced whole, from its stored form (mechanism -> credential string). A string that does not
  parse, or a key that is not a SCRAM mechanism, is left out with a warning: that user cannot log in with that
  mechanism, and the others can.
- ``lookup`` is one dictionary read, cheap enough for every login on the event loop. The store is fed on the
  event loop only (not thread-safe).
- ``alteration`` is pure: the change function it returns writes nothing and raises ``CredentialNotFound``, before
  any change, for a deletion of a mechanism the user has no credential for.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping

from odradek.security.scram import SCRAM_HASHES, ScramCredential, ScramCredentialError

log = logging.getLogger(__name__)

#: The stored form of one user's credentials: mechanism name -> Kafka's credential string.
StoredCredentials = dict[str, str]


class CredentialNotFound(LookupError):
    """A deletion names a credential the user does not have (Kafka's RESOURCE_NOT_FOUND)."""


class CredentialStore:
    """Every user's SCRAM credentials, in memory (see the module docstring)."""

    def __init__(self) -> None:
        self._credentials: dict[tuple[str, str], ScramCredential] = {}
        self._mechanisms: dict[str, tuple[str, ...]] = {}  # user -> its mechanisms, in SCRAM_HASHES order

    def lookup(self, mechanism: str, user: str) -> ScramCredential | None:
        """The credential ``user`` logs in with over ``mechanism``; None if it has none."""
        return self._credentials.get((user, mechanism))

    def credentials(self, user: str) -> dict[str, ScramCredential]:
        """A user's credentials by mechanism (SCRAM-SHA-256 before SCRAM-SHA-512); {} for a user with none."""
        return {m: self._credentials[(user, m)] for m in self._mechanisms.get(user, ())}

    def users(self) -> list[str]:
        """The users with at least one credential, sorted."""
        return sorted(self._mechanisms)

    def replace_user(self, user: str, stored: Mapping[str, str]) -> None:
        """Take ``user``'s credentials from their stored form; an empty one leaves the user without any."""
        for mechanism in self._mechanisms.pop(user, ()):
            del self._credentials[(user, mechanism)]
        parsed: dict[str, ScramCredential] = {}
        for mechanism, text in stored.items():
            if mechanism not in SCRAM_HASHES:
                log.warning("ignoring the stored credential of user %r for %r: not a SCRAM mechanism", user, mechanism)
                continue
            try:
                parsed[mechanism] = ScramCredential.parse(text)
            except ScramCredentialError as e:
                log.warning("ignoring the stored %s credential of user %r: %s", mechanism, user, e)
        mechanisms = tuple(m for m in SCRAM_HASHES if m in parsed)
        if mechanisms:
            self._mechanisms[user] = mechanisms
            self._credentials.update(((user, m), parsed[m]) for m in mechanisms)

    def replace_all(self, stored: Mapping[str, Mapping[str, str]]) -> None:
        """Take every user's credentials (user -> stored form); users not named have none afterwards."""
        self._credentials.clear()
        self._mechanisms.clear()
        for user, credentials in stored.items():
            self.replace_user(user, credentials)


def alteration(upsertions: Mapping[str, ScramCredential],
               deletions: Iterable[str]) -> Callable[[StoredCredentials], StoredCredentials]:
    """The change of one user's stored credentials that deletes the mechanisms ``deletions`` and sets
    ``upsertions`` (mechanism -> credential); mechanisms named in neither stay as they are.

    The returned function takes the stored form as it is now and returns the new one; it raises
    ``CredentialNotFound`` if a deleted mechanism has no credential (nothing is changed then).
    """
    deleted = tuple(deletions)
    upserted = {m: c.format() for m, c in upsertions.items()}

    def change(current: StoredCredentials) -> StoredCredentials:
        missing = [m for m in deleted if m not in current]
        if missing:
            raise CredentialNotFound(f"Attempt to delete a user credential that does not exist: {', '.join(missing)}")
        kept = {m: text for m, text in current.items() if m not in deleted}
        return {**kept, **upserted}

    return change
