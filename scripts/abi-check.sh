#!/usr/bin/env bash
# Compare a built libdeepinfer.so with the committed ABI baseline (abi/libdeepinfer.abi)
# using libabigail's abidiff, looking only at what include/deepinfer declares.
# Fails on an incompatible change (removed or changed function, changed type,
# renumbered enum); reports compatible additions and passes. The library must be
# built with debug info (the default RelWithDebInfo build is).
#   scripts/abi-check.sh BUILD_DIR/lib/libdeepinfer.so
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
lib=$1
baseline=$root/abi/libdeepinfer.abi
[ -f "$baseline" ] || { echo "FAIL: no ABI baseline at $baseline (scripts/abi-update.sh makes it)" >&2; exit 1; }

report=$(abidiff --no-added-syms --headers-dir2 "$root/include/deepinfer" "$baseline" "$lib")
rc=$?
# abidiff's exit status is a bit field: 1 error, 2 usage error, 4 ABI change,
# 8 incompatible ABI change. With added symbols left out (--no-added-syms) and
# harmless changes filtered (abidiff's default: appended enumerators among them),
# any change that remains breaks our rules — a renumbered enum, for example, is
# only "4" to abidiff but breaks every compiled host — so 4 fails as well as 8.
if (( rc & 3 )); then
  echo "FAIL: abidiff could not compare (exit $rc):" >&2
  echo "$report" >&2
  exit 1
fi
if (( rc & 12 )); then
  echo "FAIL: incompatible ABI change against $baseline:" >&2
  echo "$report" >&2
  echo "If the break is deliberate, bump DI_ABI_VERSION and run scripts/abi-update.sh." >&2
  exit 1
fi
added=$(abidiff --headers-dir2 "$root/include/deepinfer" "$baseline" "$lib" | grep -E "^  \[A\]" || true)
if [ -n "$added" ]; then
  echo "ok: ABI compatible with the baseline; additions (refresh the baseline with scripts/abi-update.sh):"
  echo "$added"
else
  echo "ok: ABI identical to the baseline"
fi
