"""madengine serve-bench: exactness against a server of known timing, faults, bad input, rows, traces.

The server is tests/serving_server.py, the tests' own (no mock): a real HTTP/1.1 server streaming
SSE over loopback sockets. The exactness tests run it and madengine's client in one event loop
whose clock is virtual (``VirtualClock``): time passes only when every task waits, so what the
client measures is exactly what the server scheduled, on any machine under any load (real-time
accuracy is benchmarks/serving_client.py's: a figure, not a verdict). The fault and CLI tests run
the server as a child process in real time, with fast timings.
"""

from __future__ import annotations

import asyncio
import json
import math
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

import serving_server
from madengine.core.errors import InputError
from madengine.results import read_rows
from madengine.serving import loadpoints as lp
from madengine.serving.client import Endpoint
from madengine.serving.loadgen import run_point
from madengine.serving.metrics import figures
from madengine.serving.plan import ServingPlan, check_plan, run_plan
from madengine.serving.prompts import sharegpt, synthetic
from madengine.stats.summary import percentile
from madengine.tracing import NULL_TRACER
from madengine.tracing.validate import check_trace

import aiohttp  # noqa: F401,E402 (the serving extra: installed with [all]; a missing one fails, never skips)

FAST = ("--ttft-ms", "30", "--itl-ms", "3")  # real-time fault tests: short streams


# -- exactness, in virtual time -------------------------------------------------------------------
def _truth(records: list[dict]) -> dict[str, list[float]]:
    """TTFT, TPOT, ITL and E2E (ms) as the server did it: from its reads and writes."""
    truth: dict[str, list[float]] = {"ttft": [], "tpot": [], "itl": [], "e2e": []}
    for request in records:
        tokens, received = request["tokens"], request["received"]
        truth["ttft"].append((tokens[0] - received) / 1e6)
        truth["e2e"].append((tokens[-1] - received) / 1e6)
        truth["itl"] += [(b - a) / 1e6 for a, b in zip(tokens, tokens[1:])]
        truth["tpot"].append((tokens[-1] - tokens[0]) / 1e6 / (len(tokens) - 1))
    return truth


def _measure(point: lp.LoadPoint, requests: int, *options: str) -> tuple[list, list[dict]]:
    clock = serving_server.VirtualClock()
    args = serving_server.parse_args(list(options))

    async def main():
        listener, server = await serving_server.start(args, clock)
        port = listener.sockets[0].getsockname()[1]
        endpoint = Endpoint(f"http://127.0.0.1:{port}/v1", serving_server.MODEL)
        records = await run_point(endpoint, point, synthetic(requests, 8, 12), clock=clock, seed=3)
        listener.close()
        return records, server.records

    return clock.run(main())


@pytest.mark.parametrize("concurrency,requests", [(1, 6), (16, 48), (64, 128)])
def test_percentiles_match_the_servers_truth_within_2_percent(concurrency, requests):
    """TTFT 200 ms, ITL 20 ms, each token moved by up to ±4 ms (seeded): every p50/p90/p99 of
    TTFT, TPOT, ITL and E2E madengine measures is within 2 % of what the server did."""
    records, served = _measure(lp.LoadPoint(concurrency=concurrency), requests, "--ttft-ms", "200", "--itl-ms", "20",
                               "--jitter-ms", "4")
    assert len(records) == len(served) == requests and all(r.ok for r in records)
    measured, truth = figures(records, lp.Slo()), _truth(served)
    assert measured.completed == requests and measured.output_tokens == requests * 12
    assert measured.token_source == "usage"
    for name in ("ttft", "tpot", "itl", "e2e"):
        ordered = sorted(truth[name])
        for q in (50, 90, 99):
            expected = percentile(ordered, q)
            got = measured.latencies[name][f"p{q}"]
            assert got == pytest.approx(expected, rel=0.02), (name, q, got, expected)
    # and the server did what it was asked: the truth is TTFT 200 ± 4 ms, ITL 20 ± 8 ms
    assert all(196 <= t <= 204.5 for t in truth["ttft"]) and all(11.9 <= t <= 28.1 for t in truth["itl"])


