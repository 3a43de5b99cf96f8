#!/usr/bin/env bash
# Not a gate: install the NEWEST releases that pyproject.toml's ranges admit (ignoring the lock)
# and run the test suite, so that a new release which changes a result shows before the lock is
# refreshed. torch stays at the machine's CPU wheel (newer torch releases on PyPI are CUDA builds
# of several GB). Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
export MADENGINE_UNLOCKED=1
bash scripts/install.sh all,test
venv="${MADENGINE_VENV:-$PWD/.venv}"
export PATH="$venv/bin:$PATH"
python3 -m pip install -q --upgrade --upgrade-strategy eager -e '.[all,test]' 'torch==2.13.0'
python3 -m pip list --format=freeze > "${TMPDIR:-/tmp}/madengine-latest-freeze.txt"
echo "test-latest.sh: installed versions in ${TMPDIR:-/tmp}/madengine-latest-freeze.txt" >&2
bash scripts/docker-up.sh
for hook in scripts/ci.d/*.sh; do
  [ -e "$hook" ] || continue
  bash "$hook"
done
python3 -m pytest -q "$@"
