#!/usr/bin/env bash
# System packages of the distributed part's tests (tests/test_slurm_run.py, tests/test_build_*.py):
#   slurm-wlm + munge   a real Slurm; the tests start their own munged, slurmctld and slurmd as root
#                       in a temporary folder (own key, ports and slurm.conf) and stop them after
#   docker-registry     a real registry for build --registry / run --registry; the tests start it on
#                       127.0.0.1 (an insecure registry the Docker engine allows by default)
# Idempotent: installs only what is missing and starts nothing (services the packages may start
# under systemd use their default sockets and ports, which the tests do not touch).
set -euo pipefail

missing=()
command -v slurmctld >/dev/null 2>&1 || missing+=(slurm-wlm)
command -v munged >/dev/null 2>&1 || missing+=(munge)
command -v docker-registry >/dev/null 2>&1 || missing+=(docker-registry)
if [ "${#missing[@]}" -gt 0 ]; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

for tool in munged slurmctld slurmd sbatch squeue scontrol scancel sinfo docker-registry; do
  command -v "$tool" >/dev/null || { echo "40-slurm.sh: $tool is still missing" >&2; exit 1; }
done
echo "40-slurm.sh: $(slurmctld -V), $(munged -V 2>&1 | head -n 1 | awk '{print $1}'), docker-registry ready" >&2
