"""Inference of a BERT-shaped encoder built from a transformers config (random weights, random
token ids: nothing is downloaded). Reports samples/s and the latency percentiles of one batch.

Results go to the ``multiple_results`` CSV: ``throughput`` (samples_per_second) and
``latency_p50``/``latency_p90``/``latency_p99`` (ms per batch), each with the run's device,
precision and shape as extra columns.
"""

from __future__ import annotations

import argparse

import torch
from transformers import BertConfig, BertModel

from common import Clock, add_common_args, batch_size, by_device, describe, dtype_name, dtype_of, percentile, \
    pick_device, report_run, write_results


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=12, help="encoder layers (bert-base: 12, bert-large: 24)")
    parser.add_argument("--hidden", type=int, default=768, help="hidden size (bert-base: 768, bert-large: 1024)")
    parser.add_argument("--heads", type=int, default=12, help="attention heads (bert-base: 12, bert-large: 16)")
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--iterations", type=int, default=None, help="timed batches (default: 30 on CPU, 200 on GPU)")
    parser.add_argument("--warmup", type=int, default=None, help="untimed batches first (default: 3 / 20)")
    add_common_args(parser)
    return parser.parse_args()


def build_model(args: argparse.Namespace, device: torch.device, dtype: torch.dtype) -> tuple[BertModel, BertConfig]:
    config = BertConfig(num_hidden_layers=args.layers, hidden_size=args.hidden, num_attention_heads=args.heads,
                        intermediate_size=4 * args.hidden, max_position_embeddings=max(512, args.seq_len))
    return BertModel(config).to(device=device, dtype=dtype).eval(), config


def main() -> None:
    args = parse_args()
    torch.manual_seed(args.seed)
    device = pick_device(args.device)
    dtype = dtype_of(args.precision, device)
    batch = batch_size(args, device, cpu=4, gpu=64)
    iterations, warmup = by_device(args.iterations, device, 30, 200), by_device(args.warmup, device, 3, 20)
    if iterations < 1 or warmup < 0:
        raise SystemExit(f"--iterations must be at least 1 and --warmup at least 0, got {iterations} and {warmup}")
    model, config = build_model(args, device, dtype)
    input_ids = torch.randint(0, config.vocab_size, (batch, args.seq_len), device=device)
    attention_mask = torch.ones_like(input_ids)
    print(f"bert: {args.layers} layers, hidden {args.hidden}, {args.heads} heads, batch {batch} x {args.seq_len} "
          f"tokens, {warmup} warm-up + {iterations} timed batches, precision {args.precision}, device {device}, "
          f"{torch.get_num_threads()} threads", flush=True)
    clock = Clock(device)
    latencies = []
    with torch.inference_mode():
        for i in range(warmup + iterations):
            start = clock()
            output = model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
            if i >= warmup:
                latencies.append(clock() - start)
    if not torch.isfinite(output.float()).all():
        raise SystemExit("the encoder's output holds NaN or infinity")
    report_run(device, output.dtype)
    shape = {**describe(device, dtype_name(output.dtype)), "batch_size": batch, "seq_len": args.seq_len,
             "layers": args.layers, "hidden": args.hidden, "iterations": iterations}
    rows = [{"model": "throughput", "performance": f"{batch * iterations / sum(latencies):.2f}",
             "metric": "samples_per_second", **shape}]
    for q in (50, 90, 99):
        rows.append({"model": f"latency_p{q}", "performance": f"{percentile(latencies, q) * 1e3:.3f}",
                     "metric": "ms", **shape})
    write_results(rows, "bert_results.csv")


if __name__ == "__main__":
    main()
