#!/usr/bin/env bash
# Builds the real control plane for the `realkube` test tier: kube-apiserver and
# kube-controller-manager from the Kubernetes release pinned in go.mod, into a cache directory
# keyed by the hash of go.mod, go.sum and the mains, and reuses them when they are present.
# Prints the directory holding the binaries on its last line.
#
#   tests/realkube/build.sh            # build (or reuse) and print the directory
#   REALKUBE_BIN_DIR=DIR build.sh      # use prebuilt binaries from DIR instead (printed as is)
#
# Cold: about 6 CPU-minutes and 2 GB of memory; warm (Go's build cache kept): under a minute.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
if [ -n "${REALKUBE_BIN_DIR:-}" ]; then
  echo "$REALKUBE_BIN_DIR"
  exit 0
fi
version="$(awk '$1=="k8s.io/kubernetes" {print $2} $1=="require" && $2=="k8s.io/kubernetes" {print $3}' "$here/go.mod" | head -n1)"
case "$version" in v1.*) ;; *) echo "realkube: no k8s.io/kubernetes version in go.mod" >&2; exit 3 ;; esac
minor="$(echo "$version" | cut -d. -f2)"
key="$(cat "$here/go.mod" "$here/go.sum" "$here"/cmd/*/main.go | sha256sum | cut -c1-16)"
cache="${GITOPSBOT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gitopsbot}"
out="$cache/realkube/$version-$key"
if [ -x "$out/kube-apiserver" ] && [ -x "$out/kube-controller-manager" ]; then
  echo "$out"
  exit 0
fi
command -v go >/dev/null || { echo "no Go toolchain on PATH to build kube-apiserver" >&2; exit 3; }
# One build at a time (pytest-xdist workers, .ci/run): the others wait, then reuse it.
mkdir -p "$cache/realkube"
exec 9>"$cache/realkube/.lock"
flock 9
if [ -x "$out/kube-apiserver" ] && [ -x "$out/kube-controller-manager" ]; then
  echo "$out"
  exit 0
fi
rm -rf "$out.tmp"
mkdir -p "$out.tmp"
# Clients (kubectl, helm, the Python client) parse the server's version: give it the release's.
ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$version"
ldflags="$ldflags -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor"
ldflags="$ldflags -X k8s.io/component-base/version.gitTreeState=clean"
cd "$here"
for cmd in kube-apiserver kube-controller-manager; do
  echo "realkube: building $cmd $version" >&2
  CGO_ENABLED=0 go build -mod=mod -trimpath -ldflags "$ldflags" -o "$out.tmp/$cmd" "./cmd/$cmd"
done
rm -rf "$out"
mv "$out.tmp" "$out"
echo "$out"
