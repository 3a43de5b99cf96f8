#!/usr/bin/env bash
# Install madengine with its pinned dependencies: every transitive dependency at the version (and
# hash) in requirements/py311-linux-x86_64.txt, then madengine itself without resolving anything
# more. The lock covers CPython 3.11 on Linux x86-64; elsewhere the package's own ranges are used
# and a warning says so. Usage: scripts/install.sh [EXTRAS], e.g. "all,test".
set -euo pipefail
cd "$(dirname "$0")/.."
extras="${1:-all}"
lock=requirements/py311-linux-x86_64.txt
platform=$(python3 -c 'import platform, sys; print(f"py{sys.version_info[0]}{sys.version_info[1]}-{platform.system().lower()}-{platform.machine()}")')
if [ "$platform" = "py311-linux-x86_64" ] && [ "${MADENGINE_UNLOCKED:-0}" != 1 ]; then
  python3 -m pip install -q --require-hashes -r "$lock"
  python3 -m pip install -q --no-deps --no-build-isolation -e .
else
  echo "install.sh: no lock for $platform (or MADENGINE_UNLOCKED=1): installing from pyproject.toml's ranges" >&2
  python3 -m pip install -q -e ".[$extras]"
fi
