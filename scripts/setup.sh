#!/usr/bin/env bash
# Install every build and test dependency of deepinfer from Debian's packages.
# Idempotent and non-interactive: when everything is already installed it changes
# nothing and does not touch the network. Needs root (or sudo).
#   scripts/setup.sh
set -euo pipefail

packages=(
  # build
  build-essential cmake ninja-build pkg-config git file binutils
  # libraries the library and its tests link
  libjansson-dev libonig-dev libutf8proc-dev libxxhash-dev libzstd-dev libcmocka-dev zstd
  # deepinfer serve's HTTP server, and the browser its chat page is tested in
  libmicrohttpd-dev chromium
  # sanitizers and libFuzzer (clang's runtime), formatting and static analysis
  clang libclang-rt-14-dev clang-format clang-tidy
  # ABI guard
  abigail-tools
  # the oracle virtual environment (tests/oracle)
  python3 python3-venv python3-pip
  # the Rust binding (bindings/rust): Debian 12's toolchain (Rust 1.63, the crates'
  # minimum) and bindgen, which generates deepinfer-sys (scripts/rust-bindgen.sh)
  cargo rustc rustfmt rust-clippy bindgen
)

missing=()
for p in "${packages[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
  [ "$status" = "install ok installed" ] || missing+=("$p")
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#packages[@]} Debian packages already installed"
  exit 0
fi

sudo=()
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "setup: need root or sudo to install: ${missing[*]}" >&2; exit 1; }
  sudo=(sudo)
fi
echo "setup: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -qq
"${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