def test_at_concurrency_n_n_requests_are_in_flight():
    records, _ = _measure(lp.LoadPoint(concurrency=4), 12, "--ttft-ms", "50", "--itl-ms", "5")
    starts = sorted(r.sent for r in records)
    # three waves of four: each wave sent together, the next when it ended
    assert len(set(starts[:4])) == 1 and starts[4] > starts[3] and len(set(starts[4:8])) == 1
    assert {r.slot for r in records} == {0, 1, 2, 3}


def test_poisson_arrivals_follow_the_seeded_schedule():
    import random

    records, _ = _measure(lp.LoadPoint(rate=20.0), 30, "--ttft-ms", "10", "--itl-ms", "1")
    rng, at, expected = random.Random(3), 0.0, []
    for _ in range(30):
        at += rng.expovariate(20.0)
        expected.append(at)
    sent = sorted(r.sent for r in records)
    offsets = [(s - sent[0]) / 1e9 for s in sent]
    assert offsets == pytest.approx([e - expected[0] for e in expected], abs=1e-6)


def test_tpot_and_token_counts_follow_vllms_definitions():
    """Without usage, output tokens are the stream's text chunks; TPOT = (E2E − TTFT) / (n − 1)."""
    records, _ = _measure(lp.LoadPoint(concurrency=1), 2, "--ttft-ms", "100", "--itl-ms", "10", "--no-usage")
    record = records[0]
    assert record.token_source == "stream" and record.output_tokens == 12 and record.usage_output is None
    assert record.ttft_ms == pytest.approx(100, abs=1e-6)
    assert record.tpot_ms == pytest.approx((record.e2e_ms - record.ttft_ms) / 11)
    assert record.itl_ms == pytest.approx([10.0] * 11, abs=1e-6)


def test_a_stream_without_done_that_finished_is_whole():
    records, _ = _measure(lp.LoadPoint(concurrency=2), 4, "--ttft-ms", "5", "--itl-ms", "1", "--no-done")
    assert all(r.ok and r.finish_reason == "length" for r in records)


# -- arrival times, in real time ------------------------------------------------------------------
@pytest.mark.parametrize("read", ["recv", "recv_into"])
def test_a_read_keeps_when_its_bytes_arrived(read):
    """Linux (x86-64, arm64, riscv64): the kernel's stamp, before the read; elsewhere, and while the
    kernel has not yet switched its stamps on, the read's own time."""
    import select
    import socket
    import time

    from madengine.serving.arrivals import KERNEL_STAMPS, arrival_socket

    def exchange() -> tuple[int, int]:
        sent = time.monotonic_ns()
        peer.sendall(b"data: token\n\n")
        select.select([client], [], [])
        readable = time.monotonic_ns()  # the bytes are in: they arrived before this
        if read == "recv":
            data = client.recv(64)
        else:
            buffer = bytearray(64)
            data = bytes(buffer[:client.recv_into(buffer)])
        assert data == b"data: token\n\n"
        if client.from_kernel:
            assert sent <= client.arrived <= readable
        else:
            assert client.arrived >= readable
        return sent, readable

    with socket.create_server(("127.0.0.1", 0)) as listener:
        client = arrival_socket((socket.AF_INET, socket.SOCK_STREAM, 0, "", listener.getsockname()))
        client.connect(listener.getsockname())
        peer, _ = listener.accept()
        with client, peer:
            for _ in range(400):  # the kernel switches its stamps on a moment after a socket asks
                exchange()
                if client.from_kernel or not KERNEL_STAMPS:
                    break
                time.sleep(0.005)
            assert client.from_kernel == KERNEL_STAMPS
            for _ in range(3):
                exchange()
                assert client.from_kernel == KERNEL_STAMPS


