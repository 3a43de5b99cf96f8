#!/bin/sh
# madengine's entry point in a Kubernetes pod (madengine.k8s.render): runs in the model's own image,
# as the container's PID 1.
#   1. copy the model's scripts (and the tools' files) from the ConfigMap (read-only) into the work folder;
#   2. take this node's variables (nodes/<index>.env: NAME=VALUE lines, read as data, never run); turn
#      the host names of MAD_RESOLVE_ADDRESSES' variables into addresses; on the host's network, set
#      the socket interface of NCCL and gloo (MAD_SOCKET_IFNAME, 'auto': the default route's);
#   3. run the steps before the model (steps.list: tools, pre-scripts), the model step given as
#      arguments, then the steps after it, each in the work folder;
#   4. print a multiple_results CSV and the tools' outputs (base64) into the log (the log is how
#      results come back) and copy the per-rank logs, the CSV and the outputs to /results when a
#      results volume is mounted.
# Stopping: SIGTERM (a delete, the Job's deadline, a preemption) is forwarded to every process below
# this script; the step gets MAD_STOP_GRACE seconds to end, then they are killed, and step 4 runs
# whatever happened, within the pod's grace period. A stopped pod exits 143 (never 0: a stopped
# benchmark is not a result); otherwise the pod's exit status is the first failed step's.
# 90 means this script could not prepare the run.
set -u
src=/madengine
work=/myworkspace
stop=""
trap 'stop=TERM' TERM
trap 'stop=INT' INT
trap 'stop=HUP' HUP

say() { echo "=== madengine: $*"; }

