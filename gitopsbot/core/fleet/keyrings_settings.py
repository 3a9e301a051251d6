"""``chartKeyrings:`` in gitopsbot.yaml: which chart repositories must serve signed charts, and
the public keyring their provenance files are verified with (docs/fleet-repo.md, Signed
charts; ``core.planning.provenance`` decides which entry covers a repository).

Here and not in release.yaml: whom to trust is the fleet operators' decision for every
cluster that reads the repository (a cluster's release.yaml cannot opt out), and the keyring
is a file on the bot's machine, like ``chartRegistries``' passwords. Only a path is written:
the keyring is public material, read when the bot starts (a private key is refused there).
"""

from __future__ import annotations

import re
from typing import Any

from gitopsbot.core.fleet.fields import FieldReader
from gitopsbot.core.fleet.located_yaml import LocatedMap
from gitopsbot.core.fleet.model import ChartKeyring

_KEYS = ("repository", "keyring")
# A chart repository URL (or a prefix of one), no credentials in it.
REPOSITORY = re.compile(r"^(https?|oci)://[^\s@/?#]+(/[^\s@?#]*)?$")
KEYRING = re.compile(r"^/\S.*$")


def read_chart_keyrings(r: FieldReader, top: LocatedMap) -> tuple[ChartKeyring, ...]:
    return r.distinct_entries(
        top, "chartKeyrings", _entry, "repository", lambda k: k.repository, normalised_prefix
    )


def _entry(r: FieldReader, i: int, item: Any, at: tuple[int, int]) -> ChartKeyring | None:
    fld = f"chartKeyrings[{i}]"
    entry = r.mapping(item, fld, at, _KEYS)
    if entry is None:
        return None
    before = len(r.problems)
    repository = r.string(
        entry, "repository", fld, required=True, pattern=REPOSITORY,
        what="chart repository URL or prefix (https://…, http://… or oci://…, no user:password)",
    )  # fmt: skip
    keyring = r.string(
        entry, "keyring", fld, required=True, pattern=KEYRING,
        what="keyring path (absolute, on the bot's machine: /etc/gitopsbot/keyrings/pubring.gpg)",
    )  # fmt: skip
    if len(r.problems) > before or not repository or not keyring:
        return None
    return ChartKeyring(repository=repository, keyring=keyring)


def normalised_prefix(url: str) -> str:
    """``url`` without trailing slashes: how entries and repositories are compared."""
    return url.rstrip("/")
