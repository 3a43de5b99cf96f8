"""Text generation with a GPT-2-shaped decoder built from a transformers config (random weights, a
random prompt: nothing is downloaded). Greedy decoding with the KV cache through ``generate``.

Results go to the ``multiple_results`` CSV, each the median over the timed runs: ``tokens_per_second``
(generated tokens over the whole call, prefill included), ``ttft_ms`` (time to first token: the
prompt's prefill and the first new token) and ``tpot_ms`` (time per output token after the first).
"""

from __future__ import annotations

import argparse

import torch
from transformers import GPT2Config, GPT2LMHeadModel
from transformers.generation.streamers import BaseStreamer

from common import Clock, add_common_args, batch_size, by_device, describe, dtype_name, dtype_of, median, \
    pick_device, report_run, write_results


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=12, help="decoder layers (gpt2: 12, gpt2-medium: 24)")
    parser.add_argument("--hidden", type=int, default=768, help="hidden size (gpt2: 768, gpt2-medium: 1024)")
    parser.add_argument("--heads", type=int, default=12, help="attention heads (gpt2: 12, gpt2-medium: 16)")
    parser.add_argument("--prompt-tokens", type=int, default=32)
    parser.add_argument("--new-tokens", type=int, default=None, help="tokens to generate (default: 48 on CPU, 256 on GPU)")
    parser.add_argument("--runs", type=int, default=None, help="timed generations (default: 3 on CPU, 10 on GPU)")
    parser.add_argument("--warmup", type=int, default=1, help="untimed generations first")
    add_common_args(parser)
    return parser.parse_args()


class TokenTimes(BaseStreamer):
    """The time each step of ``generate`` hands over its new tokens (the first call is the prompt)."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.times: list[float] = []
        self.prompt_seen = False

    def put(self, value: torch.Tensor) -> None:
        if not self.prompt_seen:
            self.prompt_seen = True
            return
        self.times.append(self.clock())

    def end(self) -> None:
        pass


def generate_once(model: GPT2LMHeadModel, prompt: torch.Tensor, new_tokens: int,
                  clock: Clock) -> tuple[dict[str, float], list[int]]:
    """The figures of one greedy generation, and the last token ids it made."""
    streamer = TokenTimes(clock)
    start = clock()
    output = model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=new_tokens,
                            min_new_tokens=new_tokens, do_sample=False, pad_token_id=model.config.eos_token_id,
                            streamer=streamer)
    end = clock()
    generated = output.shape[1] - prompt.shape[1]
    if generated != new_tokens or len(streamer.times) != new_tokens:
        raise SystemExit(f"generate made {generated} tokens ({len(streamer.times)} steps), not {new_tokens}")
    first = streamer.times[0] - start
    figures = {"tokens_per_second": prompt.shape[0] * new_tokens / (end - start), "ttft_ms": first * 1e3,
               "tpot_ms": (end - streamer.times[0]) / max(new_tokens - 1, 1) * 1e3}
    return figures, output[0, -8:].tolist()


def main() -> None:
    args = parse_args()
    torch.manual_seed(args.seed)
    device = pick_device(args.device)
    dtype = dtype_of(args.precision, device)
    batch = batch_size(args, device, cpu=1, gpu=8)
    new_tokens, runs = by_device(args.new_tokens, device, 48, 256), by_device(args.runs, device, 3, 10)
    if new_tokens < 1 or runs < 1 or args.warmup < 0:
        raise SystemExit("--new-tokens and --runs must be at least 1, --warmup at least 0")
    config = GPT2Config(n_layer=args.layers, n_embd=args.hidden, n_head=args.heads,
                        n_positions=max(1024, args.prompt_tokens + new_tokens))
    model = GPT2LMHeadModel(config).to(device=device, dtype=dtype).eval()
    prompt = torch.randint(0, config.vocab_size, (batch, args.prompt_tokens), device=device)
    print(f"gpt2: {args.layers} layers, hidden {args.hidden}, {args.heads} heads, batch {batch}, prompt "
          f"{args.prompt_tokens} + {new_tokens} new tokens, {args.warmup} warm-up + {runs} timed runs, precision "
          f"{args.precision}, device {device}, {torch.get_num_threads()} threads", flush=True)
    clock = Clock(device)
    with torch.inference_mode():
        done = [generate_once(model, prompt, new_tokens, clock) for _ in range(args.warmup + runs)][args.warmup:]
    results = [figures for figures, _ in done]
    print(f"last generated token ids: {done[-1][1]}")
    with torch.inference_mode():  # the dtype the decoder's logits come out in: what it computed in
        computed = model(prompt[:, :1]).logits.dtype
    report_run(device, computed)
    shape = {**describe(device, dtype_name(computed)), "batch_size": batch, "prompt_tokens": args.prompt_tokens,
             "new_tokens": new_tokens, "layers": args.layers, "hidden": args.hidden, "runs": runs}
    units = {"tokens_per_second": "tokens_per_second", "ttft_ms": "ms", "tpot_ms": "ms"}
    rows = [{"model": name, "performance": f"{median(r[name] for r in results):.3f}", "metric": unit, **shape}
            for name, unit in units.items()]
    write_results(rows, "gpt2_results.csv")


if __name__ == "__main__":
    main()
