"""What the pyt_* model scripts share: device and precision choice, timing, percentiles, the lines
madengine reads from every process (``training_precision:``, ``rank_settings:``) and the
``multiple_results`` CSV (``MAD_OUTPUT_CSV``)."""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import time
from typing import Iterable

import torch

PRECISIONS = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
#: other spellings of those precisions (madengine accepts them in a ``precision`` tag config)
_ALIASES = {"float32": "fp32", "f32": "fp32", "float": "fp32", "bfloat16": "bf16", "float16": "fp16", "f16": "fp16",
            "half": "fp16"}


def precision_name(text: str) -> str:
    """``--precision``: fp32, bf16 or fp16, by any of their spellings."""
    name = _ALIASES.get(text.strip().lower(), text.strip().lower())
    if name not in PRECISIONS:
        raise argparse.ArgumentTypeError(f"invalid precision {text!r} (choose from {', '.join(sorted(PRECISIONS))})")
    return name


def add_common_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--device", default="auto", help="auto (cuda when a GPU is visible, else cpu), cpu, cuda")
    parser.add_argument("--precision", type=precision_name, default="fp32",
                        help="numeric precision of the weights and activations: fp32 (default), bf16, fp16")
    parser.add_argument("--batch-size", type=int, default=None,
                        help="default: MAD_MODEL_BATCH_SIZE when set, else a per-device default")
    parser.add_argument("--seed", type=int, default=0)


def pick_device(requested: str, local_rank: int = 0) -> torch.device:
    """``auto``: the GPU of this rank when torch sees one (CUDA or ROCm builds), else the CPU."""
    if requested == "auto":
        requested = "cuda" if torch.cuda.is_available() else "cpu"
    if requested == "cuda":
        if not torch.cuda.is_available():
            raise SystemExit("--device cuda: torch sees no GPU (torch " + torch.__version__ + ")")
        torch.cuda.set_device(local_rank % torch.cuda.device_count())
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device(requested)


def by_device(value: int | None, device: torch.device, cpu: int, gpu: int) -> int:
    """An explicit value, else the small CPU default (a short run on 2 cores) or the GPU one."""
    if value is not None:
        return value
    return cpu if device.type == "cpu" else gpu


def batch_size(args: argparse.Namespace, device: torch.device, cpu: int, gpu: int) -> int:
    env = os.environ.get("MAD_MODEL_BATCH_SIZE", "").strip()
    size = by_device(args.batch_size if args.batch_size is not None else (int(env) if env else None), device, cpu, gpu)
    if size < 1:
        raise SystemExit(f"--batch-size must be at least 1, got {size}")
    return size


def dtype_of(precision: str, device: torch.device) -> torch.dtype:
    if precision == "fp16" and device.type == "cpu":
        raise SystemExit("--precision fp16 needs a GPU; use fp32 or bf16 on the CPU")
    return PRECISIONS[precision]


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class Clock:
    """Wall time that waits for the device's queued work first, so GPU timings are whole."""

    def __init__(self, device: torch.device) -> None:
        self.device = device

    def __call__(self) -> float:
        synchronize(self.device)
        return time.perf_counter()


def percentile(values: Iterable[float], q: float) -> float:
    """The q-th percentile with linear interpolation between the closest ranks (numpy's default)."""
    ordered = sorted(values)
    if not ordered:
        raise ValueError("no values")
    position = (len(ordered) - 1) * q / 100.0
    low, high = math.floor(position), math.ceil(position)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def median(values: Iterable[float]) -> float:
    return percentile(values, 50)


def dtype_name(dtype: torch.dtype) -> str:
    """A torch dtype by the name madengine records (``torch.bfloat16`` → ``bf16``)."""
    return next((name for name, known in PRECISIONS.items() if known == dtype), str(dtype).removeprefix("torch."))


def report_run(device: torch.device, computed: torch.dtype) -> None:
    """What madengine reads from every process of a run: what this rank saw (its rank, the threads
    torch uses and ``OMP_NUM_THREADS``, which a launcher such as torchrun sets per rank, its device,
    torch's version, the collective backend of its process group) and the precision the computation
    actually used (the dtype of its results, not the one asked for)."""
    seen = {"rank": int(os.environ.get("RANK", "0")), "local_rank": int(os.environ.get("LOCAL_RANK", "0")),
            "device": str(device), "threads": torch.get_num_threads(),
            "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS"), "torch_version": torch.__version__}
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        backend = str(torch.distributed.get_backend())
        seen["dist_backend"] = "rccl" if backend == "nccl" and torch.version.hip else backend  # nccl is RCCL on ROCm
    print("rank_settings: " + json.dumps(seen, sort_keys=True), flush=True)
    print(f"training_precision: {dtype_name(computed)}", flush=True)


def describe(device: torch.device, precision: str) -> dict[str, str]:
    """The run's facts that go beside every figure (extra perf.csv columns of multiple_results rows)."""
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    return {"device": name, "precision": precision, "torch_version": torch.__version__,
            "threads": str(torch.get_num_threads())}


def write_results(rows: list[dict[str, object]], default_name: str) -> str:
    """Write the ``multiple_results`` CSV (model, performance, metric, then the extra columns)."""
    path = os.environ.get("MAD_OUTPUT_CSV") or default_name
    columns = ["model", "performance", "metric"] + [k for k in rows[0] if k not in ("model", "performance", "metric")]
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)
    for row in rows:
        print(f"result {row['model']}: {row['performance']} {row['metric']}")
    return path
