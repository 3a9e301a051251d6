#!/usr/bin/env bash
# Builds the real OCI registry for the `realregistry` test tier: CNCF distribution's registry
# of the release pinned in go.mod (main.go: its cmd/registry with the filesystem driver and
# htpasswd auth, plus an htpasswd helper), into a cache directory keyed by the hash of go.mod,
# go.sum and main.go, and reuses it when present. Prints the directory on its last line.
#
#   tests/realregistry/build.sh         # build (or reuse) and print the directory
#   REALREGISTRY_DIR=DIR build.sh       # use a prebuilt directory instead (printed as is)
#
# Pure Go: no cgo, no gcc.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
if [ -n "${REALREGISTRY_DIR:-}" ]; then
  echo "$REALREGISTRY_DIR"
  exit 0
fi
command -v go >/dev/null || { echo "realregistry: no Go toolchain on PATH" >&2; exit 3; }
version="$(awk '$1=="require" && $2=="github.com/distribution/distribution/v3" {print $3}' "$here/go.mod")"
[ -n "$version" ] || version="$(awk '$1=="github.com/distribution/distribution/v3" {print $2; exit}' "$here/go.mod")"
case "$version" in v3.*) ;; *) echo "realregistry: no distribution/v3 requirement in go.mod" >&2; exit 3 ;; esac
key="$(cat "$here/go.mod" "$here/go.sum" "$here/main.go" | sha256sum | cut -c1-16)"
cache="${GITOPSBOT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gitopsbot}"
out="$cache/realregistry/$version-$key"
if [ -x "$out/registry" ]; then
  echo "$out"
  exit 0
fi
# One build at a time (pytest-xdist workers, .ci/run): the others wait, then reuse it.
mkdir -p "$cache/realregistry"
exec 9>"$cache/realregistry/.lock"
flock 9
if [ -x "$out/registry" ]; then
  echo "$out"
  exit 0
fi
rm -rf "$out.tmp"
mkdir -p "$out.tmp"
cd "$here"
echo "realregistry: building distribution registry $version" >&2
CGO_ENABLED=0 go build -mod=mod -trimpath \
  -ldflags "-s -w -X github.com/distribution/distribution/v3/version.version=$version" \
  -o "$out.tmp/registry" .
rm -rf "$out"
mv "$out.tmp" "$out"
echo "$out"