def test_a_real_time_session_times_its_tokens_by_their_sockets(server):
    """On the system's clock a response streams from an arrival socket (the tests' virtual clock, or
    ``arrival_times=False``, reads the clock instead); its tokens lie between the send and the end."""
    from madengine.serving.arrivals import KERNEL_STAMPS, socket_of
    from madengine.serving.client import new_session

    endpoint = Endpoint(server.url, serving_server.MODEL)
    body = json.dumps(endpoint.payload(synthetic(1, 4, 3)[0])).encode()

    async def sockets():
        found = []
        for arrival_times in (True, False):
            async with new_session(1, arrival_times=arrival_times) as session, \
                    session.post(endpoint.url, data=body, headers=endpoint.request_headers) as response:
                sock = socket_of(response)
                await response.read()
                found.append((sock, sock.arrived if sock else None, sock.from_kernel if sock else None))
        records = await run_point(endpoint, lp.LoadPoint(concurrency=2), synthetic(4, 4, 5))
        return found, records

    found, records = asyncio.run(sockets())
    (stamped, arrived, from_kernel), (unstamped, _, _) = found
    assert stamped is not None and arrived > 0 and from_kernel == KERNEL_STAMPS
    assert unstamped is None
    for record in records:
        assert record.ok and len(record.token_times) == 5, record
        assert record.sent < record.token_times[0] and record.token_times == sorted(record.token_times)
        assert record.token_times[-1] <= record.ended


# -- faults, in real time -------------------------------------------------------------------------
def _bench(cli, tmp_path: Path, url: str, *flags: str):
    return cli("serve-bench", "--url", url, "--model", serving_server.MODEL, "-o", str(tmp_path / "perf.csv"),
               "--runs-dir", str(tmp_path / "runs"), "--no-html", *flags)


@pytest.fixture
def server(tmp_path, request):
    options = getattr(request, "param", ())
    with serving_server.ServerProcess(tmp_path, *FAST, *options) as process:
        yield process


def test_serve_bench_records_one_row_per_load_point_with_requests_and_trace(cli, tmp_path, server):
    result = _bench(cli, tmp_path, server.url, "--concurrency", "1,4", "--request-rate", "50", "--requests", "8",
                    "--input-len", "8", "--output-len", "6", "--server", "testsrv", "--json")
    assert result.code == 0, result
    rows = read_rows(tmp_path / "perf.csv")
    assert [r["tag_configs"] for r in rows] == ["concurrency=1:input_len=8:output_len=6",
                                                "concurrency=4:input_len=8:output_len=6",
                                                "input_len=8:output_len=6:rate=50"]
    for row in rows:
        assert row["status"] == "SUCCESS" and row["model"] == serving_server.MODEL and row["backend"] == "testsrv"
        assert row["executor"] == "serve-bench" and row["metric"] == "output_throughput_tok_per_s"
        assert row["completed"] == "8" and row["errors"] == "0" and row["token_counts"] == "usage"
        assert float(row["performance"]) == float(row["output_throughput_tok_per_s"]) > 0
        for name in ("ttft", "tpot", "itl", "e2e"):
            assert float(row[f"{name}_p50_ms"]) <= float(row[f"{name}_p90_ms"]) <= float(row[f"{name}_p99_ms"])
        assert 30 <= float(row["ttft_p50_ms"]) < 1000 and "ttft_p99_ms" in row["figures"].split(",")
        lines = Path(row["requests_file"]).read_text().splitlines()
        assert len(lines) == 8 and all(json.loads(line)["ok"] for line in lines)
        assert len(json.loads(lines[0])["itl_ms"]) == 5
    summary = json.loads(result.stdout)
    trace = json.loads(Path(summary["trace"]).read_text())
    assert check_trace(trace) == []  # well formed: the overlapping requests on tracks of their own
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    requests = [e for e in events if e.get("name") == "serving.request"]
    assert len(requests) == 24 and all(e["args"].get("madengine.serving.load_point") for e in requests)
    assert len([e for e in events if e.get("name") == "serving.load_point"]) == 3
    assert "ttft_p50" in result.stderr  # the table goes to stderr with --json


