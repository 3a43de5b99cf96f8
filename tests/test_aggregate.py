"""madengine.results.aggregate: a distributed job's nodes' figures → one row (docs/distributed.md).

The rules by metric name, then Hypothesis properties: the order of the nodes never matters, sums
are exact (``math.fsum``), a mean stays within the nodes' figures, a partial set of nodes is never a
figure, and reading a log from its end finds what parsing the whole text finds.
"""

from __future__ import annotations

import itertools
import json
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from madengine.results import PerfRecord
from madengine.results.aggregate import (MAX, MEAN, SUM, JobShape, NodeFigure, aggregate, aggregate_logs,
                                         aggregation_rule, job_rows, last_performance)
from madengine.results.columns import EXTRA_COLUMNS, JOB_COLUMNS
from madengine.results.parsing import Figure, parse_performance


@pytest.mark.parametrize("metric, rule", [
    # throughput-like: a rate per unit of time, or named so
    ("samples/s", SUM), ("samples_per_second", SUM), ("tokens/sec", SUM), ("img/sec", SUM), ("it/s", SUM),
    ("samplesPerSecond", SUM), ("tokens/s/gpu", SUM), ("GB/s", SUM), ("GiB/s", SUM), ("TFLOPS", SUM),
    ("qps", SUM), ("throughput", SUM), ("Gbps", SUM),
    # latency-like: a time, or a time per item; accuracy and loss too
    ("ms", MEAN), ("s", MEAN), ("seconds", MEAN), ("ms/token", MEAN), ("msPerToken", MEAN),
    ("time_per_step", MEAN), ("latency_ms", MEAN), ("ttft_ms", MEAN), ("p99_latency", MEAN), ("accuracy", MEAN),
    ("loss", MEAN), ("perplexity", MEAN), ("%", MEAN), ("error_rate", MEAN),
    # memory
    ("GB", MAX), ("MiB", MAX), ("bytes", MAX), ("peak_memory_MB", MAX), ("max_rss", MAX),
    # unknown: summed, as the reference does
    ("samples", SUM), ("x", SUM), ("", SUM),
])
def test_rules_by_metric_name(metric, rule):
    assert aggregation_rule(metric) == rule


@given(st.text(max_size=40))
def test_every_metric_name_has_a_rule(metric):
    assert aggregation_rule(metric) in (SUM, MEAN, MAX)


TWO = JobShape("torchrun", 2, 4)


def test_throughput_is_summed_and_the_row_records_each_node():
    job = aggregate([NodeFigure(1, 110.0, "samples/s"), NodeFigure(0, 90.0, "samples/s")], TWO)
    assert job.ok and (job.value, job.metric, job.rule, job.n) == (200.0, "samples/s", SUM, 2)
    columns = job.columns()
    assert columns == {"launcher": "torchrun", "world_size": 8, "nnodes": 2, "nproc_per_node": 4,
                       "node_aggregation": "sum", "node_n": 2, "node_cv": repr(job.cv),
                       "node_performance": "[90.0, 110.0]"}
    assert job.cv == pytest.approx(math.sqrt(200) / 100)  # stddev 14.14 / mean 100
    row = PerfRecord(model="m", **columns).to_row()  # every field is a perf.csv column
    assert {name: row[name] for name in JOB_COLUMNS} == {k: str(v) for k, v in columns.items()}
    assert tuple(EXTRA_COLUMNS[-len(JOB_COLUMNS):]) == JOB_COLUMNS


def test_latency_is_averaged_and_memory_is_the_largest():
    latency = aggregate([NodeFigure(0, 10.0, "ms"), NodeFigure(1, 20.0, "ms")], TWO)
    memory = aggregate([NodeFigure(0, 10.0, "GB"), NodeFigure(1, 20.0, "GB")], TWO)
    assert (latency.value, latency.rule) == (15.0, MEAN) and (memory.value, memory.rule) == (20.0, MAX)


