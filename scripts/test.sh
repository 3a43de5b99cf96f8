#!/usr/bin/env bash
# The test command: installs everything the tests need on a fresh machine (madengine with its
# extras at the versions locked in requirements/, a Docker engine with a local base image, the
# pyt_* image's wheels, and the services under scripts/ci.d/), then runs the whole test suite in
# madengine's own virtual environment (.venv; the system interpreter is left alone). Extra
# arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh all,test
bash scripts/docker-up.sh
bash scripts/pyt-wheels.sh
for hook in scripts/ci.d/*.sh; do
  [ -e "$hook" ] || continue
  echo "test.sh: $hook" >&2
  bash "$hook"
done
venv="${MADENGINE_VENV:-$PWD/.venv}"
export PATH="$venv/bin:$PATH"
"$venv/bin/python" -m pytest -q "$@"
