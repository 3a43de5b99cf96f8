#!/usr/bin/env bash
# serve_tiny: `transformers serve` (transformers' own OpenAI-compatible server) on a tiny random GPT-2
# and a BPE tokenizer made here by make_tiny_model.py (nothing is downloaded, nothing is committed).
# madengine's "serving" block gives the port (MAD_SERVING_PORT), waits for /health, runs the load
# points and ends this server's process group when they are done.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
python=${PYTHON:-python3}
# relative: `transformers serve` pins the name it was given, which the requests then send
model_dir="${MAD_SERVING_MODEL:-tiny-gpt2}"
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
"$python" "$here/make_tiny_model.py" "$model_dir"
# the transformers CLI's module: the same interpreter that made the model, whatever is on PATH
exec "$python" -m transformers.cli.transformers serve "$model_dir" --host "${MAD_SERVING_HOST:-127.0.0.1}" \
  --port "${MAD_SERVING_PORT:-8000}" --device cpu --log-level warning "$@"
