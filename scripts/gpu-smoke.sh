#!/usr/bin/env bash
# One command that proves a GPU host end to end, in a few minutes, with nothing but the host's own
# Python and PyTorch and a folder of wheels (scripts/gpu-wheels.sh makes it; such a host may have no
# registry and no Docker):
#   1. a virtual environment over the host's Python (its PyTorch stays visible), madengine installed
#      there from the wheels, offline;
#   2. madengine doctor --json (the local executor's view, the models of steps 3 and 4 selected);
#   3. pyt_bert_inference and pyt_gpt2_generate, small sizes, --executor local, with the GPU sampler
#      (memory and utilisation through nvidia-ml-py or amd-smi) on the run;
#   4. pyt_resnet50_train as a 1-node torchrun job as its models.json block has it: one rank per
#      visible GPU over the GPU's collective backend (NCCL, RCCL on ROCm); on a CPU host 2 ranks
#      over gloo.
# Every row goes to OUT/perf.csv, the doctor's JSON to OUT/doctor.json, each step's output to
# OUT/logs/, the runs' artifacts to OUT/runs/ and a summary to OUT/summary.txt. On a CPU-only host
# the same steps run on the CPU and it says so; a GPU-only step that cannot run says so in one line.
# Exit 0 when every step passed, 1 when one failed, 2 for bad input.
# Usage: scripts/gpu-smoke.sh --wheels DIR [--out DIR] [--python PYTHON]
set -uo pipefail
usage="usage: scripts/gpu-smoke.sh --wheels DIR [--out DIR] [--python PYTHON]"
bad() { echo "gpu-smoke: $1 ($usage)" >&2; exit 2; }
wheels="" out="gpu-smoke" python="python3"
while [ $# -gt 0 ]; do
  case "$1" in
    --wheels|--out|--python)
      [ $# -ge 2 ] && [ -n "$2" ] || bad "$1 needs a value"
      case "$1" in --wheels) wheels="$2" ;; --out) out="$2" ;; --python) python="$2" ;; esac
      shift 2 ;;
    -h|--help) echo "$usage"; exit 0 ;;
    *) bad "unknown argument '$1'" ;;
  esac
done
[ -n "$wheels" ] || bad "--wheels is required: the folder scripts/gpu-wheels.sh filled"
[ -d "$wheels" ] || bad "--wheels $wheels is not a folder"
wheel=$(ls "$wheels"/madengine-*.whl 2>/dev/null | sort | tail -n1)
[ -n "$wheel" ] || bad "--wheels $wheels holds no madengine wheel (make one with scripts/gpu-wheels.sh $wheels)"
command -v "$python" >/dev/null 2>&1 || bad "--python $python is not an interpreter on PATH"
repo=$(cd "$(dirname "$0")/.." && pwd)
wheels=$(cd "$wheels" && pwd)
mkdir -p "$out/logs" || bad "--out $out cannot be made"
out=$(cd "$out" && pwd)
started=$(date +%s)
failed=()
say() { echo "gpu-smoke: $*" >&2; echo "$*" >> "$out/summary.txt"; }
: > "$out/summary.txt"

# -- 1. the environment ---------------------------------------------------------------------------------
venv="$out/venv"
rm -rf "$venv"
if ! "$python" -m venv --system-site-packages "$venv" >"$out/logs/venv.log" 2>&1; then
  rm -rf "$venv"  # Debian/Ubuntu without python3-venv: no ensurepip, so a venv without pip
  "$python" -m venv --system-site-packages --without-pip "$venv" >>"$out/logs/venv.log" 2>&1 \
    || { say "FAIL install: $python cannot make a virtual environment (logs/venv.log)"; exit 1; }
