"""The fleet page (docs/fleet-page.md): ``/fleet`` (the fleet by wave) and
``/fleet/clusters/<name>`` (one cluster's operation) on the metrics server's port, drawn
from ``core.views.fleet_view`` by Jinja2 templates (``fleet_templates/``).

Why Jinja2: it escapes every value by default (autoescape on for every template, so a
cluster or pool name with markup, a step detail or a node's reason shows as text), and it
needs no front-end build. The page is plain HTML that refreshes itself with
``<meta http-equiv="refresh">``: no JavaScript, no CDN, nothing fetched by the browser but the
page itself (the Gantt chart is inline SVG). The Content-Security-Policy says so: no
script, no connection, styles only inline.

Read-only: GET and HEAD, anything else is 405. No login of its own: it is meant to sit
behind the cluster's ingress and its authentication (docs/deploy.md). A read or drawing
that fails is a page saying so, never a traceback.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import quote, unquote

import jinja2

from gitopsbot.core.rollouts import timeline
from gitopsbot.core.views import fleet_view
from gitopsbot.core.views.fleet_view import FleetSnapshot

if TYPE_CHECKING:
    from _typeshed.wsgi import StartResponse, WSGIEnvironment

log = logging.getLogger("gitopsbot.fleet_page")

PREFIX = "/fleet"
CLUSTERS = f"{PREFIX}/clusters/"
REFRESH_SECONDS = 10
REUSE_SECONDS = 5.0  # a read of the state branch serves the requests of the next 5 s
HEADERS = [
    ("Cache-Control", "no-store"),
    ("X-Content-Type-Options", "nosniff"),
    ("Referrer-Policy", "no-referrer"),
    (
        "Content-Security-Policy",
        "default-src 'none'; style-src 'unsafe-inline'; img-src 'self' data:; "
        "frame-ancestors 'none'; form-action 'none'; base-uri 'none'",
    ),
]
COLOURS = {
    "done": "#1a7f37",
    "running": "#0b57a4",
    "halted": "#b3261e",
    "paused": "#b06f00",
    "eta": "#0b57a4",
}

_TEMPLATES = jinja2.Environment(
    loader=jinja2.FileSystemLoader(Path(__file__).with_name("fleet_templates")),
    autoescape=True,  # every template, whatever its name: nothing reaches the page raw
    undefined=jinja2.StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
    extensions=["jinja2.ext.do"],
)


def _duration(seconds: float) -> str:
    return timeline.format_duration(int(seconds))


def render_fleet(snapshot: FleetSnapshot, now: datetime, root: str = "fleet") -> str:
    """The overview page. ``root``: the link to it from itself (relative, so the page works
    under any path prefix an ingress adds)."""
    view = fleet_view.fleet_page(snapshot, now)
    return _TEMPLATES.get_template("fleet.html").render(
        view=view,
        title="Fleet",
        source=view.source,
        as_of=view.as_of,
        refresh=REFRESH_SECONDS,
        root=root,
        cluster_link=lambda name: f"{root}/clusters/{quote(name, safe='')}",
    )


def render_cluster(snapshot: FleetSnapshot, cluster: str, now: datetime) -> tuple[bool, str]:
    """One cluster's page, and whether the cluster is known (else the page says so, 404)."""
    view = fleet_view.operation_page(snapshot, cluster, now)
    html = _TEMPLATES.get_template("cluster.html").render(
        view=view,
        title=f"Cluster {cluster}",
        source=snapshot.source,
        as_of=view.as_of,
        refresh=REFRESH_SECONDS,
        root="../../fleet",
        colours=COLOURS,
        duration=_duration,
    )
    return view.found, html


class FleetPages:
    """The WSGI application behind ``/fleet``: the state branch read by ``read``, drawn as of
    ``now()``. A read serves every request for ``reuse_seconds`` (one at a time: requests
    arriving during a read wait for it), so a room of people with the page open, or a
    refresh storm, costs the bot one read of the fleet per few seconds, not one each."""

    def __init__(
        self,
        read: Callable[[], FleetSnapshot],
        now: Callable[[], datetime],
        *,
        reuse_seconds: float = REUSE_SECONDS,
    ) -> None:
        self._read_now = read
        self._now = now
        self._reuse = timedelta(seconds=reuse_seconds)
        self._lock = threading.Lock()
        self._last: tuple[datetime, FleetSnapshot] | None = None

    def _read(self) -> FleetSnapshot:
        with self._lock:
            now = self._now()
            if self._last is not None and timedelta(0) <= now - self._last[0] < self._reuse:
                return self._last[1]
            snapshot = self._read_now()
            self._last = (now, snapshot)
            return snapshot

    @staticmethod
    def serves(path: str) -> bool:
        return path == PREFIX or path.startswith(PREFIX + "/")

    def __call__(self, environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        method = str(environ.get("REQUEST_METHOD", "GET"))
        if method not in ("GET", "HEAD"):
            return _send(start_response, "405 Method Not Allowed", _plain("read-only"), method)
        path = str(environ.get("PATH_INFO", ""))
        try:
            status, html = self._page(path)
        except Exception as e:  # drawing failed: a page saying so, never a traceback
            log.exception("the fleet page %s failed", path)
            status, html = (
                "500 Internal Server Error",
                _plain(
                    f"the fleet page could not be drawn ({type(e).__name__}); the bot's log has why"
                ),
            )
        return _send(start_response, status, html, method)

    def _page(self, path: str) -> tuple[str, str]:
        if path in (PREFIX, PREFIX + "/"):
            root = "fleet" if path == PREFIX else "../fleet"
            return "200 OK", render_fleet(self._read(), self._now(), root)
        if path.startswith(CLUSTERS) and path != CLUSTERS:
            name = unquote(path[len(CLUSTERS) :])
            found, html = render_cluster(self._read(), name, self._now())
            return ("200 OK" if found else "404 Not Found"), html
        return "404 Not Found", _plain(f"no such page: try {PREFIX}")


def _plain(text: str) -> str:
    escaped = jinja2.Template("{{ t }}", autoescape=True).render(t=text)
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8"><title>gitopsbot</title>'
        f'</head><body><main><p role="status">{escaped}</p></main></body></html>'
    )


def _send(start_response: StartResponse, status: str, html: str, method: str) -> list[bytes]:
    body = html.encode()
    headers = [
        ("Content-Type", "text/html; charset=utf-8"),
        ("Content-Length", str(len(body))),
        *HEADERS,
    ]
    if status.startswith("405"):
        headers.append(("Allow", "GET, HEAD"))
    start_response(status, headers)
    return [] if method == "HEAD" else [body]
