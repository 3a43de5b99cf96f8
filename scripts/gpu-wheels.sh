#!/usr/bin/env bash
# The wheels scripts/gpu-smoke.sh installs on a GPU host that has no registry: madengine built from
# this checkout, its runtime dependencies, nvidia-ml-py (the GPU sampler's NVML backend) and
# transformers at the lock's version (pyt_bert_inference and pyt_gpt2_generate build their models
# from its configs), for CPython --python-version (default 3.12) on manylinux x86-64. Never torch:
# the smoke test uses the host's own PyTorch. numpy is left out unless --with-numpy (a PyTorch stack
# has it; it is a third of the folder). The folder stays well under the 64 MiB a lent GPU host is
# carried (about 33 MB; 48 with numpy); a bigger one is an error.
# Usage: scripts/gpu-wheels.sh DIR [--python-version X.Y] [--with-numpy]
set -euo pipefail
usage="usage: scripts/gpu-wheels.sh DIR [--python-version X.Y] [--with-numpy]"
out="" version=3.12 numpy=0
while [ $# -gt 0 ]; do
  case "$1" in
    --python-version) [ $# -ge 2 ] || { echo "gpu-wheels: --python-version needs a value ($usage)" >&2; exit 2; }
                      version="$2"; shift 2 ;;
    --with-numpy) numpy=1; shift ;;
    -h|--help) echo "$usage"; exit 0 ;;
    -*) echo "gpu-wheels: unknown option $1 ($usage)" >&2; exit 2 ;;
    *) [ -z "$out" ] || { echo "gpu-wheels: one folder only ($usage)" >&2; exit 2; }
       out="$1"; shift ;;
  esac
done
[ -n "$out" ] || { echo "gpu-wheels: name the folder to fill ($usage)" >&2; exit 2; }
[[ "$version" =~ ^3\.[0-9]+$ ]] || { echo "gpu-wheels: --python-version '$version' is not 3.N" >&2; exit 2; }
repo=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$out"
out=$(cd "$out" && pwd)
py="${MADENGINE_PYTHON:-}"
if [ -z "$py" ]; then
  py=python3
  [ -x "$repo/.venv/bin/python" ] && py="$repo/.venv/bin/python"
fi
limit_mib=48
platforms=(--platform manylinux2014_x86_64)
for minor in $(seq 17 28); do platforms+=(--platform "manylinux_2_${minor}_x86_64"); done  # RHEL 8, Ubuntu 20.04 and later
pin=$(sed -n 's/^\(transformers==[^ ]*\).*/\1/p' "$repo/requirements/py311-linux-x86_64.txt" | head -n1)

rm -f "$out"/madengine-*.whl
echo "gpu-wheels: building madengine's wheel" >&2
# pure Python (setup.py leaves its C part out): a wheel built here installs on the host's Python too
MADENGINE_PURE_PYTHON=1 "$py" -m pip wheel -q --disable-pip-version-check --no-deps -w "$out" "$repo" >&2
wheel=$(ls "$out"/madengine-*.whl)
echo "gpu-wheels: fetching its dependencies, nvidia-ml-py and ${pin:-transformers} for CPython $version" >&2
"$py" -m pip download -q --disable-pip-version-check --only-binary=:all: --python-version "$version" \
  --implementation cp "${platforms[@]}" -d "$out" "$wheel[gpu]" "${pin:-transformers}" >&2
if [ "$numpy" != 1 ]; then
  rm -f "$out"/numpy-*.whl
fi
size_mib=$(( $(du -sb "$out" | cut -f1) / 1024 / 1024 ))
echo "gpu-wheels: $(ls "$out"/*.whl | wc -l) wheels, ${size_mib} MiB in $out" >&2
if [ "$size_mib" -gt "$limit_mib" ]; then
  echo "gpu-wheels: $out holds ${size_mib} MiB, more than the ${limit_mib} MiB it may (64 MiB travel to a GPU host," \
       "the checkout with them)" >&2
  exit 1
fi
