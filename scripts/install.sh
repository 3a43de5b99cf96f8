#!/usr/bin/env bash
# Install madengine with its pinned dependencies into a virtual environment of its own (.venv in the
# checkout, or $MADENGINE_VENV), never into the system interpreter: a shared GPU host's other tools
# live there. Every transitive dependency is installed at the version (and hash) in
# requirements/py311-linux-x86_64.txt, then madengine itself (editable) without resolving anything
# more. The lock covers CPython 3.11 on Linux x86-64; elsewhere the package's own ranges are used
# and a warning says so. Finally `madengine` is linked into a folder on PATH ($MADENGINE_BIN_DIR;
# /usr/local/bin for root, ~/.local/bin otherwise) so a new shell has it without activating anything.
# Usage: scripts/install.sh [EXTRAS], e.g. "all,test".
set -euo pipefail
cd "$(dirname "$0")/.."
extras="${1:-all}"
lock=requirements/py311-linux-x86_64.txt
venv=$(realpath -m "${MADENGINE_VENV:-$PWD/.venv}")  # absolute: the link on PATH points at it from anywhere
base_python="${MADENGINE_PYTHON:-python3}"

have_venv_module() { "$base_python" -c 'import venv, ensurepip' >/dev/null 2>&1; }
if ! have_venv_module; then
  # Debian's python3 splits venv and ensurepip into python3-venv
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq && apt-get install -y -qq python3-venv >/dev/null
  fi
  have_venv_module || { echo "install.sh: $base_python has no venv module; install python3-venv and run again" >&2; exit 2; }
fi
# madengine's C part (setup.py: reading a perf.csv into a database) needs a C compiler and the Python
# headers; without them it installs without it and reads in Python, slower: apt-get them where it can
headers=$("$base_python" -c 'import os, sysconfig; print(os.path.join(sysconfig.get_paths()["include"], "Python.h"))')
if { [ ! -e "$headers" ] || ! command -v cc >/dev/null 2>&1; } && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  dev=$("$base_python" -c 'import sys; print(f"python{sys.version_info[0]}.{sys.version_info[1]}-dev")')
  export DEBIAN_FRONTEND=noninteractive
  { apt-get update -qq && apt-get install -y -qq --no-install-recommends gcc libc6-dev "$dev" >/dev/null; } ||
    echo "install.sh: could not install gcc and $dev: madengine reads perf.csv files in Python (slower)" >&2
fi
# a venv whose interpreter went away (the base Python was upgraded or removed) is made again
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c 'import sys' >/dev/null 2>&1; then
  rm -rf "$venv"
  "$base_python" -m venv "$venv"
fi
py="$venv/bin/python"
platform=$("$py" -c 'import platform, sys; print(f"py{sys.version_info[0]}{sys.version_info[1]}-{platform.system().lower()}-{platform.machine()}")')
if [ "$platform" = "py311-linux-x86_64" ] && [ "${MADENGINE_UNLOCKED:-0}" != 1 ]; then
  "$py" -m pip install -q --disable-pip-version-check --require-hashes -r "$lock"
  "$py" -m pip install -q --disable-pip-version-check --no-deps --no-build-isolation -e .
else
  echo "install.sh: no lock for $platform (or MADENGINE_UNLOCKED=1): installing from pyproject.toml's ranges" >&2
  "$py" -m pip install -q --disable-pip-version-check -e ".[$extras]"
fi

if [ -n "${MADENGINE_BIN_DIR:-}" ]; then
  bin_dir="$MADENGINE_BIN_DIR"
elif [ "$(id -u)" = 0 ]; then
  bin_dir=/usr/local/bin
else
  bin_dir="$HOME/.local/bin"
fi
mkdir -p "$bin_dir"
ln -sfn "$venv/bin/madengine" "$bin_dir/madengine"
case ":$PATH:" in
  *":$bin_dir:"*) echo "install.sh: madengine installed in $venv; linked as $bin_dir/madengine" >&2 ;;
  *) echo "install.sh: madengine installed in $venv; linked as $bin_dir/madengine (add $bin_dir to PATH)" >&2 ;;
esac
