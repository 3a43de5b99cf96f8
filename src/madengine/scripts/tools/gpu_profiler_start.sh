#!/usr/bin/env bash
# madengine pre-script: start the GPU sampler in the background for one mode (power | vram).
#
# Reads ${MODE}_SAMPLING_RATE (seconds between samples), ${MODE}_DEVICE (all | 0,1,...) and
# ${MODE}_BACKEND (auto | amd-smi | rocm-smi | nvml | nvidia-smi), MODE being POWER or VRAM.
# Writes gpu_info_<mode>_profiler_output.csv in the current folder (the model's folder); the
# sampler's pid and stop file live next to this script. Fails (exit 3) when no backend works,
# so a run that asked for a GPU profile never silently goes without one.
set -u
mode="${1:-power}"
case "$mode" in
  power|vram) ;;
  *) echo "gpu_profiler_start: unknown mode '$mode' (power or vram)" >&2; exit 2 ;;
esac
prefix=$(echo "$mode" | tr '[:lower:]' '[:upper:]')
rate_var="${prefix}_SAMPLING_RATE"; device_var="${prefix}_DEVICE"; backend_var="${prefix}_BACKEND"
rate="${!rate_var:-0.1}"; devices="${!device_var:-all}"; backend="${!backend_var:-auto}"
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
output="$PWD/gpu_info_${mode}_profiler_output.csv"
log="$PWD/gpu_info_${mode}_profiler.log"
pid_file="$here/gpu_${mode}.pid"
stop_file="$here/gpu_${mode}.stop"
rm -f "$stop_file" "$pid_file"

if ! chosen=$(python3 "$here/gpu_sampler.py" --check --backend "$backend" 2>"$log"); then
  cat "$log" >&2
  exit 3
fi
echo "gpu_profiler_start: sampling GPU $mode with $chosen every ${rate}s (devices: $devices) -> $(basename "$output")"
max_args=()
[ -n "${MAD_TOOLS_MAX_SECONDS:-}" ] && max_args=(--max-seconds "$MAD_TOOLS_MAX_SECONDS")
# A daemon in its own session, detached from this step's output: when a step's main process ends,
# madengine kills what is left of the step's process group, and the sampler must outlive this step.
if command -v setsid >/dev/null 2>&1; then
  detach=(setsid)
else  # no util-linux: python3 (which the sampler needs anyway) makes the new session before exec
  detach=(python3 -c 'import os, sys; os.setsid(); os.execvp(sys.argv[1], sys.argv[1:])')
fi
"${detach[@]}" python3 "$here/gpu_sampler.py" --backend "$chosen" --output "$output" --interval "$rate" \
  --devices "$devices" --stop-file "$stop_file" ${max_args[@]+"${max_args[@]}"} </dev/null >>"$log" 2>&1 &
pid=$!
echo "$pid" > "$pid_file"
# do not end the step before the sampler has left this step's session
for _ in $(seq 1 50); do
  session=$(sed 's/.*) //' "/proc/$pid/stat" 2>/dev/null | cut -d' ' -f4)
  [ -z "$session" ] || [ "$session" = "$pid" ] && break
  sleep 0.02
done