def test_a_figure_of_node_zero_alone_is_the_jobs_and_keeps_its_text():
    job = aggregate([NodeFigure(0, Figure("1234.50"), "samples/s"), NodeFigure(1, None)], TWO)
    assert job.ok and str(job.value) == "1234.50" and job.n == 1 and job.cv is None
    assert job.columns()["node_performance"] == "[1234.5, null]" and job.columns()["node_cv"] == ""


def test_a_partial_set_of_nodes_is_no_figure_and_names_the_silent_nodes():
    shape = JobShape("torchrun", 4, 1)
    job = aggregate([NodeFigure(0, 1.0, "x"), NodeFigure(2, 1.0, "x")], shape)
    assert not job.ok and job.value is None
    assert job.problem.startswith("nodes 1, 3 of 4 printed no performance figure while nodes 0, 2 did")
    lone = aggregate([NodeFigure(3, 1.0, "x")], shape)  # a node other than 0 alone does not speak for the job
    assert "nodes 0, 1, 2 of 4" in lone.problem
    assert aggregate([], shape).problem.startswith("no node printed")


def test_nodes_that_disagree_on_the_metric_or_repeat_are_refused():
    assert "different metrics: ms (node 0), s (node 1)" in \
        aggregate([NodeFigure(0, 1.0, "ms"), NodeFigure(1, 1.0, "s")], TWO).problem
    assert aggregate([NodeFigure(0, 1.0, "x"), NodeFigure(0, 2.0, "x")], TWO).problem == "node 0 reported twice"
    assert "outside a job of 2" in aggregate([NodeFigure(2, 1.0, "x")], TWO).problem
    assert "not a finite number" in aggregate([NodeFigure(0, math.inf, "x")], TWO).problem
    assert "sum of the nodes' figures is not a finite number" in \
        aggregate([NodeFigure(0, 1.7e308, "x"), NodeFigure(1, 1.7e308, "x")], TWO).problem
    mean = aggregate([NodeFigure(0, 1.7e308, "ms"), NodeFigure(1, 1.7e308, "ms")], TWO)
    assert mean.ok and mean.value == 1.7e308  # a mean never overflows


# -- properties ------------------------------------------------------------------------------------
finite = st.floats(min_value=-1e300, max_value=1e300, allow_nan=False, allow_infinity=False)
metrics = st.sampled_from(["samples/s", "ms", "GB", "tokens_per_second", "loss", "widgets"])


@st.composite
def jobs(draw):
    nnodes = draw(st.integers(1, 16))
    metric = draw(metrics)
    values = draw(st.lists(finite, min_size=nnodes, max_size=nnodes))
    figures = [NodeFigure(rank, value, metric) for rank, value in enumerate(values)]
    return JobShape("torchrun", nnodes, draw(st.integers(1, 8))), figures, draw(st.randoms())


@given(jobs())
def test_the_order_of_the_nodes_never_matters(job):
    shape, figures, rng = job
    shuffled = list(figures)
    rng.shuffle(shuffled)
    assert aggregate(shuffled, shape) == aggregate(figures, shape)


@given(jobs())
def test_the_rule_holds_exactly(job):
    shape, figures, _ = job
    values = [f.value for f in figures]
    result = aggregate(figures, shape)
    assert result.ok and result.n == shape.nnodes and len(result.node_values) == shape.nnodes
    assert json.loads(result.columns()["node_performance"]) == values
    assert result.columns()["world_size"] == shape.nnodes * shape.nproc_per_node
    if result.rule == SUM:
        assert result.value == math.fsum(values)
    elif result.rule == MAX:
        assert result.value == max(values)
    else:
        assert min(values) - 1e-9 * abs(min(values)) <= result.value <= max(values) + 1e-9 * abs(max(values))
    if shape.nnodes == 1:
        assert result.cv is None and result.value is values[0]  # one node: its figure as given


@given(jobs(), st.data())
def test_missing_nodes_other_than_all_but_zero_are_never_a_figure(job, data):
    shape, figures, _ = job
    silent = data.draw(st.sets(st.integers(0, shape.nnodes - 1), min_size=1))
    given_figures = [NodeFigure(f.node, None) if f.node in silent else f for f in figures]
    result = aggregate(given_figures, shape)
    speaking = set(range(shape.nnodes)) - silent
    assert result.ok == (speaking == {0})
    if result.ok:
        assert result.value == figures[0].value
    else:
        assert result.value is None and result.problem


