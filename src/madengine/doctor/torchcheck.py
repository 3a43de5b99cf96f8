"""PyTorch on the host, and a collective that proves its process group works.

Both run in the interpreter the local executor runs models with (``python3`` on the command's
PATH), as child processes: madengine never imports torch itself. The collective is an
``all_reduce`` of a float32 buffer over one process per GPU with NCCL (RCCL on ROCm builds, which
torch also calls ``nccl``), or over 2 CPU processes with gloo; it reports the bandwidth as
nccl-tests does (algorithm bandwidth = bytes / time; bus bandwidth = algorithm × 2(n-1)/n) and checks
the sum. Its processes carry a cookie: a hung rank is ended with every process it started
(:func:`madengine.execution.proctree.end_step`).
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any, Mapping

from madengine.context.detect import AMD, NVIDIA
from madengine.doctor.checks import FAIL, PASS, WARN, Check, skipped
from madengine.execution.proctree import COOKIE_VAR, end_step, new_cookie
from madengine.launch.ports import free_port

TORCH, COLLECTIVE = "pytorch", "collective"
#: seconds the probe has to import torch and count the GPUs (a cold import on a busy host is slow)
PROBE_TIMEOUT = 120.0
#: the most ranks the collective starts on a GPU host (one per GPU)
MAX_RANKS = 8
_RESULT = "MAD_DOCTOR_RESULT "

PROBE_SCRIPT = r"""
import json, sys
try:
    import torch
except Exception as exc:
    print(json.dumps({"torch": None, "error": "%s: %s" % (type(exc).__name__, exc)}))
    sys.exit(0)
found = {"torch": torch.__version__, "cuda": torch.version.cuda, "hip": getattr(torch.version, "hip", None),
         "python": sys.executable}
try:
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
except Exception as exc:
    count, found["gpu_error"] = 0, "%s: %s" % (type(exc).__name__, exc)
found["count"] = count
found["names"] = [torch.cuda.get_device_name(i) for i in range(count)]
try:
    import torch.distributed as dist
    found["nccl"] = bool(dist.is_available() and dist.is_nccl_available())
    found["gloo"] = bool(dist.is_available() and dist.is_gloo_available())
except Exception:
    found["nccl"] = found["gloo"] = False
print(json.dumps(found))
"""

RANK_SCRIPT = r"""
import datetime, json, os, sys, time
import torch
import torch.distributed as dist
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
backend = os.environ["MAD_DOCTOR_BACKEND"]
size, iters = int(os.environ["MAD_DOCTOR_BYTES"]), int(os.environ["MAD_DOCTOR_ITERS"])
if backend == "nccl":
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    device = torch.device("cuda", torch.cuda.current_device())
    sync = torch.cuda.synchronize
else:
    device = torch.device("cpu")
    sync = lambda: None
dist.init_process_group(backend, rank=rank, world_size=world,
                        timeout=datetime.timedelta(seconds=int(os.environ["MAD_DOCTOR_TIMEOUT"])))
