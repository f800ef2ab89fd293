#!/usr/bin/env bash
# Prefill on AMX tiles gives the logits of the VNNI/AVX2 kernels bit for bit
# (both are the scalar reference's sums): deepinfer logits on the real SmolLM2
# Q4_1 file over 83 tokens (whole tiles of 16 and a remainder) with AMX
# allowed and with DI_CPU_AMX=0, at 1 and 2 threads, all four files equal.
# Says which kernels ran: without AMX on this CPU every run is VNNI/AVX2 and
# the check is only of thread invariance.
set -uo pipefail
cli=$1
model=$2
fail() { echo "FAIL: $*" >&2; exit 1; }
[ -f "$model" ] || { echo "skip: $model not fetched (scripts/fetch_assets.py)"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
tokens=$(seq 1 83 | awk '{printf "%s%d", (NR > 1 ? "," : ""), (NR * 7919) % 49000 + 17}')
for amx in 1 0; do
  for t in 1 2; do
    DI_CPU_AMX=$amx "$cli" logits --model "$model" --tokens "$tokens" --threads "$t" \
      --out "$tmp/l-$amx-$t.f32" || fail "logits (DI_CPU_AMX=$amx, $t threads) exited $?"
  done
done
size=$(stat -c %s "$tmp/l-1-1.f32")
[ "$size" -eq $((83 * 49152 * 4)) ] || fail "logits wrote $size bytes, want $((83 * 49152 * 4))"
for f in "$tmp"/l-*.f32; do
  cmp -s "$tmp/l-0-1.f32" "$f" || fail "$(basename "$f") differs from DI_CPU_AMX=0 at 1 thread"
done
# generate --verbose names the kernels (di_cpu_kernels): never AMX with
# DI_CPU_AMX=0; where the CPU has it, AMX after an 83-token prefill (granted)
# and, after a 5-token one (nothing asked), AMX with the note that it is asked
# at the first product that uses it
kernels() { # DI_CPU_AMX PROMPT
  DI_CPU_AMX=$1 "$cli" generate --model "$model" --tokens "$2" --max-tokens 2 --verbose 2>&1 \
    >/dev/null | sed -n 's/^deepinfer generate: CPU kernels: //p'
}
k=$(kernels 0 "$tokens")
[ -n "$k" ] || fail "generate --verbose printed no CPU kernels line"
[[ "$k" != *amx* ]] || fail "DI_CPU_AMX=0, yet the kernels line names AMX: $k"
if grep -qw amx_int8 /proc/cpuinfo 2>/dev/null && grep -qw avx512_vnni /proc/cpuinfo; then
  for off in OFF False no; do # the words turn AMX off in any case
    k=$(kernels "$off" "$tokens")
    [[ "$k" != *amx* ]] || fail "DI_CPU_AMX=$off, yet the kernels line names AMX: $k"
  done
  k=$(kernels 1 "$tokens")
  [[ "$k" == amx-int8* && "$k" != *"asked of Linux"* ]] || fail "after an AMX prefill: $k"
  k=$(kernels 1 17,18,19,20,21)
  [[ "$k" == amx-int8* && "$k" == *"asked of Linux at the first product"* ]] ||
    fail "before any AMX product: $k"
fi
if grep -qw amx_int8 /proc/cpuinfo 2>/dev/null; then
  echo "ok: amx-int8 prefill tiles and DI_CPU_AMX=0 (VNNI/AVX2) give identical logits, 1 and 2 threads"
else
  echo "ok: no amx-int8 on this CPU: both runs on VNNI/AVX2, identical at 1 and 2 threads"
fi