# -- logs ----------------------------------------------------------------------------------------
noise = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\n\x1b"), max_size=30)
figure_lines = st.builds(lambda v, m, pre: f"{pre}performance: {v} {m}", finite.map(repr),
                         st.sampled_from(["samples/s", "ms", "x,"]), st.sampled_from(["", "[rank0]: ", "  "]))
log_lines = st.lists(st.one_of(noise, figure_lines, st.just("performance: n/a")), max_size=40)


@given(log_lines, st.integers(1, 64), st.booleans())
def test_reading_a_log_from_its_end_finds_what_the_whole_text_gives(tmp_path_factory, lines, chunk, newline):
    text = "\n".join(lines) + ("\n" if newline else "")
    path = tmp_path_factory.mktemp("log") / "node.log"
    path.write_bytes(text.encode("utf-8"))
    assert last_performance(path, chunk=chunk) == parse_performance(text)


def test_logs_of_nodes_aggregate_into_one_figure(tmp_path):
    logs = {}
    for rank in range(3):
        logs[rank] = tmp_path / f"node-{rank}.log"
        logs[rank].write_text("warm-up\nperformance: 1 samples/s\n" + "step\n" * 5000
                              + f"performance: {10 * (rank + 1)} samples/s\nbye\n")
    job = aggregate_logs({**logs, 3: tmp_path / "missing.log"}, JobShape("torchrun", 4, 2))
    assert not job.ok and "node 3 of 4 printed no performance figure" in job.problem
    job = aggregate_logs(logs, JobShape("torchrun", 3, 2))
    assert job.ok and job.value == 60.0 and job.node_values == (10.0, 20.0, 30.0)


# -- the rows of a job's nodes (what the Slurm collection merges) -------------------------------------
def _node_row(node: int, performance: str = "", status: str = "SUCCESS", reason: str = "", model: str = "m",
              metric: str = "samples/s") -> dict[str, str]:
    return {"model": model, "status": status, "performance": performance, "metric": metric, "reason": reason,
            "artifacts": f"/job/node-{node}/run.log", "test_duration": f"{10 + node}.000", "launcher": "torchrun",
            "machine_name": f"host{node}"}


def test_the_rows_of_the_nodes_become_one_row_of_the_job():
    [row] = job_rows({1: [_node_row(1, "110")], 0: [_node_row(0, "90")]}, TWO)
    assert (row["status"], row["performance"], row["metric"], row["reason"]) == ("SUCCESS", "200.0", "samples/s", "")
    assert (row["world_size"], row["nnodes"], row["node_n"]) == ("8", "2", "2")
    assert row["node_performance"] == "[90.0, 110.0]"
    assert row["test_duration"] == "11.000" and row["machine_name"] == "host0"  # the slowest node; the first node
    assert row["artifacts"] == "/job/node-0/run.log,/job/node-1/run.log"


def test_a_figure_from_node_zero_alone_is_the_jobs():
    [row] = job_rows({0: [_node_row(0, "1234.5")], 1: [_node_row(1)]}, TWO)
    assert (row["status"], row["performance"], row["node_n"]) == ("SUCCESS", "1234.5", "1")


def test_the_node_that_failed_first_is_named_first_then_the_others():
    follower = "rank 0 (node 0, local rank 0) exited with code 1: RuntimeError: Connection closed by peer"
    killed = "rank 5 (node 1, local rank 1) was killed by SIGKILL"
    stopped = "interrupted by SIGTERM during model"
    rows = {0: [_node_row(0, status="FAILURE", reason=follower)], 1: [_node_row(1, status="FAILURE", reason=killed)],
            2: [_node_row(2, status="FAILURE", reason=stopped)], 3: [_node_row(3, "5")]}
    [row] = job_rows(rows, JobShape("torchrun", 4, 2))
    assert row["status"] == "FAILURE" and row["performance"] == ""
    assert row["reason"] == f"{killed} (also {follower}; node 2: {stopped})"


