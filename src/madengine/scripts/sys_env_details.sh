#!/usr/bin/env bash
# Collects environment details of the place a model runs (container or host) into one file.
# Deliberately prints no environment variables: they may hold credentials.
out="${1:-sys_env_details.txt}"
{
  echo "== uname"; uname -a
  echo "== os-release"; cat /etc/os-release 2>/dev/null
  echo "== cpu"; grep -m1 'model name' /proc/cpuinfo 2>/dev/null; nproc 2>/dev/null
  echo "== memory"; grep -E 'MemTotal|MemAvailable' /proc/meminfo 2>/dev/null
  echo "== python"; python3 --version 2>&1
  python3 -c 'import numpy; print("numpy", numpy.__version__)' 2>/dev/null
  python3 -c 'import torch; print("torch", torch.__version__)' 2>/dev/null
  echo "== gpu"
  if command -v nvidia-smi >/dev/null 2>&1; then nvidia-smi -L; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; fi
  if command -v amd-smi >/dev/null 2>&1; then amd-smi list; elif command -v rocm-smi >/dev/null 2>&1; then rocm-smi --showproductname; fi
  command -v nvidia-smi amd-smi rocm-smi >/dev/null 2>&1 || echo "no GPU tools"
} > "$out" 2>&1
echo "sys env details written to $out"