@pytest.mark.parametrize("server", [("--fail-every", "10")], indirect=True)
def test_errors_are_counted_never_dropped(cli, tmp_path, server):
    result = _bench(cli, tmp_path, server.url, "--concurrency", "4", "--requests", "40", "--output-len", "4")
    assert result.code == 1, result  # 10 % errors: above the default limit of 5 %
    row = read_rows(tmp_path / "perf.csv")[0]
    assert row["status"] == "FAILURE" and row["errors"] == "4" and row["completed"] == "36"
    assert row["error_rate"] == "0.1" and "HTTP 500 ×4" in row["reason"] and "above the limit of 5.0%" in row["reason"]
    assert json.loads(row["error_kinds"]) == {"HTTP 500": 4}
    again = _bench(cli, tmp_path, server.url, "--concurrency", "4", "--requests", "40", "--output-len", "4",
                   "--max-error-rate", "0.2")
    assert again.code == 0, again
    assert read_rows(tmp_path / "perf.csv")[1]["status"] == "SUCCESS"


@pytest.mark.parametrize("server,kind", [(("--malformed-every", "3"), "malformed SSE"), (("--cut-every", "3"), "stream cut"),
                                         (("--error-every", "3"), "server error in the stream")],
                         indirect=["server"])
def test_broken_streams_are_errors_with_their_reason(cli, tmp_path, server, kind):
    result = _bench(cli, tmp_path, server.url, "--concurrency", "2", "--requests", "9", "--output-len", "6")
    assert result.code == 1, result
    row = read_rows(tmp_path / "perf.csv")[0]
    assert row["errors"] == "3" and row["completed"] == "6" and kind in row["reason"]
    failed = [json.loads(line) for line in Path(row["requests_file"]).read_text().splitlines()
              if not json.loads(line)["ok"]]
    assert len(failed) == 3 and all(f["error"].startswith(kind) for f in failed)


def test_an_unreachable_endpoint_is_a_failure_row_naming_the_url(cli, tmp_path):
    from madengine.launch.ports import free_port

    url = f"http://127.0.0.1:{free_port()}/v1"
    result = _bench(cli, tmp_path, url, "--concurrency", "1,2")
    assert result.code == 1, result
    rows = read_rows(tmp_path / "perf.csv")
    assert len(rows) == 2 and all(r["status"] == "FAILURE" and url in r["reason"] for r in rows)
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("server", [("--never-ready",)], indirect=True)
def test_a_server_that_never_becomes_ready_fails_at_the_timeout(cli, tmp_path, server):
    result = _bench(cli, tmp_path, server.url, "--concurrency", "1", "--ready-timeout", "1")
    assert result.code == 1, result
    row = read_rows(tmp_path / "perf.csv")[0]
    assert row["status"] == "FAILURE" and "not ready after 1 s" in row["reason"] and "HTTP 503" in row["reason"]


def test_the_api_key_is_sent_and_never_shown(cli, tmp_path, server, monkeypatch):
    key = "sk-serving-secret-4242"
    monkeypatch.setenv("SERVING_TEST_KEY", key)
    result = _bench(cli, tmp_path, server.url, "--concurrency", "1", "--requests", "2", "--output-len", "3",
                    "--api-key-env", "SERVING_TEST_KEY", "--json")
    assert result.code == 0, result
    texts = [result.stdout, result.stderr, (tmp_path / "perf.csv").read_text()]
    texts += [p.read_text() for p in (tmp_path / "runs").rglob("*") if p.is_file()]
    assert not [t for t in texts if key in t]
    missing = _bench(cli, tmp_path, server.url, "--concurrency", "1", "--api-key-env", "NO_SUCH_VARIABLE_37")
    assert missing.code == 2 and "--api-key-env" in missing.stderr and "NO_SUCH_VARIABLE_37" in missing.stderr


