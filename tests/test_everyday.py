"""Everyday use: progress as a person sees it (a real TTY under tmux, plain lines in a log), quiet
and verbose, colour, one spelling for the perf.csv flag, shell completion, and the smaller gaps."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import REPO, require_service, run_process
from madengine.cli import build_parser
from madengine.results import read_rows

ANSI = re.compile(r"\x1b\[")
SLOW = "#!/usr/bin/env bash\nfor i in 1 2 3 4 5 6; do echo tick $i; sleep 0.5; done\necho 'performance: 3 x'\n"
FAST = "#!/usr/bin/env bash\necho 'performance: 7 x'\n"
FAILS = "#!/usr/bin/env bash\necho 'loading'\npython3 -c 'raise ValueError(\"bad shape\")'\n"


@pytest.fixture
def repo(tmp_path, monkeypatch):
    root = tmp_path / "repo"
    (root / "scripts").mkdir(parents=True)
    for name, text in (("slow.sh", SLOW), ("fast.sh", FAST), ("fails.sh", FAILS)):
        (root / "scripts" / name).write_text(text)
    (root / "models.json").write_text(json.dumps([
        {"name": "ev_slow", "dockerfile": "docker/none", "scripts": "scripts/slow.sh", "tags": ["ev"]},
        {"name": "ev_fast", "dockerfile": "docker/none", "scripts": "scripts/fast.sh", "tags": ["ev"]},
        {"name": "ev_fails", "dockerfile": "docker/none", "scripts": "scripts/fails.sh", "tags": ["bad"]}]))
    monkeypatch.chdir(root)
    return root


# -- progress -----------------------------------------------------------------------------------

def test_progress_in_a_log_is_plain_timestamped_lines(repo):
    done = run_process("run", "--tags", "ev", "--executor", "local", "--no-html", cwd=repo)
    assert done.returncode == 0, done.stderr
    assert not ANSI.search(done.stderr)  # never a control code when stderr is not a terminal
    lines = done.stderr.splitlines()
    stamped = [line for line in lines if re.match(r"\d\d:\d\d:\d\d ", line)]
    assert any("[1/2] ev_slow: running" in line for line in stamped), done.stderr
    assert any("[2/2] ev_fast: SUCCESS 7 x in" in line for line in stamped), done.stderr
    assert any("madengine: finished in" in line for line in stamped)
    assert lines[-1].startswith("madengine: 2 succeeded, 0 failed, 0 skipped")


def test_progress_on_a_terminal_is_a_live_line_that_updates(repo, tmp_path):
    tmux = shutil.which("tmux")
    require_service("tmux", tmux is not None, "apt-get install tmux (scripts/ci.d/60-tmux.sh)")
    session = f"madengine-{os.getpid()}"
    command = f"cd {repo} && {sys.executable} -m madengine run --tags ev --executor local --no-html; sleep 30"
    subprocess.run([tmux, "new-session", "-d", "-s", session, "-x", "160", "-y", "40",
                    "env", f"PYTHONPATH={REPO / 'src'}", "bash", "-c", command], check=True)
    try:
        panes = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            pane = subprocess.run([tmux, "capture-pane", "-p", "-t", session], capture_output=True, text=True).stdout
            panes.append(pane)
            if "succeeded" in pane:
                break
            time.sleep(0.3)
        live = [p for p in panes if "[1/2] ev_slow" in p and "elapsed" in p]
        assert live, panes[-1]
        elapsed = {re.search(r"elapsed [^ ·|]+", p).group(0) for p in live}
        assert len(elapsed) >= 2, elapsed  # the line updates while the model runs
        assert "succeeded" in panes[-1] and "SUCCESS" in panes[-1]
        (REPO / "test-artifacts").mkdir(exist_ok=True)
        (REPO / "test-artifacts" / "progress-tmux.txt").write_text("\n=====\n".join(panes[-3:]))
    finally:
        subprocess.run([tmux, "kill-session", "-t", session], capture_output=True)


def test_quiet_keeps_errors_and_the_summary_verbose_adds_steps(repo, cli):
    quiet = cli("run", "--tags", "ev", "--executor", "local", "--no-html", "--quiet")
    assert quiet.code == 0 and "ev_slow: running" not in quiet.stderr and "[1/2]" not in quiet.stderr
    assert "madengine: 2 succeeded" in quiet.stderr and "ev_fast" in quiet.stderr  # the summary table
    verbose = cli("run", "--tags", "ev_fast", "--executor", "local", "--no-html", "--verbose")
    assert "step model `bash fast.sh` exit 0 in" in verbose.stderr, verbose.stderr
    failing = cli("run", "--tags", "bad", "--executor", "local", "--no-html", "--quiet")
    assert failing.code == 1 and "ValueError: bad shape" in failing.stderr and "run.log" in failing.stderr


def test_failure_reason_says_what_the_model_said_and_where_its_log_is(repo, cli):
    result = cli("run", "--tags", "bad", "--executor", "local", "--no-html")
    row = read_rows(repo / "perf.csv")[0]
    assert row["reason"] == "model script exited with code 1: ValueError: bad shape"
    log = next(repo.glob("madengine_runs/*/ev_fails/run.log"))
    assert f"ev_fails: log {log.relative_to(repo)}" in result.stderr


def test_no_color_and_no_color_variable_are_honoured():
    from madengine.cli.progress import colour_enabled

    assert colour_enabled({}, no_color=False)
    assert not colour_enabled({"NO_COLOR": "1"}, no_color=False)
    assert not colour_enabled({}, no_color=True)
    assert build_parser(full=True).parse_args(["run", "--tags", "x", "--no-color"]).no_color


# -- flags ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("argv", [
    ["run", "--tags", "x", "--perf-csv", "a.csv"], ["run", "--tags", "x", "-o", "a.csv"],
    ["run", "--tags", "x", "--output", "a.csv"], ["bench", "m.onnx", "--perf-csv", "a.csv"],
    ["bench", "m.onnx", "-o", "a.csv"], ["scorecard", "s.yaml", "--perf-csv", "a.csv"],
    ["report", "update-perf", "--perf-csv", "a.csv"], ["report", "update-perf", "--perf_csv", "a.csv"],
    ["report", "to-html", "--perf-csv", "a.csv"], ["report", "to-html", "--csv-file-path", "a.csv"],
    ["report", "to-email", "--perf-csv", "a.csv"], ["report", "to-email", "--csv-file-path", "a.csv"],
    ["report", "regressions", "--perf-csv", "a.csv"], ["report", "collect", "--job", "1", "--perf-csv", "a.csv"],
])
def test_one_spelling_for_the_perf_csv_path_and_the_old_ones_as_aliases(argv):
    assert build_parser(full=True).parse_args(argv).perf_csv == "a.csv"


def test_readers_default_to_perf_csv_and_compare_takes_the_spelling_too(repo, cli):
    assert cli("run", "--tags", "ev_fast", "--executor", "local", "--no-html").code == 0
    assert cli("report", "to-html").code == 0 and (repo / "perf.html").is_file()
    compared = cli("report", "compare", "--perf-csv", "perf.csv", "--perf-csv", "perf.csv", "--json")
    assert compared.code == 0, compared


@pytest.mark.parametrize("argv,dest,value", [
    (["run", "--tags", "x", "--tools-config", "t.json"], "tools_json_file_name", "t.json"),
    (["run", "--tags", "x", "--sys-env-details"], "generate_sys_env_details", True),
    (["build", "--tags", "x", "--manifest-output", "m.json"], "manifest_file", "m.json"),
    (["run", "--tags", "x", "--verbose"], "verbose", True),
])
def test_the_original_madengines_spellings(argv, dest, value):
    assert getattr(build_parser(full=True).parse_args(argv), dest) == value


@pytest.mark.parametrize("shell,marker", [("bash", "complete"), ("zsh", "#compdef madengine")])
def test_shell_completion_scripts(cli, shell, marker, tmp_path):
    result = cli("completion", shell)
    assert result.code == 0 and marker in result.stdout
    for word in ("run", "report", "--perf-csv", "--repeat", "trace-diff"):
        assert word in result.stdout
    if shell == "bash":
        script = tmp_path / "madengine.bash"
        script.write_text(result.stdout)
        assert subprocess.run(["bash", "-n", str(script)]).returncode == 0


# -- the smaller gaps -------------------------------------------------------------------------------

def test_no_lock_file_is_left_beside_perf_csv(repo, cli):
    assert cli("run", "--tags", "ev_fast", "--executor", "local", "--no-html").code == 0
    assert not list(repo.glob("*.lock")) and (repo / "perf.csv").is_file()


def test_build_without_an_engine_says_what_to_do(repo, tmp_path):
    done = run_process("build", "--tags", "ev_fast", cwd=repo, env={"DOCKER_HOST": f"unix://{tmp_path}/none.sock"})
    assert done.returncode == 2 and "--executor local" not in done.stderr and "dockerd" in done.stderr


def test_list_runs_shows_when_each_run_started(repo, cli):
    assert cli("run", "--tags", "ev_fast", "--executor", "local", "--no-html").code == 0
    started = read_rows(repo / "perf.csv")[0]["started_at"]
    assert cli("database", "update-table", "--perf-csv", "perf.csv", "--db-url", "sqlite:///r.db").code == 0
    listed = cli("database", "list-runs", "--db-url", "sqlite:///r.db")
    assert "started" in listed.stdout.splitlines()[0] and started in listed.stdout


def test_bench_writes_perf_html_and_takes_axes_per_model(repo, cli, tmp_path, monkeypatch):
    from test_bench_harness import build_two_inputs

    monkeypatch.setenv("MADENGINE_CACHE_DIR", str(tmp_path / "cache"))
    model = build_two_inputs(tmp_path / "two.onnx")
    result = cli("bench", f"{model}:batch=2:seq=3", "--warmup", "1", "--iterations", "3", "--json")
    assert result.code == 0, result
    assert json.loads(result.stdout)["results"][0]["inputs"]["ids"]["shape"] == [2, 3]
    assert (repo / "perf.html").is_file()
    bad = cli("bench", f"{model}:batch=2:nope=3", "--warmup", "1", "--iterations", "3")
    assert bad.code == 2 and "nope" in bad.stderr