fi
py="$venv/bin/python"
# the host's packages stay visible: its system site (--system-site-packages) and, when the given
# Python is itself a virtual or conda environment, that environment's site folders too
site=$("$py" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
"$python" -c 'import sys; print("\n".join(p for p in sys.path if p.endswith(("site-packages", "dist-packages"))))' \
  > "$site/madengine_host_python.pth"

install() {  # pip of the venv, else the host's pip aimed at the venv, else the wheels unpacked as they are
  if "$py" -m pip --version >/dev/null 2>&1; then
    "$py" -m pip install -q --disable-pip-version-check --no-index --find-links "$wheels" "$@"
  elif "$python" -m pip --version >/dev/null 2>&1; then
    "$python" -m pip --python "$py" install -q --disable-pip-version-check --no-index --find-links "$wheels" "$@"
  else
    "$py" - "$wheels" "$site" <<'EOF'
import pathlib, sys, zipfile
for wheel in sorted(pathlib.Path(sys.argv[1]).glob("*.whl")):
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(sys.argv[2])
EOF
  fi
}
{
  # the wheel replaces any madengine the host's Python already has; then what it needs, from the folder
  install --force-reinstall --no-deps "$wheel" && install "madengine[gpu]" transformers
} >"$out/logs/install.log" 2>&1 || {
  say "WARN install: madengine[gpu] with transformers did not install from $wheels (logs/install.log); trying madengine alone"
  install "madengine" >>"$out/logs/install.log" 2>&1 || { say "FAIL install: madengine did not install (logs/install.log)"; exit 1; }
}
# the local executor's python3 is this environment's (the host's torch, pynvml); torchrun is the host's
base_scripts=$("$python" -c 'import sysconfig; print(sysconfig.get_path("scripts"))')
export PATH="$venv/bin:$base_scripts:$PATH"
export MODEL_DIR="$repo" MADENGINE_CACHE_DIR="$out/cache"
mad=("$py" -m madengine)
read -r version package < <("$py" -c 'import madengine, os; print(madengine.__version__, os.path.dirname(madengine.__file__))')
say "madengine $version from $package (wheels from $wheels, Python $("$py" -c 'import platform; print(platform.python_version())'))"
case "$package" in
  "$venv"/*) ;;
  *) say "WARN madengine is imported from $package, not from the wheel installed in $venv (PYTHONPATH?)" ;;
esac

# -- what this host has ------------------------------------------------------------------------------------
read -r vendor ngpus < <("$py" -c 'from madengine.context.detect import detect_gpus; g = detect_gpus(); print(g.vendor, g.count)')
torch_gpus=$("$py" -c 'import torch; print(torch.cuda.device_count() if torch.cuda.is_available() else 0)' 2>>"$out/logs/torch.log")
if [ -z "$torch_gpus" ]; then
  say "FAIL pytorch: $python has no working PyTorch (logs/torch.log): the pyt_* models cannot run"
  failed+=(pytorch)
  torch_gpus=0
fi
distributed='{}'  # the torchrun job's block as models.json has it ("auto": the GPUs madengine sees)
if [ "$torch_gpus" -gt 0 ]; then
  say "GPU host: $vendor, $ngpus GPU(s) detected, PyTorch sees $torch_gpus; the torchrun job gets one rank per GPU over nccl"
elif [ "$vendor" = CPU ]; then
  say "CPU-only host: every step runs on the CPU (2 gloo ranks for the torchrun job, no GPU sampler)"
else
  distributed='{"backend": "gloo"}'  # its ranks run on the CPU: nccl would refuse them
  say "WARN $vendor host with $ngpus GPU(s), but PyTorch sees none (a CPU build?): every step runs on the CPU"
fi
if "$py" "$("$py" -c 'import madengine, os; print(os.path.dirname(madengine.__file__))')/scripts/tools/gpu_sampler.py" \
    --check >"$out/logs/sampler-check.log" 2>&1; then
  tools='[{"name": "gpu_info_vram_profiler"}, {"name": "gpu_info_power_profiler"}]'
  say "GPU sampler: $(cat "$out/logs/sampler-check.log") records memory, utilisation and power beside each model"
else
  tools='[{"name": "cpu_monitor"}]'
  say "GPU sampler: skipped, no GPU monitoring backend answers here ($(tail -n1 "$out/logs/sampler-check.log" | cut -c1-200)); cpu_monitor samples the CPU instead"
fi

# -- 2. doctor ------------------------------------------------------------------------------------------------
"${mad[@]}" doctor --json --executor local --tags pyt_bert_inference pyt_gpt2_generate pyt_resnet50_train \
  --additional-context "{\"distributed\": $distributed}" >"$out/doctor.json" 2>"$out/logs/doctor.log"
code=$?
say "doctor: exit $code, $(tail -n1 "$out/logs/doctor.log")"
[ "$code" = 0 ] || failed+=(doctor)

# -- 3 and 4. the models ------------------------------------------------------------------------------------
run_models() {  # NAME CONTEXT TAGS...
  local name="$1" context="$2"
  shift 2
  "${mad[@]}" run --executor local --tags "$@" --perf-csv "$out/perf.csv" --runs-dir "$out/runs" --no-html \
    --additional-context "$context" >"$out/logs/$name.log" 2>&1
  local code=$?
  say "$name: exit $code ($*)"
  [ "$code" = 0 ] || failed+=("$name")
}
run_models models "{\"tools\": $tools}" \
  pyt_bert_inference:iterations=5:warmup=1 pyt_gpt2_generate:new-tokens=8:runs=2
run_models torchrun "{\"tools\": $tools, \"distributed\": $distributed}" pyt_resnet50_train:steps=2:warmup-steps=1

# -- the rows --------------------------------------------------------------------------------------------------
if [ -f "$out/perf.csv" ]; then
  "$py" - "$out/perf.csv" >>"$out/summary.txt" <<'EOF'
import csv, json, sys
with open(sys.argv[1], newline="") as handle:
    for row in csv.DictReader(handle):
        context = json.loads(row.get("context") or "{}")
        gpu = ", ".join(str(context.get(k, "")) for k in ("gpu_vendor", "gpu_product_name", "gpu_architecture",
                                                         "gpu_driver_version", "system_ngpus"))
        sampled = ", ".join(f"{k}={row[k]}" for k in ("vram_peak_mb", "gpu_util_mean", "power_mean_w",
                                                       "cpu_util_mean") if row.get(k))
        print(f"row {row['model']}: {row['status']} {row['performance']} {row['metric']} "
              f"[{gpu}] launcher={row.get('launcher', '')} world_size={row.get('world_size', '')} "
              f"dist_backend={row.get('dist_backend', '')} {sampled} "
              f"{row.get('reason', '')}".rstrip())
EOF
  tail -n +1 "$out/summary.txt" | grep '^row ' >&2
fi
seconds=$(( $(date +%s) - started ))
if [ ${#failed[@]} -gt 0 ]; then
  say "FAILED: ${failed[*]} (${seconds} s; logs in $out/logs)"
  exit 1
fi
say "passed in ${seconds} s: rows in $out/perf.csv, the doctor's JSON in $out/doctor.json"
