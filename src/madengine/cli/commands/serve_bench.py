"""madengine serve-bench: load an OpenAI-compatible endpoint at each load point and record one
perf.csv row per point. A thin layer over :func:`madengine.serving.bench.run_serve_bench`; aiohttp
(the ``serving`` extra) is imported only when the command runs."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, Callable

from madengine.cli.commands import SUMMARIES
from madengine.cli.env import CliReporter, Environment
from madengine.cli.flags import add_perf_csv_argument, add_trace_arguments, trace_settings
from madengine.core.errors import ExitStatus, InputError

DESCRIPTION = """\
Send streamed requests to an OpenAI-compatible endpoint (/v1/completions or /v1/chat/completions:
vLLM, SGLang, transformers serve, ...) at each load point: a number of requests in flight
(--concurrency), a rate of Poisson arrivals (--request-rate, seeded), or a sweep of rates that
finds the highest one meeting an SLO (--sweep with --slo). Per request: TTFT, every inter-token
latency, TPOT, end-to-end latency, token counts (the server's usage, else the stream's chunks) and
the error, in requests_<load point>.jsonl of the run folder. Per load point one perf.csv row: p50,
p90 and p99 (and mean) of TTFT, TPOT, ITL and E2E in ms, request and output token throughput,
goodput, errors; FAILURE when no request succeeded or the error rate passed --max-error-rate. The
definitions are vLLM's benchmark's (docs/serving.md). Needs the serving extra
(pip install 'madengine[serving]'). Exit 0 every row SUCCESS, 1 a FAILURE row (an unreachable
endpoint too), 2 bad input."""

EXAMPLES = """\
examples:
  madengine serve-bench --url http://127.0.0.1:8000/v1 --model tiny --concurrency 1,4,16 --requests 64
  madengine serve-bench --url http://gpu-node:8000/v1 --model meta-llama/Llama-3.1-8B --server vllm \\
      --request-rate 2,8,inf --input-len 512 --output-len 128 --ignore-eos --api-key-env VLLM_API_KEY
  madengine serve-bench --url http://127.0.0.1:30000/v1 --model m --sweep --slo ttft_ms=500,tpot_ms=50
  madengine serve-bench --url http://127.0.0.1:8000/v1 --model m --api chat --dataset sharegpt.json --concurrency 8
