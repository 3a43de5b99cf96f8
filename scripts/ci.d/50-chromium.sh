#!/usr/bin/env bash
# Headless Chromium for the browser test of perf.html and the email body
# (tests/test_report_browser.py). Idempotent: installs the Debian package `chromium` and a font
# when missing; the tests start and stop the browser themselves.
set -euo pipefail

if command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1; then
  exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends chromium fonts-dejavu-core >/dev/null
command -v chromium >/dev/null 2>&1 || { echo "50-chromium: chromium did not install" >&2; exit 1; }
echo "50-chromium: $(chromium --version 2>/dev/null | head -n 1)" >&2
