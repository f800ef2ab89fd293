#!/usr/bin/env bash
# Create (or refresh) the oracle virtual environment with the pinned PyPI packages
# of tests/oracle/requirements.txt and print its python's path on the last line.
# Idempotent: a stamp holding the requirements' hash skips pip when nothing changed.
#   scripts/oracle-venv.sh            # venv in $DI_ORACLE_VENV or .venv-oracle
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
venv=${DI_ORACLE_VENV:-$root/.venv-oracle}
req=$root/tests/oracle/requirements.txt
want=$(sha256sum "$req" | cut -d' ' -f1)
stamp=$venv/.requirements.sha256

if [ -x "$venv/bin/python" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
  echo "oracle-venv: up to date at $venv" >&2
else
  echo "oracle-venv: installing $(grep -c '==' "$req") pinned packages into $venv" >&2
  python3 -m venv "$venv"
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade pip >&2
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r "$req" >&2
  echo "$want" > "$stamp"
fi
echo "$venv/bin/python"
