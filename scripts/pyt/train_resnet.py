"""Train a torchvision-shaped ResNet on random images under DistributedDataParallel; report samples/s.

Started by a launcher (``$MAD_MULTI_NODE_RUNNER train_resnet.py``, e.g. ``torchrun --standalone
--nproc_per_node=2``) it trains with one process per rank (gloo on the CPU, nccl on GPUs); started
by plain ``python3`` it trains in one process. Each node's first local rank prints
``performance: <samples/s of that node's ranks> samples_per_second`` (madengine sums the nodes).
"""

from __future__ import annotations

import argparse
import datetime
import math
import os
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from common import Clock, add_common_args, batch_size, by_device, dtype_of, pick_device, report_run
from resnet import ARCHS, ResNet


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arch", choices=sorted(ARCHS), default="resnet50")
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--num-classes", type=int, default=1000)
    parser.add_argument("--steps", type=int, default=None, help="timed steps (default: 8 on CPU, 50 on GPU)")
    parser.add_argument("--warmup-steps", type=int, default=None, help="untimed steps first (default: 2 / 10)")
    parser.add_argument("--backend", default="", help="process group backend (default: MAD_DISTRIBUTED_BACKEND, the "
                        "one madengine's launcher chose, else nccl on GPUs and gloo on the CPU)")
    parser.add_argument("--lr", type=float, default=0.01)
    add_common_args(parser)
    return parser.parse_args()


def join_group(args: argparse.Namespace, device: torch.device) -> tuple[int, int]:
    """(rank, world size); the process group is joined only when a launcher started this process."""
    if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
        return 0, 1
    backend = args.backend or os.environ.get("MAD_DISTRIBUTED_BACKEND") or ("nccl" if device.type == "cuda" else "gloo")
    if backend in ("nccl", "rccl") and device.type != "cuda":
        raise SystemExit(f"backend {backend} needs a GPU, and this rank runs on {device} (torch {torch.__version__}): "
                         "use a GPU build of torch, or distributed.backend gloo")
    dist.init_process_group(backend, timeout=datetime.timedelta(minutes=10))
    return dist.get_rank(), dist.get_world_size()


def node_throughputs(mine: float, device: torch.device, world: int) -> dict[int, list[float]]:
    """Every rank's samples/s, grouped by node (torchrun's GROUP_RANK), gathered on every rank."""
    node = int(os.environ.get("GROUP_RANK", os.environ.get("NODE_RANK", "0")))
    if world == 1:
        return {node: [mine]}
    local = torch.tensor([float(node), mine], dtype=torch.float64,
                         device=device if dist.get_backend() == "nccl" else "cpu")
    gathered = [torch.zeros_like(local) for _ in range(world)]
    dist.all_gather(gathered, local)
    nodes: dict[int, list[float]] = {}
    for pair in gathered:
        nodes.setdefault(int(pair[0].item()), []).append(float(pair[1].item()))
    return nodes


def train(args: argparse.Namespace, device: torch.device, rank: int, world: int) -> tuple[float, float, torch.dtype]:
    """(this rank's samples/s over the timed steps, the last loss, the dtype the forward pass computed
    its logits in: autocast's at bf16/fp16)."""
    batch = batch_size(args, device, cpu=4, gpu=64)
    steps, warmup = by_device(args.steps, device, 8, 50), by_device(args.warmup_steps, device, 2, 10)
    if steps < 1 or warmup < 0:
        raise SystemExit(f"--steps must be at least 1 and --warmup-steps at least 0, got {steps} and {warmup}")
    dtype = dtype_of(args.precision, device)
    model = ResNet(args.arch, args.num_classes).to(device, memory_format=torch.channels_last)
    if world > 1:
        model = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    images = torch.randn(batch, 3, args.image_size, args.image_size, device=device).to(
        memory_format=torch.channels_last)
    labels = torch.randint(0, args.num_classes, (batch,), device=device)
    if rank == 0:
        print(f"{args.arch}: batch {batch} per rank x {world} rank(s), {args.image_size}px, {warmup} warm-up + "
              f"{steps} timed steps, precision {args.precision}, device {device}, {torch.get_num_threads()} "
              "threads per rank", flush=True)
    clock = Clock(device)
    for step in range(warmup + steps):
        if step == warmup:
            if world > 1:
                dist.barrier()
            start = clock()
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(device.type, dtype=dtype, enabled=dtype != torch.float32):
            logits = model(images)
            loss = torch.nn.functional.cross_entropy(logits, labels)
        loss.backward()
        optimizer.step()
    elapsed = clock() - start
    return batch * steps / elapsed, float(loss.item()), logits.dtype


def main() -> None:
    args = parse_args()
    torch.manual_seed(args.seed)
    device = pick_device(args.device, int(os.environ.get("LOCAL_RANK", "0")))
    rank, world = join_group(args, device)
    try:
        mine, loss, computed = train(args, device, rank, world)
        if not math.isfinite(loss):
            raise SystemExit(f"rank {rank}: the loss is {loss}: training diverged")
        report_run(device, computed)
        nodes = node_throughputs(mine, device, world)
        if rank == 0:
            total = sum(sum(v) for v in nodes.values())
            print(f"world size {world}, {len(nodes)} node(s), {total:.2f} samples/s in all, last loss {loss:.4f}")
        if int(os.environ.get("LOCAL_RANK", "0")) == 0:
            node = int(os.environ.get("GROUP_RANK", os.environ.get("NODE_RANK", "0")))
            print(f"performance: {sum(nodes[node]):.2f} samples_per_second", flush=True)
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


if __name__ == "__main__":
    main()
    # leave without the interpreter's teardown: gloo's threads can abort it ("terminate called without
    # an active exception", SIGABRT) after the work is done, which would fail a finished rank
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
