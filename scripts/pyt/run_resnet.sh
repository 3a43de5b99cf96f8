#!/usr/bin/env bash
# The MAD contract: the launcher's command line is in MAD_MULTI_NODE_RUNNER (e.g. `torchrun
# --standalone --nproc_per_node=2`), and the script is its argument. Without a launcher, one process.
set -euo pipefail
cd "$(dirname "$0")"
# shellcheck disable=SC2086  # the runner is a command line: split into words on purpose
exec ${MAD_MULTI_NODE_RUNNER:-python3} train_resnet.py "$@"
