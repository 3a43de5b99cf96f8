"""A script's run time under ``madengine bench``'s analysis hook against the same script without it.

The script (written here) builds a BERT encoder from a config (4 layers, hidden 256: BERT-mini's
shape; random weights, nothing downloaded) and calls it --calls times on one 64-token sequence,
single-threaded. Side by side in one process, alternating (A B B A ...):

  A. the analysis: ``madengine.bench.pytorch.analysis.analyze_script`` (the hook installed, every
     module call counted, the model's hash, signature and example inputs taken);
  B. the script alone: ``runpy.run_path`` with the same ``sys.argv``.

Prints each side's median wall time and the ratio A/B (target <= 1.10; exit 1 above it), for
--max-depth 0 (the default) and, for information, 1 and 3.

    python3 benchmarks/script_hook_overhead.py [--rounds 10] [--calls 20] [--depths 0,1,3]
"""

from __future__ import annotations

import argparse
import runpy
import statistics
import sys
import tempfile
import time
from pathlib import Path

TARGET = 1.10

SCRIPT = '''
import sys
import torch
import transformers

torch.set_num_threads(1)
torch.manual_seed(0)
config = transformers.BertConfig(hidden_size=256, num_hidden_layers=4, num_attention_heads=4, intermediate_size=1024)
model = transformers.BertModel(config).eval()
input_ids = torch.randint(0, config.vocab_size, (1, 64))
with torch.no_grad():
    for _ in range(int(sys.argv[1])):
        model(input_ids=input_ids)
'''


def timed(call) -> float:
    started = time.perf_counter()
    call()
    return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--calls", type=int, default=20, help="model calls per script run")
    parser.add_argument("--depths", default="0,1,3", help="--max-depth values to measure (the target is for 0)")
    args = parser.parse_args()

    import contextlib
    import io

    import transformers  # noqa: F401  (imported once, outside the timings, like torch)

    from madengine.bench.pytorch.analysis import analyze_script

    with tempfile.TemporaryDirectory() as folder:
        script = Path(folder) / "bert_script.py"
        script.write_text(SCRIPT)

        def plain() -> None:
            saved = sys.argv[:]
            sys.argv = [str(script), str(args.calls)]
            try:
                runpy.run_path(str(script), run_name="__main__")
            finally:
                sys.argv[:] = saved

        worst = 0.0
        for depth in [int(d) for d in args.depths.split(",")]:
            def hooked() -> None:
                analysis = analyze_script(script, [str(args.calls)], max_depth=depth)
                assert not analysis.error and analysis.found, analysis.error

            with contextlib.redirect_stderr(io.StringIO()):
                plain(), hooked()  # warm-up: first-call costs (lazy imports, allocator) fall on neither side
            with_hook, without = [], []
            for index in range(args.rounds):
                for side in (("hook", "plain") if index % 2 == 0 else ("plain", "hook")):
                    if side == "hook":
                        with_hook.append(timed(hooked))
                    else:
                        without.append(timed(plain))
            a, b = statistics.median(with_hook), statistics.median(without)
            ratio = a / b
            found = len(analyze_script(script, [str(args.calls)], max_depth=depth).found)
            print(f"--max-depth {depth}: {found} model(s) observed; with hook {a:.3f} s, without {b:.3f} s "
                  f"(medians of {args.rounds}); ratio {ratio:.4f}" + (f" (target <= {TARGET})" if depth == 0 else ""))
            if depth == 0:
                worst = ratio
    print(f"script: BERT encoder 4x256 built from a config, {args.calls} calls of 64 tokens, 1 thread")
    return 0 if worst <= TARGET else 1


if __name__ == "__main__":
    sys.exit(main())