buffer = torch.ones(size // 4, dtype=torch.float32, device=device)
for _ in range(2):
    dist.all_reduce(buffer)
sync()
start = time.perf_counter()
for _ in range(iters):
    dist.all_reduce(buffer)
sync()
seconds = torch.tensor([(time.perf_counter() - start) / iters], dtype=torch.float64, device=device)
buffer.fill_(1.0)
dist.all_reduce(buffer)
sync()
right = torch.tensor([1.0 if bool(torch.all(buffer == world).item()) else 0.0], dtype=torch.float64, device=device)
dist.all_reduce(seconds, op=dist.ReduceOp.MAX)
dist.all_reduce(right, op=dist.ReduceOp.MIN)
if rank == 0:
    print("MAD_DOCTOR_RESULT " + json.dumps({"seconds": seconds.item(), "correct": right.item() == 1.0}), flush=True)
dist.destroy_process_group()
# no interpreter teardown: torch's threads can abort it (SIGABRT, "terminate called without an
# active exception") after the answer is in, and a rank that died would fail the check
sys.stdout.flush()
os._exit(0)
"""


@dataclasses.dataclass(frozen=True)
class TorchFacts:
    """What the probe found: the answer (None when torch could not be asked) and the interpreter."""

    check: Check
    python: str
    found: Mapping[str, Any] | None


def host_python(environ: Mapping[str, str]) -> str | None:
    """The interpreter the local executor runs ``.py`` scripts with: ``python3`` on the PATH."""
    return shutil.which("python3", path=environ.get("PATH"))


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1][:300] if lines else ""


def probe_torch(environ: Mapping[str, str], vendor: str, timeout: float = PROBE_TIMEOUT) -> TorchFacts:
    """PyTorch's version and the GPUs it sees, in the host's ``python3``."""
    python = host_python(environ)
    if python is None:
        return TorchFacts(Check(TORCH, WARN, "no python3 on PATH: the local executor cannot run Python models",
                                "install python3"), "", None)
    try:
        done = subprocess.run([python, "-c", PROBE_SCRIPT], capture_output=True, text=True, timeout=timeout,
                              env=dict(environ), stdin=subprocess.DEVNULL, check=False)
    except subprocess.TimeoutExpired:
        return TorchFacts(Check(TORCH, WARN, f"{python} did not import torch within {timeout:.0f} s",
                                "check the PyTorch install (python3 -c 'import torch')"), python, None)
    found = _json_line(done.stdout)
    if found is None:
        return TorchFacts(Check(TORCH, WARN, f"{python} could not be asked about torch: "
                                f"{_last_line(done.stderr) or 'exit ' + str(done.returncode)}",
                                "check that python3 runs"), python, None)
    if not found.get("torch"):
        return TorchFacts(Check(TORCH, WARN, f"no PyTorch in {python} (optional: the pyt_* models under "
                                "--executor local need it)", "pip install torch (the CUDA or ROCm build on a GPU host)",
                                data=found), python, found)
    return TorchFacts(_torch_verdict(found, python, vendor, _last_line(done.stderr)), python, found)


def _json_line(text: str) -> dict[str, Any] | None:
    for line in reversed(text.strip().splitlines()):
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if isinstance(value, dict):
            return value
    return None


def _build(found: Mapping[str, Any]) -> str:
    if found.get("hip"):
        return f"ROCm {found['hip']}"
    return f"CUDA {found['cuda']}" if found.get("cuda") else "CPU-only"


def _torch_verdict(found: Mapping[str, Any], python: str, vendor: str, stderr: str) -> Check:
    count, names = int(found.get("count") or 0), list(found.get("names") or [])
    summary = f"PyTorch {found['torch']} ({_build(found)} build) in {python}: "
    summary += f"sees {count} GPU(s): {names[0]}" + (" ..." if len(set(names)) > 1 else "") if count else "sees no GPU"
    if vendor in (AMD, NVIDIA) and not count:
        wanted = "ROCm" if vendor == AMD else "CUDA"
        why = found.get("gpu_error") or stderr
        return Check(TORCH, WARN, summary + (f" ({why})" if why else "") + ": models under --executor local run on "
                     "the CPU", f"install PyTorch's {wanted} build for this driver", need="gpu", data=dict(found))
    if vendor == NVIDIA and found.get("hip") or vendor == AMD and found.get("cuda") and not found.get("hip"):
        return Check(TORCH, WARN, summary + f": a build for another vendor than this host's {vendor} GPUs",
                     f"install PyTorch's {'ROCm' if vendor == AMD else 'CUDA'} build", need="gpu", data=dict(found))
    return Check(TORCH, PASS, summary, data=dict(found))


def collective_plan(found: Mapping[str, Any] | None) -> tuple[str, int, int, int]:
    """(backend, ranks, bytes, timed iterations): one rank per GPU torch sees with NCCL/RCCL, else
    2 CPU ranks with gloo and a smaller buffer."""
    count = int((found or {}).get("count") or 0)
    if count and (found or {}).get("nccl"):
        return "nccl", min(count, MAX_RANKS), 256 * 2 ** 20, 20
    return "gloo", 2, 16 * 2 ** 20, 5


def run_collective(torch: TorchFacts, environ: Mapping[str, str], timeout: float) -> Check:
    """The all_reduce smoke test, bounded by ``timeout`` seconds for all its ranks."""
    found = torch.found
    if not found or not found.get("torch"):
        return skipped(COLLECTIVE, "no PyTorch: no collective to test")
    backend, ranks, size, iters = collective_plan(found)
    if backend == "gloo" and not found.get("gloo"):
        return Check(COLLECTIVE, WARN, "this PyTorch has no gloo backend", "install a PyTorch build with "
                     "torch.distributed")
    shown = ("rccl" if found.get("hip") else "nccl") if backend == "nccl" else "gloo"
    where = f"{ranks} GPU(s)" if backend == "nccl" else f"{ranks} CPU processes"
    outcome = _run_ranks(torch.python, environ, backend, ranks, size, iters, timeout)
    data = {"backend": shown, "ranks": ranks, "bytes": size, **outcome}
    if outcome.get("problem"):
        fix = ("NCCL_DEBUG=INFO madengine doctor shows NCCL's own account; check the GPUs' peer access and "
               "NCCL_SOCKET_IFNAME" if backend == "nccl" else "check that 127.0.0.1 is reachable and ports are free")
        return Check(COLLECTIVE, FAIL, f"{shown} all_reduce over {where}: {outcome['problem']}", fix,
                     need="gpu" if backend == "nccl" else "", data=data)
    seconds = float(outcome["seconds"])
    return Check(COLLECTIVE, PASS, f"{shown} all_reduce of {size // 2 ** 20} MiB float32 over {where}: "
                 f"{_bandwidth(data, size, ranks, seconds)}, {seconds * 1e3:.2f} ms per call, sum correct", data=data)


def _bandwidth(data: dict[str, Any], size: int, ranks: int, seconds: float) -> str:
    """The figure NCCL's tests print (bus bandwidth, algorithm bandwidth), added to ``data``. One rank
    moves nothing between GPUs: its all_reduce returns its buffer, so size/time would be a figure no
    link has (9050 GB/s on an H200, twice its memory's bandwidth); it gets none."""
    if ranks < 2:
        data.update(algbw_gbps=None, busbw_gbps=None)
        return "works on one rank (no link between GPUs, so no bandwidth to measure)"
    algbw = size / seconds / 1e9
    busbw = algbw * 2 * (ranks - 1) / ranks
    data.update(algbw_gbps=round(algbw, 3), busbw_gbps=round(busbw, 3))
    return f"bus bandwidth {busbw:.2f} GB/s (algorithm {algbw:.2f} GB/s)"


def _run_ranks(python: str, environ: Mapping[str, str], backend: str, ranks: int, size: int, iters: int,
               timeout: float) -> dict[str, Any]:
    """Start the ranks, wait for them all (or end them all), and read rank 0's result."""
    cookie = new_cookie()
    base = {**environ, COOKIE_VAR: cookie, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()),
            "WORLD_SIZE": str(ranks), "MAD_DOCTOR_BACKEND": backend, "MAD_DOCTOR_BYTES": str(size),
            "MAD_DOCTOR_ITERS": str(iters), "MAD_DOCTOR_TIMEOUT": str(max(10, int(timeout)))}
    if backend == "gloo":
        base.setdefault("OMP_NUM_THREADS", "1")
    with tempfile.TemporaryDirectory(prefix="madengine-doctor-") as folder:
        logs = [Path(folder, f"rank{rank}.log") for rank in range(ranks)]
        processes = []
        try:
            for rank, log in enumerate(logs):
                with open(log, "wb") as handle:
                    processes.append(subprocess.Popen(
                        [python, "-c", RANK_SCRIPT], stdout=handle, stderr=subprocess.STDOUT,
                        stdin=subprocess.DEVNULL, env={**base, "RANK": str(rank), "LOCAL_RANK": str(rank)}))
            problem = _wait(processes, timeout)
        finally:
            if any(p.poll() is None for p in processes):
                for process in processes:
                    end_step(process.pid, cookie, grace=2.0)
            for process in processes:
                process.wait()
        texts = [log.read_text(encoding="utf-8", errors="replace") for log in logs]
    if problem:
        failed = next((i for i, p in enumerate(processes) if p.returncode not in (0, None)), 0)
        said = _last_line(texts[failed])
        return {"problem": problem + (f"; rank {failed}: {said}" if said else "")}
    result = next((line[len(_RESULT):] for line in texts[0].splitlines() if line.startswith(_RESULT)), "")
    try:
        answer = json.loads(result)
    except ValueError:
        return {"problem": f"rank 0 printed no result: {_last_line(texts[0])}"}
    if not answer.get("correct"):
        return {"problem": "the sum came back wrong on some rank", **answer}
    return {"seconds": answer["seconds"]}


def _wait(processes: list[subprocess.Popen], timeout: float) -> str:
    """'' when every rank ended well; else what went wrong (a rank failed, or time ran out)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        codes = [p.poll() for p in processes]
        failed = [(i, c) for i, c in enumerate(codes) if c not in (0, None)]
        if failed:
            rank, code = failed[0]
            return f"rank {rank} exited with {code}"
        if all(c == 0 for c in codes):
            return ""
        time.sleep(0.1)
    return f"did not finish within {timeout:.0f} s (its processes were ended)"
