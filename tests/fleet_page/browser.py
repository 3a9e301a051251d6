"""Headless Chromium for the fleet page's tests (Debian's ``chromium``, installed by
``.ci/run``): the page as a browser builds it (``--dump-dom``), screenshots kept as test
artefacts, and axe-core's accessibility rules run inside the page.

Skipped with the reason when chromium is absent; a failure instead when
``GITOPSBOT_BROWSER=require`` (CI). The axe check needs ``npm ci --prefix tests/axe`` too.

Why no CDP client: the three things the tests need are the browser's own command-line
modes. axe-core runs from a copy of the served page with axe and a few lines that write its
result into the document (the served page's Content-Security-Policy forbids every script,
which is right for the page and is why the copy is used), read back with ``--dump-dom``
once ``--virtual-time-budget`` let axe finish.
"""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
AXE = ROOT / "tests" / "axe" / "node_modules" / "axe-core" / "axe.min.js"
ARTEFACTS = Path(os.environ.get("GITOPSBOT_ARTEFACTS", ROOT / "test-artefacts")) / "fleet-page"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
# root in CI containers: Chromium's sandbox needs user namespaces it may not get there.
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--mute-audio")


def require_browser() -> str:
    """The chromium binary, or a skip (a failure under GITOPSBOT_BROWSER=require)."""
    if CHROMIUM is None:
        if os.environ.get("GITOPSBOT_BROWSER") == "require":
            raise RuntimeError("GITOPSBOT_BROWSER=require: apt-get install chromium")
        pytest.skip("no chromium on PATH (apt-get install chromium; GITOPSBOT_BROWSER=require)")
    return CHROMIUM


def require_axe() -> Path:
    if not AXE.is_file():
        if os.environ.get("GITOPSBOT_BROWSER") == "require":
            raise RuntimeError("GITOPSBOT_BROWSER=require: run `npm ci --prefix tests/axe`")
        pytest.skip("tests/axe/node_modules missing (npm ci --prefix tests/axe)")
    return AXE


def _run(*args: str) -> str:
    with tempfile.TemporaryDirectory(prefix="chromium-") as profile:
        done = subprocess.run(
            [require_browser(), *FLAGS, f"--user-data-dir={profile}", *args],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def dom(url: str) -> str:
    """The document as the browser built it."""
    return _run("--dump-dom", url)


def visible_text(document: str) -> str:
    """What a person reads: the body's text, tags dropped, whitespace folded (the page has
    no script and no hidden text, so this is what the screen shows)."""
    body = document.split("<body", 1)[-1]
    body = re.sub(r"<(style|title)[^>]*>.*?</\1>", " ", body, flags=re.S)
    return re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", " ", body))).strip()


def screenshot(url: str, name: str, size: str = "1280,1000") -> Path:
    """A PNG of the page, kept under ``test-artefacts/fleet-page/``."""
    ARTEFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTEFACTS / f"{name}.png"
    _run(f"--screenshot={path}", f"--window-size={size}", url)
    assert path.is_file() and path.stat().st_size > 1000, path
    return path


RUNNER = """
<script>%s</script>
<script>
axe.run(document, {runOnly: {type: 'tag', values: ['wcag2a', 'wcag2aa', 'best-practice']}})
  .then(r => { const p = document.createElement('pre'); p.id = 'axe-out';
               p.textContent = JSON.stringify(r.violations.map(v => ({id: v.id, impact: v.impact,
                 help: v.help, nodes: v.nodes.map(n => n.html).slice(0, 5)})));
               document.body.appendChild(p); })
  .catch(e => { const p = document.createElement('pre'); p.id = 'axe-out';
                p.textContent = JSON.stringify([{id: 'axe-error', help: String(e)}]);
                document.body.appendChild(p); });
</script>
"""


def axe(page: str, name: str) -> list[dict[str, Any]]:
    """axe-core's violations of ``page`` (the served HTML): contrast, landmarks, names,
    tables. The copy is kept under the artefacts for a look at what failed."""
    script = require_axe().read_text()
    ARTEFACTS.mkdir(parents=True, exist_ok=True)
    copy = ARTEFACTS / f"{name}.axe.html"
    # No refresh in the copy: the check reads one state of the page.
    static = re.sub(r'<meta http-equiv="refresh"[^>]*>', "", page)
    copy.write_text(static.replace("</body>", RUNNER % script + "</body>"))
    out = _run("--virtual-time-budget=15000", "--dump-dom", copy.as_uri())
    found = re.search(r'<pre id="axe-out">(.*?)</pre>', out, flags=re.S)
    assert found, f"axe did not report: {out[-1000:]}"
    result: list[dict[str, Any]] = json.loads(html.unescape(found.group(1)))
    return result