def test_chat_completions_and_a_sharegpt_file(cli, tmp_path, server):
    dataset = tmp_path / "share.json"
    dataset.write_text(json.dumps([{"conversations": [{"from": "human", "value": "hello there friend"},
                                                      {"from": "gpt", "value": "one two three four five"}]}]))
    result = _bench(cli, tmp_path, server.url, "--api", "chat", "--dataset", str(dataset), "--concurrency", "2",
                    "--requests", "4")
    assert result.code == 0, result
    row = read_rows(tmp_path / "perf.csv")[0]
    assert row["tag_configs"] == "api=chat:concurrency=2:dataset=share:output_len=reply"
    assert row["output_tokens"] == "20"  # each reply's 5 words are the requests' max_tokens


def test_an_slo_sweep_finds_the_highest_rate_meeting_it(cli, tmp_path, server):
    """TTFT ≈ 30 ms at any rate this server sees: a TTFT bound of 5 s is met at every rate tried
    (1, 2, 4 → sweep-max 4), one of 1 ms at none."""
    met = _bench(cli, tmp_path, server.url, "--sweep", "--slo", "ttft_ms=5000", "--sweep-max", "4",
                 "--requests", "4", "--output-len", "3", "--json")
    assert met.code == 0, met
    rows = read_rows(tmp_path / "perf.csv")
    assert [r["load_point"] for r in rows[:-1]] == ["rate=1", "rate=2", "rate=4"]
    assert all(r["slo_met"] == "true" and r["goodput_req_per_s"] for r in rows[:-1])
    assert rows[-1]["metric"] == "slo_rate_req_per_s" and rows[-1]["performance"] == "4.0"
    assert json.loads(met.stdout)["sweep"]["best_rate"] == 4.0
    missed = _bench(cli, tmp_path, server.url, "--sweep", "--slo", "ttft_ms=1", "--requests", "2", "--output-len", "2")
    assert missed.code == 1, missed
    last = read_rows(tmp_path / "perf.csv")[-1]
    assert last["status"] == "FAILURE" and "no rate met the SLO ttft_ms=1" in last["reason"]


# -- bad input ------------------------------------------------------------------------------------
@pytest.mark.parametrize("flags,named", [
    (("--concurrency", ""), "--concurrency"), (("--concurrency", "1,,4"), "--concurrency"),
    (("--concurrency", "0"), "--concurrency"), (("--concurrency", "two"), "--concurrency"),
    (("--request-rate", "-1"), "--request-rate"), (("--request-rate", "nan"), "--request-rate"),
    (("--concurrency", "1", "--output-len", "0"), "--output-len"), (("--concurrency", "1", "--requests", "0"), "--requests"),
    (("--sweep",), "--sweep"), (("--concurrency", "1", "--slo", "ttft=5"), "--slo"),
    (("--concurrency", "1", "--sweep-steps", "2"), "--sweep-steps"), ((), "--concurrency"),
])
def test_bad_flags_exit_2_naming_the_flag(cli, tmp_path, flags, named):
    result = _bench(cli, tmp_path, "http://127.0.0.1:9/v1", *flags)
    assert result.code == 2, result
    assert named in result.stderr and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert not (tmp_path / "perf.csv").exists()


@pytest.mark.parametrize("content,says", [
    ("{not json", "malformed JSON"), ('{"conversations": []}', "not a non-empty JSON list"),
    ('[{"conversations": [{"from": "human", "value": "hi"}]}]', "entry 0 has no 'conversations' list of two turns"),
    ('[{"turns": 3}]', "entry 0"), ('[{"conversations": [{"from": "human"}, {"value": "x"}]}]', "no text 'value'"),
])
def test_a_prompt_file_that_is_not_sharegpt_exits_2(cli, tmp_path, content, says):
    dataset = tmp_path / "prompts.json"
    dataset.write_text(content)
    result = _bench(cli, tmp_path, "http://127.0.0.1:9/v1", "--concurrency", "1", "--dataset", str(dataset))
    assert result.code == 2, result
    assert "--dataset" in result.stderr and str(dataset) in result.stderr and says in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    missing = _bench(cli, tmp_path, "http://127.0.0.1:9/v1", "--concurrency", "1", "--dataset", str(tmp_path / "no"))
    assert missing.code == 2 and "file not found" in missing.stderr


