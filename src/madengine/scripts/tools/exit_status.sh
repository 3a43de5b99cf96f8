#!/usr/bin/env bash
# Runs a command and records its exit status in a file (first argument), then exits with it.
# profile_wrapper.sh puts this between a profiler and the model, so the model's own status is
# known even when the profiler reports something else.
status_file="$1"
shift
"$@"
status=$?
echo "$status" > "$status_file"
exit "$status"
