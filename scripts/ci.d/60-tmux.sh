#!/usr/bin/env bash
# tmux: a real terminal for the test that watches the live progress line (tests/test_everyday.py).
set -euo pipefail
command -v tmux >/dev/null 2>&1 && exit 0
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends tmux >/dev/null
command -v tmux >/dev/null 2>&1 || { echo "60-tmux: tmux did not install" >&2; exit 1; }
