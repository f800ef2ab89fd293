#!/usr/bin/env bash
# Compare a built libdeepinfer.so with the committed ABI baseline (abi/libdeepinfer.abi)
# using libabigail's abidiff, looking only at what include/deepinfer declares.
#
#   scripts/abi-check.sh BUILD_DIR/lib/libdeepinfer.so
#
# Fails on an incompatible change (a removed or changed function, a changed type,
# a renumbered or renamed enumerator). Fails too, with a different message, when
# the library only *adds* to the baseline (new functions, appended enumerators):
# the baseline must be refreshed in the same change (scripts/abi-update.sh), or
# later changes to the new API would go unchecked. Needs a build with debug info
# (the default RelWithDebInfo); a library without it is refused, since abidiff
# would then see no types at all.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
[ $# -eq 1 ] || { echo "usage: scripts/abi-check.sh PATH/TO/libdeepinfer.so" >&2; exit 2; }
lib=$1
baseline=$root/abi/libdeepinfer.abi
[ -f "$lib" ] || { echo "FAIL: no library at $lib" >&2; exit 1; }
[ -f "$baseline" ] || { echo "FAIL: no ABI baseline at $baseline (scripts/abi-update.sh makes it)" >&2; exit 1; }
sections=$(readelf -S "$lib")
if ! grep -q '\.debug_info' <<<"$sections"; then
  echo "FAIL: $lib has no debug info; build with -g (CMAKE_BUILD_TYPE=RelWithDebInfo)" >&2
  exit 1
fi

report=$(abidiff --no-added-syms --suppressions "$root/abi/versioned-structs.suppr" \
  --headers-dir2 "$root/include/deepinfer" "$baseline" "$lib")
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
  echo "FAIL: incompatible ABI change against abi/libdeepinfer.abi:" >&2
  echo "$report" >&2
  echo "If the break is deliberate, bump DI_ABI_VERSION and run scripts/abi-update.sh." >&2
  exit 1
fi
# Compatible additions: shown with --harmless (appended enumerators) and without
# --no-added-syms (new functions).
additions=$(abidiff --harmless --headers-dir2 "$root/include/deepinfer" "$baseline" "$lib")
if [ $? -ne 0 ]; then
  echo "FAIL: the library adds to the ABI baseline (compatible); refresh it in this change" >&2
  echo "with scripts/abi-update.sh and commit abi/libdeepinfer.abi:" >&2
  echo "$additions" >&2
  exit 1
fi
echo "ok: ABI identical to the baseline ($(grep -c '<elf-symbol name=' "$baseline") functions)"