"""


def _typed(parse: Callable[[str, str], Any], flag: str) -> Callable[[str], Any]:
    """An argparse type from a parser that raises InputError (its message, one line, exit 2)."""
    def convert(text: str) -> Any:
        try:
            return parse(text, flag)
        except InputError as exc:
            raise argparse.ArgumentTypeError(exc.message + (f" ({exc.hint})" if exc.hint else "")) from None
    return convert


def _whole(low: int, high: int) -> Callable[[str, str], int]:
    def parse(text: str, flag: str) -> int:
        if not (text.isascii() and text.strip().isdigit()) or not low <= int(text) <= high:
            raise InputError(f"{text!r} is not a whole number from {low} to {high}", path=flag)
        return int(text)
    return parse


def _number(low: float, high: float, *, above: bool = False) -> Callable[[str, str], float]:
    def parse(text: str, flag: str) -> float:
        try:
            value = float(text) if text.isascii() else float("nan")
        except ValueError:
            value = float("nan")
        ok = (low < value if above else low <= value) and value <= high
        if not ok:
            raise InputError(f"{text!r} is not a number {'above' if above else 'from'} {low:g} "
                             f"{'and at most' if above else 'to'} {high:g}", path=flag)
        return value
    return parse


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    from madengine.serving import loadpoints as lp
    from madengine.serving.prompts import MAX_LEN

    parser = subparsers.add_parser("serve-bench", help=SUMMARIES["serve-bench"], description=DESCRIPTION,
                                   epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    endpoint = parser.add_argument_group("endpoint")
    endpoint.add_argument("--url", required=True, help="base URL of the OpenAI API, e.g. http://127.0.0.1:8000/v1")
    endpoint.add_argument("--model", required=True, help="the served model's name (sent in every request)")
    endpoint.add_argument("--name", default="", help="perf.csv 'model' of the rows (default: --model)")
    endpoint.add_argument("--server", default="openai",
                          help="the server's name, the rows' 'backend': vllm, sglang, transformers, ... (default openai)")
    endpoint.add_argument("--api", choices=("completions", "chat"), default="completions",
                          help="/v1/completions (default) or /v1/chat/completions")
    endpoint.add_argument("--api-key-env", metavar="NAME",
                          help="environment variable holding the API key (sent as a bearer token, never shown)")
    endpoint.add_argument("--ready-timeout", type=_typed(_number(0, 86400), "--ready-timeout"), default=0.0,
                          metavar="SECONDS", help="wait this long for /health or /v1/models to answer (default 0: "
                                                  "one try)")
    endpoint.add_argument("--request-timeout", type=_typed(_number(0, 86400, above=True), "--request-timeout"),
                          default=600.0, metavar="SECONDS", help="one request's limit (default 600)")
    load = parser.add_argument_group("load points")
    load.add_argument("--concurrency", type=_typed(lp.parse_concurrencies, "--concurrency"), metavar="N,...",
                      help="requests in flight, one load point each (e.g. 1,4,16)")
    load.add_argument("--request-rate", type=_typed(lp.parse_rates, "--request-rate"), metavar="R,...",
                      help="Poisson arrivals per second (seeded), one load point each; inf: all at once")
    load.add_argument("--sweep", action="store_true",
                      help="also try rates (doubling from --sweep-start, then bisecting) to find the highest one "
                           "meeting --slo")
    load.add_argument("--sweep-start", type=_typed(_number(0, lp.MAX_RATE, above=True), "--sweep-start"),
                      default=1.0, metavar="R", help="the sweep's first rate (default 1 req/s)")
    load.add_argument("--sweep-steps", type=_typed(_whole(0, 20), "--sweep-steps"), default=3, metavar="N",
                      help="bisections after the first rate that misses (default 3)")
    load.add_argument("--sweep-max", type=_typed(_number(0, lp.MAX_RATE, above=True), "--sweep-max"),
                      default=1024.0, metavar="R", help="the highest rate the sweep tries (default 1024)")
    load.add_argument("--slo", type=_typed(lp.parse_slo, "--slo"), metavar="KEY=MS,...",
                      help="bounds of a good request: ttft_ms, tpot_ms, e2e_ms (goodput counts requests within all)")
    load.add_argument("--slo-attainment", type=_typed(_number(0, 1, above=True), "--slo-attainment"), default=0.9,
                      metavar="SHARE", help="share of requests within the SLO for a rate to meet it (default 0.9)")
    load.add_argument("--requests", "-n", type=_typed(_whole(1, 1_000_000), "--requests"), default=100, metavar="N",
                      help="requests per load point (default 100)")
    prompts = parser.add_argument_group("prompts")
    prompts.add_argument("--input-len", type=_typed(_whole(1, MAX_LEN), "--input-len"), default=128, metavar="L",
                         help="words of each synthetic prompt (about one token each; default 128)")
    prompts.add_argument("--output-len", type=_typed(_whole(1, MAX_LEN), "--output-len"), metavar="K",
                         help="max_tokens of each request (default 128; with --dataset each reply's length)")
    prompts.add_argument("--dataset", metavar="FILE", help="a ShareGPT JSON file to take prompts from (nothing is "
                                                            "downloaded)")
    prompts.add_argument("--ignore-eos", action="store_true",
                         help="ask for exactly max_tokens (ignore_eos: vLLM, SGLang; others may refuse it)")
    prompts.add_argument("--seed", type=_typed(_whole(0, 2**32 - 1), "--seed"), default=0,
                         help="seed of the prompts and arrivals (default 0)")
    parser.add_argument("--max-error-rate", type=_typed(_number(0, 1), "--max-error-rate"), default=0.05,
                        metavar="SHARE", help="a load point with more errors than this share is FAILURE (default 0.05)")
    add_perf_csv_argument(parser, "-o", "--output")
    parser.add_argument("--runs-dir", default="madengine_runs", metavar="DIR",
                        help="folder of the run's per-request JSONL files and trace (default: madengine_runs)")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON on stdout")
    parser.add_argument("--no-html", action="store_true", help="do not write perf.html beside perf.csv")
    add_trace_arguments(parser)
    parser.set_defaults(handler=handle)


def handle(args: argparse.Namespace, env: Environment) -> ExitStatus:
    from madengine.cli.commands.bench import trace_note
    from madengine.cli.perf_html import write_html
    from madengine.serving.bench import ServeBenchRequest, run_serve_bench

    plan = plan_of(args, env)
    request = ServeBenchRequest(plan=plan, output=Path(args.perf_csv), runs_dir=Path(args.runs_dir),
                                command_line=env.host().command_line, environ=dict(env.environ), **trace_settings(args))
    summary = run_serve_bench(request, CliReporter(env))
    text = render_table(summary)
    env.result(text, summary.to_json(), args.json)
    if summary.records and not args.no_html:
        write_html(env, summary.perf_csv)
    env.message(f"madengine: {len(summary.records) - len(summary.failed)} succeeded, {len(summary.failed)} failed; "
                f"rows in {summary.perf_csv}; requests in {summary.run_dir}" + trace_note(summary))
    return ExitStatus.FAILED if summary.failed else ExitStatus.OK


def plan_of(args: argparse.Namespace, env: Environment) -> Any:
    """The flags as a ServingPlan; the API key read from the variable --api-key-env names."""
    from madengine.serving.loadpoints import RateSweep, Slo, load_points
    from madengine.serving.plan import ServingPlan

    if args.sweep and args.slo is None:
        raise InputError("needs --slo (the bounds a rate must meet)", path="--sweep",
                         hint="e.g. --slo ttft_ms=500,tpot_ms=50")
    for flag, given in (("--sweep-start", "sweep_start"), ("--sweep-steps", "sweep_steps"),
                        ("--sweep-max", "sweep_max"), ("--slo-attainment", "slo_attainment")):
        if not args.sweep and any(a == flag or a.startswith(flag + "=") for a in env.argv or []):
            raise InputError("applies to --sweep only", path=flag)
    sweep = RateSweep(start=args.sweep_start, steps=args.sweep_steps, max_rate=args.sweep_max,
                      attainment=args.slo_attainment) if args.sweep else None
    return ServingPlan(
        url=args.url, model=args.model, name=args.name, server=args.server, api=args.api,
        points=load_points(args.concurrency or (), args.request_rate or ()), sweep=sweep, slo=args.slo or Slo(),
        requests=args.requests, input_len=args.input_len, output_len=args.output_len,
        dataset=Path(args.dataset) if args.dataset else None, seed=args.seed, ignore_eos=args.ignore_eos,
        max_error_rate=args.max_error_rate, ready_timeout=args.ready_timeout, request_timeout=args.request_timeout,
        api_key=api_key(args.api_key_env, env.environ))


def api_key(variable: str | None, environ: Any) -> str:
    """The key the variable holds, registered as a secret (masked in every log, row and message)."""
    if not variable:
        return ""
    from madengine.core.redact import register_secret

    key = (environ.get(variable) or "").strip()
    if not key:
        raise InputError(f"the variable {variable} is not set or empty", path="--api-key-env",
                         hint=f"export {variable}=<key>, or leave --api-key-env out for an endpoint without one")
    register_secret(key)
    return key


def render_table(summary: Any) -> str:
    """One line per row: the load point, requests, latency percentiles (ms), throughputs, status."""
    from madengine.cli.render import table

    def cell(columns: dict, name: str) -> str:
        value = columns.get(name)
        return "" if value in (None, "") else f"{value:.4g}" if isinstance(value, float) else str(value)

    rows = []
    for record in summary.records:
        c = record.extra
        status = record.status if record.ok else f"{record.status}: {record.reason}"
        rows.append((record.model, c.get("load_point") or record.tag_configs, cell(c, "completed"), cell(c, "errors"),
                     cell(c, "ttft_p50_ms"), cell(c, "ttft_p99_ms"), cell(c, "tpot_p50_ms"), cell(c, "itl_p50_ms"),
                     cell(c, "itl_p99_ms"), cell(c, "e2e_p50_ms"), cell(c, "request_throughput_req_per_s"),
                     cell(c, "output_throughput_tok_per_s") if c.get("load_point") else f"{record.performance} req/s",
                     cell(c, "goodput_req_per_s"), status))
    return table(("model", "load", "ok", "err", "ttft_p50", "ttft_p99", "tpot_p50", "itl_p50", "itl_p99", "e2e_p50",
                  "req/s", "tok/s", "goodput", "status"), rows, max_width=70)
