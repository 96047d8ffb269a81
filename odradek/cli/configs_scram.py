"""Users' SCRAM credentials in ``odradek configs``, as ``kafka-configs.sh --bootstrap-server`` handles them.

alter (``--entity-type users --entity-name alice``)::

    --add-config 'SCRAM-SHA-256=[iterations=8192,password=alice-secret],SCRAM-SHA-512=[password=alice-secret]'
    --delete-config SCRAM-SHA-512

goes out as one AlterUserScramCredentials request through confluent-kafka's AdminClient
(``alter_user_scram_credentials``): librdkafka salts the password with a random salt and sends only the salt, the
salted password and the iterations, as Kafka's admin client does; the broker never sees the password.

describe (``--entity-type users [--entity-name alice]``) adds, after the quota lines, one line per user with
credentials (DescribeUserScramCredentials), in kafka-configs' words::

    SCRAM credential configs for user-principal 'alice' are SCRAM-SHA-256=iterations=8192, SCRAM-SHA-512=iterations=4096

Invariants (kafka-configs' rules):
- SCRAM keys are only for a named user alone: not with ``--entity-default``, not with clients or ips, and not
  together with quota keys in one command. These are usage errors (exit code 2), found before anything is sent.
- A value is ``[iterations=N,password=P]`` or ``[password=P]`` (brackets optional; iterations 4096 unless given,
  -1 meaning the default too); fewer than 4096 iterations is refused here, more than 16384 by the broker.
- A password is never printed, not even in the error about a value that does not parse.
- Describing a named user without credentials prints no SCRAM line (the admin client leaves such users out).
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Sequence
from dataclasses import dataclass

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialAlteration,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)

from odradek.cli import _client
from odradek.cli._client import CliError

MECHANISMS = {"SCRAM-SHA-256": ScramMechanism.SCRAM_SHA_256, "SCRAM-SHA-512": ScramMechanism.SCRAM_SHA_512}
DEFAULT_ITERATIONS = 4096
MIN_ITERATIONS = 4096
_VALUE = re.compile(r"(?:iterations=(-?[0-9]*),)?password=(.*)", re.DOTALL)


def is_scram_key(key: str) -> bool:
    return key in MECHANISMS


@dataclass(frozen=True)
class ScramChanges:
    """The credentials one alter command sets (mechanism -> (iterations, password)) and deletes."""

    upsertions: dict[str, tuple[int, str]]
    deletions: list[str]

    def __repr__(self) -> str:  # never the passwords
        return f"ScramChanges(upsertions={sorted(self.upsertions)}, deletions={self.deletions})"


def scram_changes(kinds: Sequence[str], default: bool, to_add: dict[str, str],
                  to_delete: Sequence[str]) -> ScramChanges | None:
    """The SCRAM part of an alter command, None if it names no SCRAM key; ``CliError`` (exit code 2) for SCRAM keys
    where kafka-configs refuses them. ``kinds`` are the entity's quota types ("user", "client-id", "ip")."""
    added = [k for k in to_add if is_scram_key(k)]
    deleted = [k for k in to_delete if is_scram_key(k)]
    if not added and not deleted:
        return None
    if list(kinds) != ["user"]:
        raise CliError(f"{', '.join(dict.fromkeys(added + deleted))}: SCRAM credentials belong to a user alone",
                       "use --entity-type users --entity-name NAME, without --entity-type clients or ips",
                       exit_code=2)
    if default:
        raise CliError("SCRAM credentials cannot be set for the default user (--entity-default)",
                       "name the user with --entity-name", exit_code=2)
    others = [k for k in dict.fromkeys([*to_add, *to_delete]) if not is_scram_key(k)]
    if others:
        raise CliError(f"cannot alter both quota and SCRAM credential configs at once ({', '.join(others)} with "
                       f"{', '.join(dict.fromkeys(added + deleted))})",
                       "run one `odradek configs alter` for the quotas and another for the credentials", exit_code=2)
    both = [k for k in added if k in deleted]
    if both:
        raise CliError(f"{', '.join(both)} is both added and deleted", exit_code=2)
    return ScramChanges({k: parse_value(k, to_add[k]) for k in added}, list(dict.fromkeys(deleted)))


def parse_value(mechanism: str, value: str) -> tuple[int, str]:
    """(iterations, password) of ``[iterations=N,password=P]``; ``CliError`` (exit code 2) without echoing it."""
    text = value.strip()
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    match = _VALUE.fullmatch(text)
    if match is None or not match[2]:
        raise CliError(f"--add-config {mechanism}: the value is not [iterations=N,password=PASSWORD] or "
                       "[password=PASSWORD]", f"e.g. --add-config '{mechanism}=[iterations=8192,password=...]'",
                       exit_code=2)
    raw = match[1]
    iterations = DEFAULT_ITERATIONS if raw in (None, "", "-1") else int(raw)
    if iterations < MIN_ITERATIONS:
        raise CliError(f"--add-config {mechanism}: iterations {iterations} is less than the minimum "
                       f"{MIN_ITERATIONS} required for {mechanism}", exit_code=2)
    return iterations, match[2]


def alter(args: argparse.Namespace, user: str, changes: ScramChanges, who: str) -> int:
    """Send the alteration in one AlterUserScramCredentials request; ``who`` names the user in messages."""
    alterations: list[UserScramCredentialAlteration] = [
        UserScramCredentialDeletion(user, MECHANISMS[m]) for m in changes.deletions]
    alterations += [UserScramCredentialUpsertion(user, ScramCredentialInfo(MECHANISMS[m], iterations),
                                                 password.encode("utf-8"))
                    for m, (iterations, password) in changes.upsertions.items()]
    admin = _client.make_client(AdminClient, _client.base_config(args))
    futures = admin.alter_user_scram_credentials(alterations, request_timeout=_client.timeout_s(args))
    _client.wait(futures[user], args, f"alter the SCRAM credentials of {who}")
    print(f"Completed updating config for {who}.")
    return 0


def describe(args: argparse.Namespace, user: str | None) -> None:
    """Print the SCRAM line of ``user`` (None: of every user with credentials, sorted by name)."""
    admin = _client.make_client(AdminClient, _client.base_config(args))
    what = f"describe the SCRAM credentials of user-principal '{user}'" if user else \
        "describe the users' SCRAM credentials"
    timeout = _client.timeout_s(args)
    if user is None:
        descriptions = _client.wait(admin.describe_user_scram_credentials(request_timeout=timeout), args, what)
    else:
        future = admin.describe_user_scram_credentials([user], request_timeout=timeout)[user]
        try:
            descriptions = {user: future.result(timeout=timeout + 5)}
        except KafkaException as e:
            if e.args and isinstance(e.args[0], KafkaError) and e.args[0].code() == KafkaError.RESOURCE_NOT_FOUND:
                return  # no credentials: no line, as kafka-configs prints none
            raise _client.error_from_kafka(e, args, what) from None
        except TimeoutError:
            raise _client.unreachable(args, f"no answer to {what}") from None
    for name in sorted(descriptions):
        print(format_line(name, [(i.mechanism, i.iterations) for i in descriptions[name].scram_credential_infos]))


def format_line(user: str, infos: Sequence[tuple[ScramMechanism, int]]) -> str:
    names = {v: k for k, v in MECHANISMS.items()}
    text = ", ".join(f"{names.get(m, str(m))}=iterations={n}" for m, n in infos)
    return f"SCRAM credential configs for user-principal '{user}' are {text}"
