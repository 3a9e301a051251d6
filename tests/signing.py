"""Real GnuPG keys for signed-chart tests: an RSA key made with /usr/bin/gpg in a throwaway
GNUPGHOME (no passphrase), exported in the legacy formats helm reads (``gpg --export`` for
the public keyring the bot verifies with, ``gpg --export-secret-keys`` for the publisher's
``helm package --sign``). The home, and the gpg-agent gpg starts for it, are gone when the
context ends: nothing outlives the test process."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

GPG = shutil.which("gpg") or "/usr/bin/gpg"


@dataclass(frozen=True, slots=True)
class Signer:
    name: str  # the key's user id, what ``helm package --key`` names
    public: Path  # its public keyring (the bot's)
    secret: Path  # its secret keyring (the publisher's)
    fingerprint: str


def _gpg(home: Path, *args: str, stdin: str | None = None) -> bytes:
    done = subprocess.run(
        [GPG, "--batch", "--homedir", str(home), "--passphrase", "", *args],
        input=stdin.encode() if stdin is not None else None,
        capture_output=True, check=False, timeout=120,
    )  # fmt: skip
    if done.returncode != 0:
        raise AssertionError(f"gpg {' '.join(args)}: {done.stderr.decode(errors='replace')}")
    return done.stdout


@contextmanager
def signers(*names: str) -> Iterator[dict[str, Signer]]:
    """One key per name (``Name <name@example.com>``), each in its own keyrings."""
    if not os.access(GPG, os.X_OK):
        pytest.skip("gpg is not installed")
    with tempfile.TemporaryDirectory(prefix="gitopsbot-gpg-") as work:
        homes: list[Path] = []
        try:
            out: dict[str, Signer] = {}
            for name in names:
                home = Path(work) / name
                home.mkdir(mode=0o700)
                homes.append(home)
                spec = (
                    "%no-protection\nKey-Type: RSA\nKey-Length: 2048\n"
                    f"Name-Real: {name}\nName-Email: {name.lower()}@example.com\n"
                    "Expire-Date: 0\n%commit\n"
                )
                _gpg(home, "--gen-key", stdin=spec)
                public, secret = Path(work) / f"{name}.pub.gpg", Path(work) / f"{name}.sec.gpg"
                public.write_bytes(_gpg(home, "--export"))
                secret.write_bytes(_gpg(home, "--export-secret-keys"))
                listed = _gpg(home, "--with-colons", "--fingerprint").decode()
                fprs = [x.split(":")[9] for x in listed.splitlines() if x.startswith("fpr:")]
                fpr = fprs[0]
                out[name] = Signer(f"{name} <{name.lower()}@example.com>", public, secret, fpr)
            yield out
        finally:
            for home in homes:  # gpg-agent started for the home stops with it
                subprocess.run(
                    ["gpgconf", "--homedir", str(home), "--kill", "all"],
                    capture_output=True, check=False, timeout=30,
                )  # fmt: skip
