"""``notifications:`` in gitopsbot.yaml: the chat and JSON webhooks told of halts, failures,
rollbacks, blocked changes and successes (docs/notifications.md).

Every wrong entry is a located ``Problem`` (``gitopsbot.yaml:LINE:COL: notifications[0].on[1]``);
a URL written in the file is refused without echoing it: it embeds a token, so it must be a
secret reference.
"""

from __future__ import annotations

from typing import Any

from gitopsbot.core.fleet.credentials_file import setting_ref
from gitopsbot.core.fleet.fields import FieldReader, nearest, suggest
from gitopsbot.core.fleet.located_yaml import LocatedList, LocatedMap
from gitopsbot.core.fleet.model import NOTIFICATION_EVENTS, NotificationTarget

_KEYS = ("kind", "url", "on", "clusters")
KINDS = ("slack", "webhook")
_REF_HINT = "the URL embeds a token: give a secret reference, e.g. url: {env: MY_WEBHOOK_URL}"


def read_notifications(r: FieldReader, top: LocatedMap) -> tuple[NotificationTarget, ...]:
    out: list[NotificationTarget] = []
    for i, (item, at) in enumerate(r.entries(top, "notifications", "")):
        target = _target(r, i, item, at)
        if target is not None:
            out.append(target)
    return tuple(out)


def _target(r: FieldReader, i: int, item: Any, at: tuple[int, int]) -> NotificationTarget | None:
    fld = f"notifications[{i}]"
    entry = r.mapping(item, fld, at, _KEYS)
    if entry is None:
        return None
    before = len(r.problems)
    kind = r.choice(entry, "kind", fld, "", KINDS, required=True)
    if entry.get("url") is None:
        r.add(at, f"{fld}.url", "required key is missing", _REF_HINT)
    plain = "a URL is not allowed here"
    url = setting_ref(r, entry, "url", f"{fld}.url", plain=plain, hint=_REF_HINT)
    on = _events(r, entry, fld)
    clusters = _globs(r, entry, fld)
    if url is None or not kind or len(r.problems) > before:
        return None
    return NotificationTarget(
        index=i,
        kind=kind,  # type: ignore[arg-type]  # checked against KINDS
        url=url,
        on=on,
        clusters=clusters,
        file=r.file,
        line=at[0],
    )


def _events(r: FieldReader, entry: LocatedMap, fld: str) -> tuple[str, ...]:
    if "on" in entry and isinstance(entry["on"], LocatedList) and not entry["on"]:
        r.add(r.value_at(entry, "on"), f"{fld}.on", "names no event", "omit it for all events")
        return ()
    given, where = r.string_list(entry, "on", fld, NOTIFICATION_EVENTS)
    if "on" not in entry:
        return given
    good: list[str] = []
    for j, (event, event_at) in enumerate(zip(given, where, strict=True)):
        if event not in NOTIFICATION_EVENTS:
            r.add(
                event_at,
                f"{fld}.on[{j}]",
                f"'{event}' is not one of {', '.join(NOTIFICATION_EVENTS)}",
                nearest(event, NOTIFICATION_EVENTS) or suggest(event, NOTIFICATION_EVENTS),
            )
        elif event not in good:
            good.append(event)
    return tuple(good)


def _globs(r: FieldReader, entry: LocatedMap, fld: str) -> tuple[str, ...]:
    given, where = r.string_list(entry, "clusters", fld, ())
    for j, (pattern, pattern_at) in enumerate(zip(given, where, strict=True)):
        if not pattern.strip():
            r.add(pattern_at, f"{fld}.clusters[{j}]", "must not be empty", "e.g. prod-*")
    return given
