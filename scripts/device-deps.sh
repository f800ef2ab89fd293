#!/usr/bin/env bash
# Fetch, here, the C libraries deepinfer builds against (and pkg-config), as
# .deb files into .devdeps/ (ignored by git), for a GPU machine whose image
# lacks them: scripts/device-check.sh unpacks them under /tmp/di-deps (never
# into /) when the machine's pkg-config cannot find them. ~1 MiB.
#   scripts/device-deps.sh
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .devdeps
cd .devdeps
apt-get download libjansson-dev libjansson4 libonig-dev libonig5 libutf8proc-dev libutf8proc2 \
  libxxhash-dev libxxhash0 libzstd-dev libzstd1 libcmocka-dev libcmocka0 \
  pkgconf pkgconf-bin libpkgconf3
echo "debs in .devdeps: $(find . -name '*.deb' | wc -l)"