# -- parsers (property tests) ----------------------------------------------------------------------
@given(st.lists(st.integers(1, lp.MAX_CONCURRENCY), min_size=1, max_size=8, unique=True))
def test_concurrency_lists_round_trip(values):
    assert lp.parse_concurrencies(",".join(map(str, values))) == values


@given(st.text(max_size=30))
def test_concurrency_parser_takes_lists_or_names_the_flag(text):
    try:
        values = lp.parse_concurrencies(text)
    except InputError as exc:
        assert exc.path == "--concurrency" and "\n" not in str(exc)
        return
    assert values and all(1 <= v <= lp.MAX_CONCURRENCY for v in values) and len(set(values)) == len(values)


@given(st.lists(st.floats(min_value=1e-3, max_value=lp.MAX_RATE, allow_nan=False), min_size=1, max_size=6, unique=True))
def test_rate_lists_round_trip(values):
    assert lp.parse_rates(",".join(repr(v) for v in values)) == values


@given(st.text(max_size=30))
def test_rate_parser_takes_positive_rates_or_names_the_flag(text):
    try:
        values = lp.parse_rates(text)
    except InputError as exc:
        assert exc.path == "--request-rate"
        return
    assert all(v > 0 and not math.isnan(v) for v in values)


@given(st.text(max_size=40))
def test_slo_parser_takes_known_bounds_or_names_the_flag(text):
    try:
        slo = lp.parse_slo(text)
    except InputError as exc:
        assert exc.path == "--slo"
        return
    assert slo and all(v is None or v > 0 for v in (slo.ttft_ms, slo.tpot_ms, slo.e2e_ms))


@given(st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=8),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
                    max_leaves=12))
def test_a_prompt_file_of_any_json_gives_prompts_or_one_error(tmp_path_factory, value):
    path = tmp_path_factory.mktemp("sharegpt") / "p.json"
    path.write_text(json.dumps(value))
    try:
        prompts = sharegpt(path, 3, None)
    except InputError as exc:
        assert exc.path == f"--dataset {path}" and "\n" not in str(exc)
        return
    assert len(prompts) == 3 and all(p.text and p.output_len >= 1 for p in prompts)


def test_a_sweep_doubles_then_bisects():
    sweep, tried = lp.RateSweep(start=1, steps=2, max_rate=64), []
    met_below = 5.0
    while (rate := lp.next_sweep_rate(sweep, tried)) is not None:
        tried.append((rate, rate <= met_below))
    assert [r for r, _ in tried] == [1, 2, 4, 8, 6, 5]
    assert lp.best_rate(tried) == 5


def test_plan_checks_name_the_field():
    with pytest.raises(InputError, match="is not an http"):
        check_plan(ServingPlan(url="ftp://x", model="m", points=[lp.LoadPoint(concurrency=1)]))
    with pytest.raises(InputError) as caught:
        check_plan(ServingPlan(url="http://x/v1", model="m", points=[lp.LoadPoint(concurrency=1)], output_len=0,
                               names={"output_len": "models.json: model 'x': serving.output_len"}))
    assert caught.value.path == "models.json: model 'x': serving.output_len"


def test_run_plan_writes_one_result_per_point_and_a_jsonl_each(tmp_path):
    clock = serving_server.VirtualClock()
    args = serving_server.parse_args(["--ttft-ms", "50", "--itl-ms", "5"])
    results = []

    async def main():
        listener, _ = await serving_server.start(args, clock)
        port = listener.sockets[0].getsockname()[1]
        plan = ServingPlan(url=f"http://127.0.0.1:{port}/v1", model="m", requests=5, input_len=4, output_len=4,
                           points=lp.load_points([1, 5], [math.inf]))
        await run_plan(plan, check_plan(plan), tmp_path, tracer=NULL_TRACER, on_result=results.append, clock=clock)
        listener.close()

    clock.run(main())
    assert [r.point.label for r in results] == ["concurrency=1", "concurrency=5", "rate=inf"]
    assert all(r.ok and r.requests_file.is_file() for r in results)
    # five at once: the same TTFT as one after another, and a fifth of the duration
    assert results[1].figures.latencies["ttft"]["p50"] == pytest.approx(50, abs=1e-6)
    assert results[1].figures.duration_s == pytest.approx(results[0].figures.duration_s / 5, rel=1e-6)


