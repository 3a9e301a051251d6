#!/usr/bin/env bash
# Builds the real Gitea for the `realgitea` test tier: the gitea command of the release pinned
# in go.mod, into a cache directory keyed by the hash of go.mod, go.sum and main.go, and reuses
# it when present. Next to the binary it copies the release's templates/, options/ and public/:
# built without the bindata tag, Gitea reads them from its static root at run time (the API and
# git over HTTP need no built frontend assets). Prints the directory on its last line.
#
#   tests/realgitea/build.sh            # build (or reuse) and print the directory
#   REALGITEA_DIR=DIR build.sh          # use a prebuilt directory instead (printed as is)
#
# SQLite is the release's default pure-Go driver (modernc.org/sqlite), so no cgo and no gcc.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
if [ -n "${REALGITEA_DIR:-}" ]; then
  echo "$REALGITEA_DIR"
  exit 0
fi
command -v go >/dev/null || { echo "realgitea: no Go toolchain on PATH" >&2; exit 3; }
# The release is the version gitea.dev is replaced by (the published code.gitea.io/gitea).
version="$(awk '$1=="replace" && $2=="gitea.dev" {print $5}' "$here/go.mod" | head -n1)"
case "$version" in v1.*) ;; *) echo "realgitea: no gitea.dev replacement in go.mod" >&2; exit 3 ;; esac
key="$(cat "$here/go.mod" "$here/go.sum" "$here/main.go" | sha256sum | cut -c1-16)"
cache="${GITOPSBOT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gitopsbot}"
out="$cache/realgitea/$version-$key"
if [ -x "$out/gitea" ] && [ -d "$out/templates" ] && [ -d "$out/options" ]; then
  echo "$out"
  exit 0
fi
# One build at a time (pytest-xdist workers, .ci/run): the others wait, then reuse it.
mkdir -p "$cache/realgitea"
exec 9>"$cache/realgitea/.lock"
flock 9
if [ -x "$out/gitea" ] && [ -d "$out/templates" ] && [ -d "$out/options" ]; then
  echo "$out"
  exit 0
fi
rm -rf "$out.tmp"
mkdir -p "$out.tmp"
cd "$here"
echo "realgitea: building gitea $version" >&2
# Gitea's Makefile sets main.Version without the leading v; clients read it from /api/v1/version.
CGO_ENABLED=0 go build -mod=mod -trimpath \
  -ldflags "-s -w -X main.Version=${version#v}" -o "$out.tmp/gitea" .
src="$(go list -mod=mod -m -f '{{.Dir}}' gitea.dev)"
for d in templates options public; do
  cp -R "$src/$d" "$out.tmp/$d"
done
# The module cache is read-only; the copies need not be.
chmod -R u+w "$out.tmp"
rm -rf "$out"
mv "$out.tmp" "$out"
echo "$out"
