#!/usr/bin/env bash
# madengine profiler wrapper: profile_wrapper.sh <profiler> [profiler options] -- COMMAND...
#
# profiler: rocprof (rocprofv3 when installed, else legacy rocprof), rocprofv3 (required),
#           nsys (Nsight Systems) or ncu (Nsight Compute).
# Outputs (in the current folder): rocprof_output/ (rocprof, rocprofv3), nsys_report.nsys-rep,
# ncu_report.ncu-rep.
# Exit status: the command's when it failed; else the profiler's (a profiler that failed to
# write its report fails the run); never a status that hides the command's failure.
set -u
profiler="${1:-}"
shift || true
options=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do options+=("$1"); shift; done
[ "${1:-}" = "--" ] && shift
if [ $# -eq 0 ]; then
  echo "profile_wrapper: usage: profile_wrapper.sh <rocprof|rocprofv3|nsys|ncu> [options] -- COMMAND..." >&2
  exit 2
fi
need() {
  command -v "$1" >/dev/null 2>&1 && return 0
  echo "profile_wrapper: $1 is not installed in this image/host (needed by the $profiler tool)" >&2
  exit 127
}
case "$profiler" in
  rocprof)
    if command -v rocprofv3 >/dev/null 2>&1; then
      prefix=(rocprofv3 -d rocprof_output ${options[@]+"${options[@]}"} --)
    else
      need rocprof
      mkdir -p rocprof_output
      prefix=(rocprof -d rocprof_output -o rocprof_output/results.csv ${options[@]+"${options[@]}"})
    fi ;;
  rocprofv3)
    need rocprofv3
    prefix=(rocprofv3 -d rocprof_output ${options[@]+"${options[@]}"} --) ;;
  nsys)
    need nsys
    prefix=(nsys profile --force-overwrite=true -o nsys_report ${options[@]+"${options[@]}"}) ;;
  ncu)
    need ncu
    prefix=(ncu -f --target-processes all -o ncu_report ${options[@]+"${options[@]}"}) ;;
  *)
    echo "profile_wrapper: unknown profiler '$profiler' (rocprof, rocprofv3, nsys, ncu)" >&2
    exit 2 ;;
esac
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
status_file=$(mktemp)  # in $TMPDIR, else /tmp
"${prefix[@]}" bash "$here/exit_status.sh" "$status_file" "$@"
profiler_status=$?
command_status=$(cat "$status_file" 2>/dev/null)
rm -f "$status_file"
if [ -z "$command_status" ]; then
  echo "profile_wrapper: $profiler exited with $profiler_status before the command ran" >&2
  [ "$profiler_status" -ne 0 ] && exit "$profiler_status"
  exit 1
fi
[ "$command_status" -ne 0 ] && exit "$command_status"
if [ "$profiler_status" -ne 0 ]; then
  echo "profile_wrapper: the command succeeded but $profiler exited with $profiler_status" >&2
  exit "$profiler_status"
fi
exit 0
