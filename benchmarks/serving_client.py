"""madengine serve-bench's client on one core: 64 streams at 500 tokens/s in total, its measured
ITL against the server's truth, and its CPU cost per token; guidellm beside it when one is given.

The server is the tests' own (tests/serving_server.py, a child process pinned to another CPU when
there is one): TTFT 200 ms, then one token every streams / rate seconds per stream (128 ms for 64
streams at 500 tokens/s), all streams in step as a continuously batching server emits them, so the
client meets bursts of 64 tokens at once. It writes the time it wrote each token; the client reads
the same system-wide monotonic clock. This process is pinned to CPU 0 (taskset's effect) and runs
madengine's load generator (:func:`madengine.serving.loadgen.run_point`) for ``--rounds`` waves of
``--streams`` requests; its user+system CPU time over the output tokens is the cost per token.
It runs twice: a token timed by its arrival (the kernel's receive stamp of the socket read that
brought it, madengine's way: :mod:`madengine.serving.arrivals`), then timed as its stream's reader
gets to it (``arrival_times=False``: the clock read as the read returns, the usual client's way).

Printed side by side: achieved tokens/s, TTFT/ITL/TPOT p50/p90/p99 measured and true with their
differences (ms), each ITL gap's error against its true gap (p50/p90/p99/max; and over the gaps
whose token writes were not interrupted, see CLEAN_WRITE_NS), the delay between a
token's write and its time (p50/p99), CPU per token, and the delay between a request's send and the
server's reading of it (the server's ``received``: the truth's TTFT leaves that wait out, the
client's includes it). Targets: ITL within 1 ms of the truth at p50, p90 and p99, and the rate
sustained (≥ 95 %).

With ``--guidellm PATH`` (a guidellm executable, e.g. from ``pip install guidellm`` in a virtual
environment of its own: it brings its own torch), guidellm 0.8's concurrent profile runs against
the same server at the same load, also pinned to CPU 0, with a tokenizer made offline
(scripts/serving/make_tiny_model.py); its TTFT and per-request ITL (its definition: a request's
mean gap) are set beside the truth, and its CPU time (its process tree) per token.

    python3 benchmarks/serving_client.py [--streams 64] [--rate 500] [--output-len 32] [--rounds 3]
                                         [--guidellm /path/to/guidellm]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "src"))

from serving_server import MODEL, ServerProcess  # noqa: E402

from madengine.serving.arrivals import KERNEL_STAMPS  # noqa: E402
from madengine.serving.client import Endpoint  # noqa: E402
from madengine.serving.loadgen import run_point  # noqa: E402
from madengine.serving.loadpoints import LoadPoint, Slo  # noqa: E402
from madengine.serving.metrics import figures  # noqa: E402
from madengine.serving.prompts import synthetic  # noqa: E402
from madengine.stats.summary import percentile  # noqa: E402

QS = (50, 90, 99)
#: a token write that took the server longer was interrupted by the scheduler: its true time, read
#: after the write, is late by up to that (the client's arrival time is then the truer one)
CLEAN_WRITE_NS = 100_000


def cpu_seconds(who: int = resource.RUSAGE_SELF) -> float:
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


def pcts(values: list[float]) -> dict[int, float]:
    ordered = sorted(values)
    return {q: percentile(ordered, q) for q in QS}


def truth_of(served: list[dict]) -> dict[str, list[float]]:
    truth: dict[str, list[float]] = {"ttft": [], "itl": [], "tpot": []}
    for request in served:
        tokens = request["tokens"]
        truth["ttft"].append((tokens[0] - request["received"]) / 1e6)
        truth["itl"] += [(b - a) / 1e6 for a, b in zip(tokens, tokens[1:])]
        truth["tpot"].append((tokens[-1] - tokens[0]) / 1e6 / (len(tokens) - 1))
    return truth


def madengine_run(server: ServerProcess, args: argparse.Namespace, arrival_times: bool) -> dict:
    count = args.streams * args.rounds
    prompts = synthetic(count, args.input_len, args.output_len)
    endpoint = Endpoint(server.url, MODEL)
    seen = len(server.truth())
    before_cpu, before_wall = cpu_seconds(), time.monotonic()
    records = asyncio.run(run_point(endpoint, LoadPoint(concurrency=args.streams), prompts,
                                    arrival_times=arrival_times))
    cpu, wall = cpu_seconds() - before_cpu, time.monotonic() - before_wall
    measured = figures(records, Slo())
    served = {request["prompt"]: request for request in server.truth()[seen:]}
    delays = [(arrival - written) / 1e6 for record, prompt in zip(records, prompts)
              for arrival, written in zip(record.token_times, served[prompt.text]["tokens"])]
    request_reads = [(served[prompt.text]["received"] - record.sent) / 1e6 for record, prompt in zip(records, prompts)]
    gap_errors, clean_errors = [], []
    for record, prompt in zip(records, prompts):
        writing = served[prompt.text]["writing"]
        for index, (measured_gap, true_gap) in enumerate(zip(record.itl_ms, truth_of([served[prompt.text]])["itl"])):
            gap_errors.append(abs(measured_gap - true_gap))
            if max(writing[index:index + 2]) <= CLEAN_WRITE_NS:
                clean_errors.append(abs(measured_gap - true_gap))
    truth = truth_of([served[p.text] for p in prompts])
    return {"errors": measured.errors, "tokens": measured.output_tokens, "tokens_per_s": measured.output_tokens / wall,
            "cpu_s": cpu, "cpu_share": cpu / wall, "cpu_us_per_token": cpu / measured.output_tokens * 1e6,
            "measured": {name: {q: measured.latencies[name][f"p{q}"] for q in QS} for name in ("ttft", "itl", "tpot")},
            "truth": {name: pcts(values) for name, values in truth.items()}, "delay": pcts(delays),
            "request_read": pcts(request_reads), "gap_error": {**pcts(gap_errors), "max": max(gap_errors)},
            "clean_gap_error": {**pcts(clean_errors), "max": max(clean_errors), "count": len(clean_errors),
                                "of": len(gap_errors)}}


def print_run(name: str, result: dict) -> None:
    print(f"{name}: {result['tokens_per_s']:.0f} tokens/s, {result['errors']} errors, CPU {result['cpu_s']:.2f} s "
          f"({result['cpu_share']:.0%} of the core) = {result['cpu_us_per_token']:.0f} µs per token; token timed "
          f"after its write: p50 {result['delay'][50]:+.3f} ms, p99 {result['delay'][99]:+.3f} ms; the server read "
          f"a request after its send: p50 {result['request_read'][50]:.2f} ms, p99 {result['request_read'][99]:.2f} ms")
    for what in ("ttft", "itl", "tpot"):
        print(row(name, result, what))
    error, clean = result["gap_error"], result["clean_gap_error"]
    print(f"  {name:<9} each ITL gap against its true one, |measured − true|: p50 {error[50]:.3f}  p90 {error[90]:.3f}  "
          f"p99 {error[99]:.3f}  max {error['max']:.3f} ms; over the {clean['count']} of {clean['of']} gaps whose "
          f"writes each took the server < {CLEAN_WRITE_NS / 1e6:g} ms: p99 {clean[99]:.3f}  max {clean['max']:.3f} ms")


def worst_itl(result: dict) -> float:
    return max(abs(result["measured"]["itl"][q] - result["truth"]["itl"][q]) for q in QS)


def guidellm_run(server: ServerProcess, args: argparse.Namespace, folder: Path) -> dict:
    tokenizer = folder / "tokenizer"
    subprocess.run([sys.executable, str(REPO / "scripts" / "serving" / "make_tiny_model.py"), str(tokenizer)],
                   check=True, capture_output=True)
    seen = len(server.truth())
    out = folder / "guidellm.json"
    count = args.streams * args.rounds
    command = ["taskset", "-c", "0", args.guidellm, "run",
               "--backend", f"kind=openai_http,target={server.url.removesuffix('/v1')},model={tokenizer}",
               "--profile", f"kind=concurrent,streams={args.streams}",
               "--constraint", f"kind=max_requests,count={count}",
               "--data", f"kind=synthetic_text,prompt_tokens={args.input_len},output_tokens={args.output_len}",
               "--tokenizer", f"kind=hf_auto,model={tokenizer}", "--output", f"kind=json,path={out}",
               "--disable-console"]
    before_cpu, before_wall = cpu_seconds(resource.RUSAGE_CHILDREN), time.monotonic()
    done = subprocess.run(command, capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    cpu, wall = cpu_seconds(resource.RUSAGE_CHILDREN) - before_cpu, time.monotonic() - before_wall
    if done.returncode != 0 or not out.is_file():
        return {"error": (done.stderr or done.stdout)[-400:]}
    metrics = json.loads(out.read_text())["benchmarks"][0]["metrics"]

    def got(name: str) -> dict[int, float]:
        return {q: metrics[name]["successful"]["percentiles"][f"p{q}"] for q in QS}

    tokens = metrics["output_token_count"]["successful"]["total_sum"]
    truth = truth_of(server.truth()[seen:])
    # guidellm's "ITL" is a request's mean gap: madengine's TPOT; set it beside the true TPOT
    return {"tokens": tokens, "wall_s": wall, "cpu_s": cpu, "cpu_us_per_token": cpu / tokens * 1e6,
            "measured": {"ttft": got("time_to_first_token_ms"), "tpot": got("inter_token_latency_ms")},
            "truth": {name: pcts(truth[name]) for name in ("ttft", "tpot")}}


def row(name: str, result: dict, what: str) -> str:
    measured, truth = result["measured"][what], result["truth"][what]
    cells = "  ".join(f"p{q} {measured[q]:8.2f} / {truth[q]:8.2f} ({measured[q] - truth[q]:+6.2f})" for q in QS)
    return f"  {name:<9} {what:<5} {cells}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--streams", type=int, default=64)
    parser.add_argument("--rate", type=float, default=500.0, help="output tokens per second, all streams together")
    parser.add_argument("--output-len", type=int, default=32)
    parser.add_argument("--input-len", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=3, help="waves of --streams requests (each run)")
    parser.add_argument("--guidellm", help="a guidellm executable to run at the same load")
    args = parser.parse_args()
    itl_ms = args.streams / args.rate * 1000
    cpus = sorted(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {cpus[0]})  # this client: one core
    with tempfile.TemporaryDirectory() as scratch, \
            ServerProcess(Path(scratch), "--ttft-ms", "200", "--itl-ms", f"{itl_ms:g}",
                          cpu=cpus[1] if len(cpus) > 1 else None) as server:
        print(f"host: {len(cpus)} CPUs, load average {os.getloadavg()[0]:.1f} (a busy host delays the reading of tokens: "
              "compare on a quiet one)")
        print(f"server: TTFT 200 ms, ITL {itl_ms:g} ms per stream; {args.streams} streams, {args.rounds} waves, "
              f"{args.output_len} tokens each: {args.rate:g} tokens/s in all; client on CPU {cpus[0]}, server on "
              f"{cpus[1] if len(cpus) > 1 else 'the same CPU'}; ms, measured / true (difference)")
        mine = madengine_run(server, args, arrival_times=True)
        print_run("madengine", mine)
        at_reads = madengine_run(server, args, arrival_times=False)
        print_run("at reads", at_reads)
        worst = worst_itl(mine)
        print(f"madengine times a token by {'the kernel stamp of its arrival' if KERNEL_STAMPS else 'its socket read'}"
              f"; 'at reads' by its reader's turn: ITL within {worst:.3f} vs {worst_itl(at_reads):.3f} ms of the truth")
        # a stream's request: 200 ms to its first token, then output-len − 1 gaps; the waves back to back
        expected = args.streams * args.output_len / ((200 + (args.output_len - 1) * itl_ms) / 1000)
        sustained = mine["tokens_per_s"] >= 0.95 * expected and not mine["errors"]
        print(f"target: ITL within 1 ms of the truth: {worst:.3f} ms ({'met' if worst <= 1 else 'MISSED'}); "
              f"{mine['tokens_per_s']:.0f} of the server's {expected:.0f} tokens/s averaged over whole requests "
              f"({args.rate:g} while decoding): {'sustained' if sustained else 'NOT sustained'}")
        if args.guidellm:
            with tempfile.TemporaryDirectory() as folder:
                theirs = guidellm_run(server, args, Path(folder))
            if "error" in theirs:
                print(f"guidellm: did not run: {theirs['error']}")
            else:
                print(f"guidellm: {theirs['tokens']:.0f} tokens in {theirs['wall_s']:.1f} s, CPU {theirs['cpu_s']:.2f} s"
                      f" = {theirs['cpu_us_per_token']:.0f} µs per token (ratio to madengine "
                      f"{theirs['cpu_us_per_token'] / mine['cpu_us_per_token']:.1f}×)")
                for what in ("ttft", "tpot"):
                    print(row("guidellm", theirs, what))
        else:
            print("guidellm: not run (give --guidellm PATH: pip install guidellm into a virtual environment of its own)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