# the state of process $1 into $st ('' when it is gone); builtins only: no helper process is started
proc_state() {
  st=""
  { read -r line < "/proc/$1/stat"; } 2>/dev/null || return 0
  rest=${line##*) }
  st=${rest%% *}
}
running() { proc_state "$1"; [ -n "$st" ] && [ "$st" != Z ]; }

# signal $1 to every process below this script (children, theirs, and orphans it adopted as PID 1)
signal_tree() {
  found=" $$ "
  grew=1
  while [ "$grew" = 1 ]; do
    grew=0
    for stat in /proc/[0-9]*/stat; do
      pid=${stat#/proc/}
      pid=${pid%/stat}
      case "$found" in *" $pid "*) continue ;; esac
      { read -r line < "$stat"; } 2>/dev/null || continue
      rest=${line##*) }
      rest=${rest#* }
      case "$found" in *" ${rest%% *} "*) found="$found$pid "; grew=1 ;; esac
    done
  done
  for pid in $found; do
    [ "$pid" = "$$" ] || kill -s "$1" "$pid" 2>/dev/null
  done
}

# run "$@" in the work folder; its exit status in $status. A stop is forwarded (see above).
run_step() {
  "$@" 2>&1 &  # one stream: the log keeps the order the step wrote its lines in
  child=$!
  forwarded=""
  while :; do
    wait "$child"
    status=$?
    if [ -n "$stop" ] && [ -z "$forwarded" ]; then
      forwarded=1
      say "SIG$stop received: stopping the step (${MAD_STOP_GRACE:-30} s to end)"
      signal_tree TERM
      waited=0
      while running "$child" && [ "$waited" -lt "${MAD_STOP_GRACE:-30}" ]; do
        sleep 1
        waited=$((waited + 1))
      done
      if running "$child"; then
        say "the step did not end within ${MAD_STOP_GRACE:-30} s: killed"
        signal_tree KILL
      fi
      continue  # wait again: the step's own status (kept by the shell if it reaped the step meanwhile)
    fi
    proc_state "$child"
    [ -n "$st" ] || break  # reaped: $status is its own (else a signal cut the wait short)
  done
}

# run the steps listed for $1 (pre or post); the first failure's status in $failed
run_steps() {
  phase=$1
  [ -f "$src/steps.list" ] || return 0
  while read -r when index name; do
    [ "$when" = "$phase" ] && [ -z "$stop" ] || continue
    set --
    while IFS= read -r arg; do set -- "$@" "$arg"; done < "$src/steps/$index.args"
    say "step $name"
    run_step "$@"
    if [ "$status" -ne 0 ] && [ "$failed" -eq 0 ]; then
      failed=$status
      say "step $name failed with exit code $status"
      [ "$phase" = post ] || return 0
    fi
  done < "$src/steps.list"
}

resolve() {  # the addresses of comma-separated host names, waiting up to 300 s for each
  out=""
  rest="$1,"
  while [ -n "$rest" ]; do
    host=${rest%%,*}
    rest=${rest#*,}
    tries=0
    until address=$(getent ahostsv4 "$host" 2>/dev/null || getent hosts "$host" 2>/dev/null); do
      tries=$((tries + 1))
      [ "$tries" -lt 300 ] && [ -z "$stop" ] || return 1
      sleep 1
    done
    set -- $address
    out="${out:+$out,}$1"
  done
  echo "$out"
}

default_ifname() {  # the interface of the default route (/proc/net/route: destination 00000000)
  while read -r iface destination _; do
    [ "$destination" = 00000000 ] && { echo "$iface"; return; }
  done < /proc/net/route
}

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
case ",${MAD_RESOLVE_ADDRESSES:-}," in
  *,SGLANG_NODE_IPS,*)  # the reference's definition: the nodes' IP addresses, in node rank order
    addresses=$(resolve "${SGLANG_NODE_IPS:-}") || {
      [ -z "$stop" ] || exit 143
      say "SGLANG_NODE_IPS: cannot resolve ${SGLANG_NODE_IPS:-}"
      exit 90
    }
    export SGLANG_NODE_IPS="$addresses" ;;
esac
if [ -n "${MAD_SOCKET_IFNAME:-}" ]; then
  ifname=$MAD_SOCKET_IFNAME
  [ "$ifname" != auto ] || ifname=$(default_ifname)
  [ -z "$ifname" ] || export NCCL_SOCKET_IFNAME="${NCCL_SOCKET_IFNAME:-$ifname}" \
    GLOO_SOCKET_IFNAME="${GLOO_SOCKET_IFNAME:-$ifname}"
fi
[ -z "${MAD_RANK_LOG_DIR:-}" ] || mkdir -p "$MAD_RANK_LOG_DIR" || exit 90
cd "$work" || exit 90
say "pod ${MAD_POD_NAME:-?} on node ${MAD_NODE_NAME:-?}, node rank $node"

failed=0
run_steps pre
if [ "$failed" -eq 0 ] && [ -z "$stop" ]; then
  run_step "$@"
  model=$status
  say "the model step ended with exit code $model"
else
  model=0
fi
run_steps post
if [ -n "$stop" ]; then
  result=143
elif [ "$failed" -ne 0 ] && [ "$model" -eq 0 ]; then
  result=$failed
else
  result=$model
fi

if [ -n "${MAD_OUTPUT_CSV:-}" ] && [ -f "$MAD_OUTPUT_CSV" ]; then
  say "multiple_results begin"
  cat -- "$MAD_OUTPUT_CSV"
  echo
  say "multiple_results end"
fi
outputs=""
if [ -n "${MAD_OUTPUT_FILES:-}" ]; then
  for pattern in $(echo "$MAD_OUTPUT_FILES" | tr '\n' ' '); do
    for file in $pattern; do
      [ -f "$file" ] || continue
      outputs="$outputs $file"
      if [ "$(wc -c < "$file")" -le 1048576 ] && command -v base64 >/dev/null 2>&1; then
        say "output $file begin"
        base64 < "$file"
        say "output end"
      fi
    done
  done
fi
if [ -d /results ] && [ -w /results ]; then
  keep="/results/${MAD_RUN_ID:-run}/${MAD_POD_NAME:-pod}"
  mkdir -p "$keep" && {
    [ ! -d "$work/madengine_ranks" ] || cp -R -- "$work/madengine_ranks" "$keep/"
    [ -z "${MAD_OUTPUT_CSV:-}" ] || [ ! -f "$MAD_OUTPUT_CSV" ] || cp -- "$MAD_OUTPUT_CSV" "$keep/"
    for file in $outputs; do mkdir -p "$keep/$(dirname -- "$file")" && cp -- "$file" "$keep/$file"; done
  }
  say "results copied to $keep"
fi
exit $result
