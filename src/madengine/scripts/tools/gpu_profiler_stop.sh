#!/usr/bin/env bash
# madengine post-script: stop the GPU sampler started by gpu_profiler_start.sh for one mode.
# Creates the stop file, waits up to 10 s for the sampler to write its last rows, then
# terminates it. Fails when the sampler produced no samples (the profile would be empty).
set -u
mode="${1:-power}"
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
output="$PWD/gpu_info_${mode}_profiler_output.csv"
pid_file="$here/gpu_${mode}.pid"
stop_file="$here/gpu_${mode}.stop"
touch "$stop_file"
# Running (not merely a zombie waiting for an init that reaps slowly)?
alive() {
  [ -r "/proc/$1/stat" ] || return 1
  state=$(sed 's/.*) //' "/proc/$1/stat" | cut -d' ' -f1)
  [ -n "$state" ] && [ "$state" != "Z" ] && [ "$state" != "X" ]
}
if [ -s "$pid_file" ]; then
  pid=$(cat "$pid_file")
  for _ in $(seq 1 100); do
    alive "$pid" || break
    sleep 0.1
  done
  if alive "$pid"; then
    kill -TERM "$pid" 2>/dev/null
    sleep 1
    alive "$pid" && kill -KILL "$pid" 2>/dev/null
  fi
  rm -f "$pid_file"
else
  echo "gpu_profiler_stop: no sampler was started for $mode" >&2
fi
rows=$(($(wc -l < "$output" 2>/dev/null || echo 0)))
if [ "$rows" -lt 2 ]; then
  echo "gpu_profiler_stop: $(basename "$output") has no samples" >&2
  cat "$PWD/gpu_info_${mode}_profiler.log" >&2 2>/dev/null
  exit 1
fi
echo "gpu_profiler_stop: $((rows - 1)) rows in $(basename "$output")"
