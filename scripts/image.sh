#!/usr/bin/env bash
# Builds the container image omnilearn:<version> from Debian packages only: one image for the
# head, the workers and the CLI (deploy/container/Containerfile).
#   1. the Debian package (scripts/package.sh, or OMNILEARN_DEB=path/to/omnilearn_*.deb);
#   2. a Debian 12 minbase with the package's Depends, from `mmdebstrap` over Debian's mirror
#      (OMNILEARN_MIRROR, default deb.debian.org), cached as a tarball under
#      /var/cache/omnilearn/image keyed by the ISO week and the package list, so a rerun takes
#      seconds and a new week picks up Debian's updates; imported as omnilearn-base:<key>;
#   3. `podman build` of the Containerfile on that base: the package installed with apt.
# With a registry, the Containerfile alone builds the same image from debian:bookworm.
# Needs root, podman and mmdebstrap (scripts/install-deps.sh --test). Prints the image's name
# on its last line.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/podman-host.sh
mirror="${OMNILEARN_MIRROR:-http://deb.debian.org/debian}"
cache="${OMNILEARN_IMAGE_CACHE:-/var/cache/omnilearn/image}"
started=$SECONDS
step() { echo "image.sh: $* ($((SECONDS - started)) s)" >&2; }

if ! why=$(podman_host_ready); then
  echo "image.sh: podman cannot run here: $why" >&2
  exit 1
fi
command -v mmdebstrap >/dev/null ||
  { echo "image.sh: mmdebstrap is missing (apt install mmdebstrap)" >&2; exit 1; }

deb="${OMNILEARN_DEB:-}"
if [ -z "$deb" ]; then
  deb=$(bash scripts/package.sh | tail -1)
  step "package $deb"
fi
[ -f "$deb" ] || { echo "image.sh: no package at $deb" >&2; exit 1; }
version=$(dpkg-deb -f "$deb" Version)
# "libc6 (>= 2.34), libfoo1 | libbar1, ..." -> libc6,libfoo1 (an alternative's first choice).
depends=$(dpkg-deb -f "$deb" Depends | tr ',' '\n' | sed -E 's/\|.*//; s/\(.*\)//; s/ //g' |
  grep -v '^$' | sort -u | paste -sd, -)
key=$(printf 'bookworm minbase %s %s %s' "$mirror" "$(date -u +%G-W%V)" "$depends" |
  sha256sum | cut -c1-16)
base_tar="$cache/base-$key.tar"
base_image="localhost/omnilearn-base:$key"

mkdir -p "$cache"
if [ ! -f "$base_tar" ]; then
  step "debootstrapping Debian 12 minbase with $depends (minutes)"
  # Older bases go: one per package list and week is all a rerun can use.
  rm -rf "$cache"/base-*.tar "$cache"/partial-*
  mmdebstrap --quiet --variant=minbase --format=tar --include="$depends" bookworm \
    "$cache/partial-$key.tar" "$mirror" >&2
  mv "$cache/partial-$key.tar" "$base_tar"
  step "base tarball $base_tar ($(du -m "$base_tar" | cut -f1) MiB)"
fi
if ! podman image exists "$base_image"; then
  podman import --quiet "$base_tar" "$base_image" >/dev/null
  step "imported $base_image"
fi

image="localhost/omnilearn:$version"
# The image is rebuilt when what goes into it changed: the package's files and this folder's.
content=$( (dpkg-deb --fsys-tarfile "$deb" | tar -xO; cat deploy/container/Containerfile \
  deploy/container/entrypoint.sh deploy/container/drain.sh; echo "$base_image") |
  sha256sum | cut -c1-16)
if [ "$(podman image inspect "$image" --format '{{index .Labels "omnilearn.content"}}' \
  2>/dev/null)" = "$content" ]; then
  step "$image is up to date"
else
  old_id=$(podman image inspect "$image" --format '{{.Id}}' 2>/dev/null || true)
  context=$(mktemp -d)
  trap 'rm -rf "$context"' EXIT
  cp "$deb" deploy/container/entrypoint.sh deploy/container/drain.sh "$context/"
  # Host network for apt: the build's container reaches the mirror as this host does.
  podman build --quiet --network=host "${PODMAN_LIMITS[@]}" --build-arg BASE="$base_image" \
    --label omnilearn.content="$content" -f deploy/container/Containerfile -t "$image" \
    "$context" >/dev/null
  new_id=$(podman image inspect "$image" --format '{{.Id}}')
  [ -z "$old_id" ] || [ "$old_id" = "$new_id" ] || podman rmi "$old_id" >/dev/null 2>&1 || true
  step "built $image ($(podman image inspect "$image" --format '{{.Size}}' |
    awk '{printf "%.0f", $1/1048576}') MiB)"
fi
# Base images of other keys go with their tarballs.
for old in $(podman images --format '{{.Repository}}:{{.Tag}}' |
  grep '^localhost/omnilearn-base:' | grep -v ":$key\$" || true); do
  podman rmi "$old" >/dev/null 2>&1 || true
done
echo "$image"
