#!/usr/bin/env bash
# The include rules of lib/README.md, checked: every quoted #include in lib/ must
# name a header its folder may include (its own folder, the public header
# deepinfer/deepinfer.h, and the folders in the table). Prints each violation as
# FILE:LINE: INCLUDE (folder may include: ...) and exits 1 when there is any.
#   scripts/check-includes.sh
set -euo pipefail
cd "$(dirname "$0")/.."

# folder -> the include prefixes it may use, beside its own folder and the public header
allowed() {
  case $1 in
    api) echo "*" ;;
    recipe) echo "util/ tokenizer/" ;;
    tokenizer) echo "util/ model/gguf.h" ;;
    engine) echo "model/ sampler/ backend/backend.h backend/types.h util/" ;;
    model) echo "backend/backend.h backend/types.h util/" ;;
    sampler) echo "util/" ;;
    backend) echo "backend/cpu/backend_cpu.h backend/cuda/backend_cuda.h util/" ;;
    backend/cpu) echo "backend/backend.h backend/types.h util/" ;;
    backend/cuda) echo "backend/backend.h backend/types.h backend/module.h backend/cpu/ops.h backend/cpu/quant.h kernels.h util/" ;;
    util) echo "" ;;
    *) echo "UNKNOWN" ;;
  esac
}

bad=0
files=0
while IFS= read -r f; do
  files=$((files + 1))
  dir=$(dirname "${f#lib/}")
  rules=$(allowed "$dir")
  if [ "$rules" = UNKNOWN ]; then
    echo "$f: lib/$dir is not in lib/README.md's table of folders"
    bad=1
    continue
  fi
  [ "$rules" = "*" ] && continue
  while IFS=: read -r line inc; do
    [ -n "$line" ] || continue
    case $inc in "$dir"/* | deepinfer/deepinfer.h) continue ;; esac
    ok=0
    for r in $rules; do
      case $r in
        */) case $inc in "$r"*) ok=1 ;; esac ;;
        *) [ "$inc" = "$r" ] && ok=1 ;;
      esac
    done
    if [ "$ok" = 0 ]; then
      echo "$f:$line: #include \"$inc\" (lib/$dir may include: ${rules:-libc only})"
      bad=1
    fi
  done < <(grep -n -E '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' "$f" |
           sed -E 's/^([0-9]+):[[:space:]]*#[[:space:]]*include[[:space:]]*"([^"]*)".*/\1:\2/')
done < <(git ls-files 'lib/*.c' 'lib/*.h')
[ "$bad" = 0 ] || { echo "FAIL: include rules (lib/README.md)"; exit 1; }
echo "ok: $files files in lib/ follow lib/README.md's include rules"
