"""``chartRegistries:`` in gitopsbot.yaml: how the bot logs in to the OCI registries that
release.yaml's ``oci://`` chart repositories name (docs/fleet-repo.md, OCI repositories).

One entry per registry host (``host[:port]``, as helm keys its registry logins). The password
is a secret reference on the bot's own machine (``env:`` or ``file:``): charts are read for
plans and proposals before any cluster is reached, so ``kubernetesSecret:`` is refused, as
for ``git.sshKey``. A password written in the file is refused without echoing it.
"""

from __future__ import annotations

import re
from typing import Any

from gitopsbot.core.fleet.credentials_file import setting_ref
from gitopsbot.core.fleet.fields import FieldReader
from gitopsbot.core.fleet.located_yaml import LocatedMap
from gitopsbot.core.fleet.model import ChartRegistry

_KEYS = ("host", "username", "password", "plainHttp")
# host[:port] as in oci://host[:port]/path: no scheme, no path, no user.
REGISTRY_HOST = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9.]*[A-Za-z0-9])?(:[0-9]{1,5})?$")
_REF_HINT = "give a secret reference, e.g. password: {env: GITOPSBOT_REGISTRY_PASSWORD}"


def read_chart_registries(r: FieldReader, top: LocatedMap) -> tuple[ChartRegistry, ...]:
    return r.distinct_entries(top, "chartRegistries", _entry, "host", lambda g: g.host)


def _entry(r: FieldReader, i: int, item: Any, at: tuple[int, int]) -> ChartRegistry | None:
    fld = f"chartRegistries[{i}]"
    entry = r.mapping(item, fld, at, _KEYS)
    if entry is None:
        return None
    before = len(r.problems)
    host = r.string(
        entry, "host", fld, required=True, pattern=REGISTRY_HOST,
        what="registry host (host or host:port, as in oci://host:port/path)",
    )  # fmt: skip
    username = r.string(entry, "username", fld)
    local = (
        "the registry password must be on the bot's machine",
        "give env: VAR (e.g. from the chart's Secret) or file: /path",
    )
    password = setting_ref(
        r, entry, "password", f"{fld}.password",
        plain="a password is not allowed here", hint=_REF_HINT, local=local,
    )  # fmt: skip
    if bool(username) != (entry.get("password") is not None):
        r.add(at, fld, "give both username and password, or neither (anonymous pulls)")
    plain_http = r.boolean(entry, "plainHttp", fld, False)
    if len(r.problems) > before or not host:
        return None
    return ChartRegistry(host=host, username=username, password=password, plain_http=plain_http)
