#!/usr/bin/env bash
# Check the shared library's dynamic symbol table: every defined symbol is di_*
# (and versioned DEEPINFER_0), and the SONAME is the expected one.
#   scripts/check-exports.sh LIBRARY EXPECTED_SONAME
set -euo pipefail
lib=$1 soname=$2

# nm prints versioned symbols as NAME@@VERSION; the version node itself appears
# as an absolute symbol named DEEPINFER_0.
syms=$(nm -D --defined-only "$lib" | awk '{print $NF}' | grep -v -x 'DEEPINFER_0' || true)
bad=$(printf '%s\n' "$syms" | grep -v -E '^di_[a-z0-9_]+@@DEEPINFER_0$' | grep -v '^$' || true)
if [ -n "$bad" ]; then
  echo "FAIL: $lib exports symbols outside di_* (or without the DEEPINFER_0 version):" >&2
  echo "$bad" >&2
  exit 1
fi
count=$(printf '%s\n' "$syms" | grep -c -E '^di_' || true)
if [ "$count" -eq 0 ]; then
  echo "FAIL: $lib exports no di_* symbol" >&2
  exit 1
fi
got=$(objdump -p "$lib" | awk '$1 == "SONAME" {print $2}')
if [ "$got" != "$soname" ]; then
  echo "FAIL: SONAME is '$got', expected '$soname'" >&2
  exit 1
fi
echo "ok: $count di_* symbols exported, SONAME $got"
