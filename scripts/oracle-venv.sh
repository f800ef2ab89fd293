#!/usr/bin/env bash
# Create (or refresh) the oracle virtual environment with the PyPI packages of
# tests/oracle/requirements.txt, every one (dependencies too) pinned by
# tests/oracle/constraints.txt, and print its python's path on the last line.
# Needs PyPI the first time; later runs reuse the venv.
# Idempotent: a stamp holding the requirements' hash skips pip when nothing changed.
#   scripts/oracle-venv.sh            # venv in $DI_ORACLE_VENV or .venv-oracle
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
venv=${DI_ORACLE_VENV:-$root/.venv-oracle}
req=$root/tests/oracle/requirements.txt
lock=$root/tests/oracle/constraints.txt
want=$(cat "$req" "$lock" | sha256sum | cut -d' ' -f1)
stamp=$venv/.requirements.sha256

if [ -x "$venv/bin/python" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
  echo "oracle-venv: up to date at $venv" >&2
else
  echo "oracle-venv: installing $(grep -c '==' "$req") pinned packages into $venv" >&2
  python3 -m venv "$venv"
  # Every package, the oracles' own dependencies included, at the version in the
  # constraints file (refresh it with: pip freeze > tests/oracle/constraints.txt).
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r "$req" -c "$lock" >&2
  echo "$want" > "$stamp"
fi
echo "$venv/bin/python"