# -- figures flow into compare and regressions ------------------------------------------------------
def _row(run: int, ttft_p99: float, throughput: float, started: str = "") -> dict[str, str]:
    return {"model": "m", "status": "SUCCESS", "performance": str(throughput), "metric": "output_throughput_tok_per_s",
            "tag_configs": "concurrency=4:input_len=8:output_len=8", "executor": "serve-bench", "backend": "vllm",
            "run_id": f"run{run:02d}", "started_at": started or f"2026-01-{run + 1:02d}T00:00:00+00:00",
            "ttft_p99_ms": str(ttft_p99), "itl_p50_ms": "20.0", "figures": "ttft_p99_ms,itl_p50_ms"}


def test_every_figure_of_a_row_is_compared_in_its_own_direction():
    from madengine.reports.compare import compare_rows

    old = [_row(1, 200.0 + i, 100.0) for i in range(5)]
    new = [_row(2, 260.0 + i, 100.0) for i in range(5)]
    result = compare_rows(old, new)
    verdicts = {c.identity.metric: c for c in result.comparisons}
    assert set(verdicts) == {"output_throughput_tok_per_s", "ttft_p99_ms", "itl_p50_ms"}
    assert verdicts["ttft_p99_ms"].verdict == "slower" and verdicts["ttft_p99_ms"].identity.tag_configs.startswith("concurrency=4")
    assert verdicts["output_throughput_tok_per_s"].verdict in ("unchanged", "inconclusive")


def test_regressions_find_a_figure_that_grew():
    from madengine.reports.regressions import find_regressions

    rows = [_row(run, 200.0 if run < 8 else 300.0, 100.0) for run in range(16)]
    report = find_regressions(rows)
    changed = {c.identity.metric: c.kind for c in report.changes}
    assert changed.get("ttft_p99_ms") == "regression" and "itl_p50_ms" not in changed


def test_each_figure_is_a_row_of_its_own_in_the_database(cli, tmp_path, server):
    """update-table stores each figure as a row of its metric (series, alerts and the dashboard take it
    like any result), once: a re-import adds nothing, and a comparison of runs counts it once."""
    from madengine.database import fetch_run
    from madengine.reports.compare import compare_runs

    url = f"sqlite:///{tmp_path / 'results.db'}"
    runs = []
    for _ in range(2):
        assert _bench(cli, tmp_path, server.url, "--concurrency", "2", "--requests", "4", "--output-len", "4").code == 0
        runs.append(read_rows(tmp_path / "perf.csv")[-1]["run_id"])
    first = cli("database", "update-table", "--csv-file-path", str(tmp_path / "perf.csv"), "--db-url", url)
    again = cli("database", "update-table", "--csv-file-path", str(tmp_path / "perf.csv"), "--db-url", url)
    assert first.code == 0 and again.code == 0, (first, again)
    assert "2 row(s), 28 inserted" in first.stderr and "0 inserted" in again.stderr
    stored = fetch_run(url, runs[1])
    by_metric = {row["metric"]: row for row in stored}
    assert len(stored) == 14 and by_metric["ttft_p99_ms"]["performance"] == by_metric["ttft_p99_ms"]["ttft_p99_ms"]
    assert by_metric["output_throughput_tok_per_s"]["figures"] == ""  # its figures are the other rows now
    compared = compare_runs(url, runs[0], runs[1])
    assert sorted(c.identity.metric for c in compared.comparisons).count("ttft_p99_ms") == 1
    assert len(compared.comparisons) == 14
