#!/usr/bin/env bash
# The root filesystem of the locally made debian:bookworm-slim (images.lock), for machines where no
# image registry answers: Debian 12 "minbase" from the given mirror, with the mirror's bookworm,
# bookworm-updates and bookworm-security sources for the images built FROM it. scripts/stack.sh runs
# it as root and imports the folder with `docker import`; this folder's files are the image's
# recorded build inputs (scripts/images.py).
#
#   deploy/debian/rootfs.sh ROOTFS MIRROR     e.g. MIRROR=http://deb.debian.org/debian
set -euo pipefail
rootfs="$1"
mirror="$2"
debootstrap --variant=minbase bookworm "$rootfs" "$mirror"
security="${mirror%/debian*}/debian-security"
cat >"$rootfs/etc/apt/sources.list" <<SOURCES
deb $mirror bookworm main
deb $mirror bookworm-updates main
deb $security bookworm-security main
SOURCES
rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/archives/*.deb
