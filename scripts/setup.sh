#!/usr/bin/env bash
# One-time set-up for running models on this machine: madengine itself, a Docker engine with
# the local base image the bundled example models build FROM, and the wheels the pyt_* models'
# image installs (containers cannot download).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh all
bash scripts/docker-up.sh
bash scripts/pyt-wheels.sh
