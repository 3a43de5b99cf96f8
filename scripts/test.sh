#!/usr/bin/env bash
# The test command: installs everything the tests need on a fresh machine (madengine with its
# extras at the versions locked in requirements/, a Docker engine with a local base image, the
# pyt_* image's wheels, and the services under scripts/ci.d/), then runs the whole test suite. Extra arguments go to pytest.
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
python3 -m pytest -q "$@"
