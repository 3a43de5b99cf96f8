#!/usr/bin/env bash
# The wheels of the pyt_* models' image. Containers cannot download, so every package of
# wheels/pyt/requirements.txt (pinned with hashes, made by scripts/lock.sh) is fetched here, for the base image's Python (CPython 3.11,
# manylinux, this machine's architecture), into wheels/pyt/: the build context of docker/pyt.Dockerfile,
# which installs them with `pip install --no-index`. The wheels are not committed (.gitignore).
#
# Idempotent and fast when done: wheels/pyt/.complete records the lock file's hash and the wheels
# fetched for it; while it matches and every wheel is there, nothing is fetched. Otherwise the wheels
# are fetched into a scratch folder and replace the old ones only when all arrived.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=wheels/pyt
lock="$dir/requirements.txt"
stamp="$dir/.complete"
want=$(sha256sum "$lock" | cut -d' ' -f1)

up_to_date() {
  [ -f "$stamp" ] && [ "$(head -n1 "$stamp")" = "$want" ] || return 1
  local wheel
  while read -r wheel; do [ -f "$dir/$wheel" ] || return 1; done < <(tail -n +2 "$stamp")
}

if up_to_date; then
  echo "pyt-wheels: $dir is up to date" >&2
  exit 0
fi
arch=$(uname -m)
platforms=(--platform "manylinux2014_$arch")
for minor in $(seq 17 36); do platforms+=(--platform "manylinux_2_${minor}_$arch"); done  # bookworm: glibc 2.36
scratch=$(mktemp -d wheels/.download.XXXXXX)
trap 'rm -rf "$scratch"' EXIT
echo "pyt-wheels: fetching the wheels of $lock (torch alone is about 190 MB)" >&2
if ! python3 -m pip download -q --disable-pip-version-check --require-hashes --no-deps --only-binary=:all: \
    --python-version 3.11 --implementation cp --abi cp311 "${platforms[@]}" -r "$lock" -d "$scratch"; then
  echo "pyt-wheels: pip download failed; torch==2.13.0+cpu comes from pip's find-links (the CPU build," \
       "e.g. /opt/wheels; PyPI has only the CUDA build)" >&2
  exit 1
fi
rm -f "$dir"/*.whl
mv "$scratch"/*.whl "$dir"/
{ echo "$want"; (cd "$dir" && ls -1 -- *.whl); } > "$stamp"
echo "pyt-wheels: $(ls "$dir"/*.whl | wc -l) wheels, $(du -sh --apparent-size "$dir" | cut -f1) in $dir" >&2
