#!/bin/sh
# madengine's entry point in a Kubernetes pod (madengine.k8s.render): runs in the model's own image.
#   1. copy the model's scripts from the ConfigMap (read-only) into the writable work folder;
#   2. take this node's variables (nodes/<index>.env: NAME=VALUE lines, read as data, never run);
#   3. run the model step given as arguments, in the work folder;
#   4. print a multiple_results CSV into the log (the log is how results come back) and copy the
#      per-rank logs and that CSV to /results when a results volume is mounted.
# The pod's exit status is the model step's; 90 means this script could not prepare the run.
set -u
src=/madengine
work=/myworkspace
while IFS= read -r path; do
  [ -n "$path" ] || continue
  mkdir -p "$work/$(dirname -- "$path")" && cp -- "$src/files/$path" "$work/$path" || exit 90
done < "$src/files.list"
node="${JOB_COMPLETION_INDEX:-0}"
if [ -f "$src/nodes/$node.env" ]; then
  while IFS= read -r pair; do
    [ -z "$pair" ] || export "$pair" || exit 90
  done < "$src/nodes/$node.env"
fi
[ -z "${MAD_RANK_LOG_DIR:-}" ] || mkdir -p "$MAD_RANK_LOG_DIR" || exit 90
cd "$work" || exit 90
echo "=== madengine: pod ${MAD_POD_NAME:-?} on node ${MAD_NODE_NAME:-?}, node rank $node"
"$@" 2>&1  # one stream: the log keeps the order the model wrote its lines in
status=$?
echo "=== madengine: the model step ended with exit code $status"
if [ -n "${MAD_OUTPUT_CSV:-}" ] && [ -f "$MAD_OUTPUT_CSV" ]; then
  echo "=== madengine: multiple_results begin"
  cat -- "$MAD_OUTPUT_CSV"
  echo
  echo "=== madengine: multiple_results end"
fi
if [ -d /results ] && [ -w /results ]; then
  keep="/results/${MAD_RUN_ID:-run}/${MAD_POD_NAME:-pod}"
  mkdir -p "$keep" && {
    [ ! -d "$work/madengine_ranks" ] || cp -R -- "$work/madengine_ranks" "$keep/"
    [ -z "${MAD_OUTPUT_CSV:-}" ] || [ ! -f "$MAD_OUTPUT_CSV" ] || cp -- "$MAD_OUTPUT_CSV" "$keep/"
  }
fi
exit $status
