#!/usr/bin/env bash
# Deliberately refresh the committed ABI baseline from a build of the library:
# run it when a change adds to the public API (or, with DI_ABI_VERSION bumped,
# breaks it) and commit abi/libdeepinfer.abi with that change.
#   scripts/abi-update.sh [BUILD_DIR]      (default: build/abi, configured here)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build/abi}
if [ $# -eq 0 ]; then
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
        -DDI_BUILD_TESTS=OFF -DDI_BUILD_EXAMPLES=OFF -DDI_CUDA=OFF >/dev/null
  cmake --build "$build" --target deepinfer >/dev/null
fi
mkdir -p "$root/abi"
abidw --no-corpus-path --headers-dir "$root/include/deepinfer" \
      --out-file "$root/abi/libdeepinfer.abi" "$build/lib/libdeepinfer.so"
echo "wrote abi/libdeepinfer.abi ($(grep -c '<elf-symbol name=' "$root/abi/libdeepinfer.abi") symbols)"
