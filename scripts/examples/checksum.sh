#!/usr/bin/env bash
# A shell model: hash SIZE_MB of generated data with sha256sum and report the throughput.
set -euo pipefail
size_mb=64
while [ $# -gt 0 ]; do
  case "$1" in
    --size-mb) size_mb="$2"; shift 2 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
start=$(date +%s%N)
head -c "$((size_mb * 1024 * 1024))" /dev/zero | sha256sum >/dev/null
end=$(date +%s%N)
echo "hashed ${size_mb} MB on ${MAD_GPU_VENDOR:-?} host, model ${MAD_MODEL_NAME:-?}"
awk -v mb="$size_mb" -v ns="$((end - start))" 'BEGIN { printf "performance: %.2f MB_per_second\n", mb / (ns / 1e9) }'