def test_a_rank_that_still_ran_names_the_hang_before_a_timeout_that_names_none():
    waited = "timeout: model ran longer than 40 s; every process of the job was ended"
    hung = "interrupted by SIGTERM during model; rank 1 (node 1, local rank 0) was still running"
    [row] = job_rows({0: [_node_row(0, status="FAILURE", reason=waited)],
                      1: [_node_row(1, status="FAILURE", reason=hung)]}, TWO)
    assert row["reason"] == f"node 1: {hung} (also node 0: {waited})"


def test_a_node_without_a_row_fails_the_job_and_comes_before_those_it_stopped():
    [row] = job_rows({0: [_node_row(0, "1")]}, JobShape("torchrun", 3, 1))
    assert row["status"] == "FAILURE" and row["reason"] == "nodes 1, 2 of 3 wrote no result row"
    # node 0 could not even record (a taken port, madengine missing); srun then stopped node 1
    [row] = job_rows({1: [_node_row(1, status="FAILURE", reason="interrupted by SIGTERM during model")]}, TWO)
    assert row["reason"] == ("node 0: wrote no result row (see the job's log) "
                             "(also node 1: interrupted by SIGTERM during model)")


@pytest.mark.parametrize("order", list(itertools.permutations((1, 2))))
def test_a_killed_rank_comes_before_a_node_slurm_killed_before_it_recorded(order):
    """Issue 34: node 1's rank was killed; srun then killed node 0's madengine before it wrote its row
    and stopped node 2. Whatever the order the nodes ended (or are read) in, the killed rank leads."""
    killed = "rank 1 (node 1, local rank 0) was killed by SIGKILL"
    stopped = "interrupted by SIGTERM during model"
    given_rows = {1: [_node_row(1, status="FAILURE", reason=killed)],
                  2: [_node_row(2, status="FAILURE", reason=stopped)]}
    [row] = job_rows({node: given_rows[node] for node in order}, JobShape("torchrun", 3, 1))
    assert row["reason"] == f"{killed} (also node 0: wrote no result row (see the job's log); node 2: {stopped})"


def test_each_result_of_multiple_results_is_merged_on_its_own():
    rows = {node: [_node_row(node, "10", model="m_a"), _node_row(node, "2", model="m_b", metric="ms")]
            for node in (0, 1)}
    merged = job_rows(rows, TWO)
    assert [(r["model"], r["performance"], r["node_aggregation"]) for r in merged] == \
        [("m_a", "20.0", "sum"), ("m_b", "2.0", "mean")]


statuses = st.sampled_from(["SUCCESS", "FAILURE", "SKIPPED"])


@given(st.dictionaries(st.integers(0, 5), st.lists(st.tuples(st.sampled_from(["a", "b"]), statuses,
                                                              st.sampled_from(["", "1", "2.5", "x"])), max_size=3),
                       max_size=6))
def test_every_result_is_one_row_and_never_a_success_a_node_did_not_earn(nodes):
    shape = JobShape("torchrun", 6, 1)
    node_rows = {node: [_node_row(node, perf, status, "why" if status == "FAILURE" else "", model)
                        for model, status, perf in rows] for node, rows in nodes.items()}
    merged = job_rows(node_rows, shape)
    names = list(dict.fromkeys(r["model"] for node in sorted(node_rows) for r in node_rows[node]))
    assert [row["model"] for row in merged] == names
    for row in merged:
        last = {node: [r for r in rows if r["model"] == row["model"]][-1] for node, rows in node_rows.items()
                if any(r["model"] == row["model"] for r in rows)}
        if row["status"] == "SUCCESS":
            assert set(last) == set(range(6)) and all(r["status"] == "SUCCESS" for r in last.values())
            assert math.isfinite(float(row["performance"]))
        if any(r["status"] == "FAILURE" for r in last.values()):
            assert row["status"] == "FAILURE" and row["reason"]
