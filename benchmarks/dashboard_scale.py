"""The results history at 1,000,000 rows: `database update-table`, `report serve`, and asv `publish`, side by side.

The data is a team's nights, written once as a perf.csv (about 1 GB): 2,000 result series x 500 runs,
rows as `madengine run` fills them (every column a run row has: the image, its digests, the context,
the framework versions, the repeats and their statistics, the trace id, ...; see ``perf_rows``), half
the series being 10 configs (tag_configs) of 100 models, noise with a CV of 2 %, a 5 % step in 20
series from run 400 on, 2 % random failures with their reasons. Where asv installs (`pip install
asv`), the same figures become an asv project (one benchmark per series, one commit per run,
failures as missing values) for `asv publish`, the peer's step of the same kind.

Measured, each command in its own process: wall and CPU seconds (CPU of all its processes: wait4),
the peak PSS of all its processes together (/proc/PID/smaps_rollup of the process tree, sampled
every 0.2 s), the peak RSS of its largest process, and the machine's load average beside each:

* `madengine database update-table` of the 1M rows into an empty SQLite database (rows, change points,
  alerts and verdicts of every series complete when it returns), and `asv publish` of the same data;
* the next run (2,000 rows) appended to that perf.csv and `update-table` of it again: only the
  appended rows are read, change detection complete when it returns;
* the change points found: the 20 step series at their step, false changes among the 1,980 others;
* every API call and page of the dashboard (`report serve`, a separate process), each asked 40 times
  with other arguments, the model-wide trend of a model of 10 configs among them: median and p95;
* the first screen in Chromium (Debian's, through Playwright): the overview from navigation to its load
  event, and its first contentful paint.

Targets (issues 27 and 36): import <= 60 s wall on 2 cores, <= 45 s CPU, <= 500 MB PSS; the appended
run <= 5 s; every call median <= 100 ms and p95 <= 250 ms; the first screen <= 1 s. Timings depend on
the machine and on what else runs on it (the load printed beside them): rerun on a quiet machine for
figures to compare; CPU and memory move less with the load than wall time.

    python3 benchmarks/dashboard_scale.py [--work DIR] [--series 2000] [--runs 500 | --rows N] [--no-asv] [--no-browser]
                                          [--floor] [--imports N]

``--floor`` also measures the import's floor: the work no import of these rows can leave out (reading
the CSV, the content keys, SQLite's inserts and indexes, the change detection) as minimal loops, beside
the import's CPU (``Floor``). ``--rows 100000`` (or fewer ``--series``) makes a quick run. ``--work DIR`` keeps the perf.csv and the
asv project of each size for the next time (the database is made again each time). Exit 1 when a
target is missed.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import datetime
import functools
import hashlib
import importlib.util
import json
import os
import random
import re
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from madengine.results.columns import ALL_COLUMNS  # noqa: E402
from madengine.results.identity import ResultIdentity  # noqa: E402

CALLS = 40
STEP, CV, FAIL_RATE = 0.05, 0.02, 0.02
STEP_SHARE = 0.8  #: the step comes at run 400 of 500
TARGET_IMPORT_S, TARGET_IMPORT_CPU_S, TARGET_IMPORT_MB = 60.0, 45.0, 500
STEP_MIN_RUNS = 10  #: --rows makes at least twice as many runs
TARGET_APPEND_S = 5.0
TARGET_MEDIAN_S, TARGET_P95_S = 0.100, 0.250
TARGET_FIRST_SCREEN_S = 1.0
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
REASON = "model script exited with code 1: out of memory"
START = datetime.datetime(2025, 1, 1, 2, tzinfo=datetime.timezone.utc)


# --- the data ------------------------------------------------------------------------------------

#: the models with several configs (tag_configs): the first n/20 models have CONFIGS each, so that
#: half the series belong to them (2,000 series: 100 models x 10 configs, then 1,000 models x 1)
CONFIGS = 10
T975 = {2: 4.303}  #: t(0.975, n-1) of the repeats the rows have
FAMILIES = ("huggingface_bert", "huggingface_gpt2", "torchvision_resnet", "megatron_llama", "vllm_mixtral",
            "timm_vit", "deepspeed_opt", "flash_attention")
METRICS = ("samples_per_second", "tokens_per_second", "images_per_second")


@dataclasses.dataclass(frozen=True)
class Series:
    """One result series of the benchmark: a model, one of its configs."""

    index: int
    model: str
    config: str  #: its tag_configs ('' for a model of one config)
    metric: str
    base: float  #: its figure before any step

    def identity(self) -> ResultIdentity:
        return ResultIdentity(model=self.model, metric=self.metric, tag_configs=self.config, executor="docker",
                              gpu_vendor="AMD", gpu_architecture="gfx942", n_gpus="8")


def layout(n_series: int) -> list[Series]:
    """The series: CONFIGS configs of each of the first n/(2*CONFIGS) models, then one per model."""
    multi = n_series // (2 * CONFIGS)
    out = []
    for k in range(n_series):
        model, config = (k // CONFIGS, f"batch_size={2 ** (k % CONFIGS)}") if k < multi * CONFIGS \
            else (multi + k - multi * CONFIGS, "")
        name = f"pyt_{FAMILIES[model % len(FAMILIES)]}_{model:04d}"
        out.append(Series(k, name, config, METRICS[model % len(METRICS)], 100.0 + model % 97 + 3 * (k % CONFIGS)))
    return out


def multi_config_models(n_series: int) -> list[str]:
    """The models with CONFIGS configs (the model-wide trend's case)."""
    return sorted({s.model for s in layout(n_series) if s.config})


def steps(n_series: int) -> set[int]:
    """The 20 series whose figure rises by STEP from run step_at(runs) on (every n/20th)."""
    return set(range(0, n_series, max(n_series // 20, 1)))


def run_of(run: int) -> tuple[str, str, str]:
    """(run id, started_at, git commit) of run ``run``: one a day."""
    day = START + datetime.timedelta(days=run)
    return f"{day:%Y%m%d}-020000-{run:06x}", day.isoformat(timespec="seconds"), f"{run * 7919 + 1:040x}"[-40:]


def step_at(n_runs: int) -> int:
    return int(n_runs * STEP_SHARE)


def figures(n_series: int, n_runs: int, runs: range, seed: int = 7):
    """(run, series, figure or None for a failure), run by run: the same for perf.csv and asv."""
    rng = random.Random(seed + runs.start)
    stepped = steps(n_series)
    every = layout(n_series)
    for run in runs:
        for series in every:
            base = series.base * (1 + STEP if series.index in stepped and run >= step_at(n_runs) else 1)
            failed = rng.random() < FAIL_RATE
            value = base * rng.lognormvariate(0, CV)
            yield run, series, None if failed else value


def _hex(seed: str, digits: int = 64) -> str:
    return hashlib.sha256(seed.encode()).hexdigest()[:digits]


def _series_cells(series: Series) -> dict[str, str]:
    """The cells a run fills alike for every row of one series (a real row of ``madengine run``)."""
    family = FAMILIES[int(series.model.rsplit("_", 1)[1]) % len(FAMILIES)]
    image = f"ci-{series.model}"
    data = {"dataname": "wikitext-103", "data_provider_type": "local", "data_size": "539M",
            "data_download_duration": "4.21"} if "bert" in family else {}
    launcher = {"launcher": "torchrun", "world_size": "8", "nnodes": "1", "nproc_per_node": "8"} \
        if family.startswith(("megatron", "deepspeed")) else {}
    return {
        "model": series.model, "n_gpus": "8", "training_precision": ("fp16", "bf16", "fp32")[series.index % 3],
        "args": f"--batch-size {2 ** (series.index % CONFIGS)} --seq-len 512" if series.config else "",
        "tags": f"pyt,{family.split('_')[0]},nightly", "docker_file": f"docker/pyt_{family.split('_')[0]}.Dockerfile",
        "base_docker": "rocm/pytorch:latest",
        "docker_image": image, "gpu_architecture": "gfx942", "metric": series.metric, "build_number": "0",
        "executor": "docker", "gpu_vendor": "AMD", "tag_configs": series.config,
        "context": json.dumps({"gpu_architecture": "gfx942", "gpu_product_name": "AMD Instinct MI300X",
                               "gpu_vendor": "AMD", "guest_os": "UBUNTU", "host_os": "HOST_UBUNTU",
                               "system_ngpus": 8}),
        "madengine_version": "2.0.0", "precision_source": "declared",
        "framework_versions": json.dumps({"python": "3.10.14", "torch": "2.3.0+rocm6.2"}),
        "thread_settings": json.dumps({"cpus": 128}),
        **data, **launcher}


def _run_cells(run: int) -> dict[str, str]:
    run_id, _, commit = run_of(run)
    return {"run_id": run_id, "git_commit": commit, "machine_name": f"node-a{run % 4:02d}",
            "command_line": "madengine run --tags nightly",
            "docker_sha": f"sha256:{_hex(f'base{run // 7}')}", "image_id": f"sha256:{_hex(f'image{run // 7}')}"}


def _measured_cells(value: float, repeats: int, rng: random.Random) -> dict[str, str]:
    """performance (the median of the repeats) and the statistics `run --repeat N` writes beside it."""
    samples = sorted([round(value, 4), *(round(value * rng.lognormvariate(0, CV / 3), 4) for _ in range(repeats - 1))])
    median, mean = samples[len(samples) // 2], statistics.fmean(samples)
    cells = {"status": "SUCCESS", "performance": f"{median:.4f}", "perf_n": str(repeats), "perf_mean": f"{mean:.6g}",
             "perf_min": f"{samples[0]:.6g}", "perf_max": f"{samples[-1]:.6g}", "perf_samples": json.dumps(samples),
             "warmup_runs": "1"}
    if repeats > 1:
        stddev = statistics.stdev(samples)
        half = T975[repeats - 1] * stddev / repeats ** 0.5
        cells.update(perf_stddev=f"{stddev:.6g}", perf_cv=f"{stddev / mean:.6g}", perf_ci95_low=f"{mean - half:.6g}",
                     perf_ci95_high=f"{mean + half:.6g}")
    return cells


def perf_rows(n_series: int, n_runs: int, runs: range):
    """perf.csv rows (cells in ALL_COLUMNS order) as `madengine run --repeat 3` fills them."""
    rng = random.Random(11 + runs.start)
    fixed = {s.index: _series_cells(s) for s in layout(n_series)}
    order = {name: k for k, name in enumerate(ALL_COLUMNS)}
    current, per_run = None, {}
    for run, series, value in figures(n_series, n_runs, runs):
        if run != current:
            current, per_run = run, _run_cells(run)
            started = START + datetime.timedelta(days=run)
        started += datetime.timedelta(seconds=70)
        cells = {**fixed[series.index], **per_run, "started_at": started.isoformat(timespec="seconds"),
                 "trace_id": _hex(f"{run}:{series.index}", 32), "build_duration": f"{0.01 + series.index % 7 / 1000:.3f}",
                 "test_duration": f"{60 + series.index % 50 + rng.random():.3f}",
                 "host_load_start": f"{rng.random() / 10:.2f}", "host_load_end": f"{rng.random() / 10:.2f}",
                 "artifacts": f"runs/{per_run['run_id']}/{fixed[series.index]['docker_image']}/run.log"}
        # the models of several configs run with --repeat 3, the others once
        measured = _measured_cells(value, 3 if series.config else 1, rng) if value is not None else None
        cells.update(measured or {"status": "FAILURE", "reason": REASON})
        row = [""] * len(ALL_COLUMNS)
        for name, text in cells.items():
            row[order[name]] = text
        yield row


def write_perf_csv(path: Path, n_series: int, n_runs: int, runs: range, mode: str = "w") -> None:
    with open(path, mode, newline="") as handle:
        writer = csv.writer(handle, lineterminator="\n")
        if mode == "w":
            writer.writerow(ALL_COLUMNS)
        writer.writerows(perf_rows(n_series, n_runs, runs))


def asv_name(series: Series) -> str:
    return f"nightly.track_{series.model}" + (f"_{series.config.replace('=', '_')}" if series.config else "")


def write_asv_project(folder: Path, n_series: int, n_runs: int) -> None:
    """The same figures as an asv project: a git repository of one commit per run, benchmarks.json,
    one result file per commit (asv's result format 2), asv.conf.json."""
    repo, results = folder / "repo", folder / "results"
    machine = results / "bench-node"
    machine.mkdir(parents=True)
    subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], check=True)
    stream = []
    for run in range(n_runs):
        stamp = int((START + datetime.timedelta(days=run)).timestamp())
        message = f"run {run}\n".encode()
        stream.append(b"commit refs/heads/main\n" + f"mark :{run + 1}\ncommitter bench <b@x> {stamp} +0000\n".encode()
                      + f"data {len(message)}\n".encode() + message + (f"from :{run}\n".encode() if run else b"") + b"\n")
    subprocess.run(["git", "fast-import", "--quiet"], input=b"".join(stream), cwd=repo, check=True)
    hashes = subprocess.run(["git", "rev-list", "--reverse", "main"], cwd=repo, capture_output=True, text=True,
                            check=True).stdout.split()
    names = [asv_name(series) for series in layout(n_series)]
    benchmarks = {name: {"code": "", "name": name, "param_names": [], "params": [], "timeout": 60, "type": "track",
                         "unit": "samples/s", "version": "1", "pretty_name": name} for name in names}
    (results / "benchmarks.json").write_text(json.dumps({**benchmarks, "version": 2}))
    (machine / "machine.json").write_text(json.dumps({"machine": "bench-node", "arch": "x86_64", "cpu": "bench",
                                                      "num_cpu": "2", "os": "Linux", "ram": "24GB", "version": 1}))
    current, values = None, {}

    def flush(run: int) -> None:
        date = int((START + datetime.timedelta(days=run)).timestamp() * 1000)
        data = {"commit_hash": hashes[run], "env_name": "existing-py", "date": date,
                "params": {"machine": "bench-node", "python": "3.11"}, "python": "3.11", "requirements": {},
                "env_vars": {}, "result_columns": ["result", "params", "version", "started_at", "duration"],
                "results": {names[m]: [[v], [], "1", date, 1.0] for m, v in values.items()}, "durations": {},
                "version": 2}
        (machine / f"{hashes[run][:8]}-existing-py.json").write_text(json.dumps(data))

    for run, series, value in figures(n_series, n_runs, range(n_runs)):
        if current is not None and run != current:
            flush(current)
            values = {}
        current = run
        values[series.index] = value
    flush(current)
    (folder / "asv.conf.json").write_text(json.dumps({
        "version": 1, "project": "madengine-nightly", "project_url": "http://localhost/", "repo": str(repo),
        "branches": ["main"], "environment_type": "existing", "results_dir": str(results),
        "html_dir": str(folder / "html"), "benchmark_dir": str(folder / "benchmarks")}))


# --- processes, timed ----------------------------------------------------------------------------

def _children() -> dict[int, list[int]]:
    """Every process's children (by /proc/*/stat)."""
    found: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                with open(f"/proc/{entry.name}/stat", "rb") as handle:
                    parent = int(handle.read().rsplit(b")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            found.setdefault(parent, []).append(int(entry.name))
    return found


def tree_pss_mb(root: int) -> float:
    """The PSS of ``root`` and all its descendants together (/proc/PID/smaps_rollup), MB: shared pages
    count once over the tree, as they do in the machine's memory."""
    children, total, todo = _children(), 0, [root]
    while todo:
        pid = todo.pop()
        todo += children.get(pid, [])
        try:
            with open(f"/proc/{pid}/smaps_rollup") as handle:
                total += next(int(line.split()[1]) for line in handle if line.startswith("Pss:"))
        except (OSError, StopIteration):
            continue  # ended meanwhile
    return total / 1024


@dataclasses.dataclass
class Timed:
    """A command run to its end: wall and CPU seconds (its processes, workers included: wait4), the
    peak RSS of its largest process (wait4), the peak PSS of all its processes together (sampled
    every SAMPLE_S), the load average of the machine while it ran."""

    wall: float
    cpu: float
    rss_mb: float
    pss_mb: float
    load: float
    out: str
    err: str


SAMPLE_S = 0.2


def timed(argv: list[str], cwd: Path | None = None) -> Timed:
    """``argv`` run to its end, measured (:class:`Timed`). On a shared machine the CPU seconds and the
    memory say more than the wall time; the load says how shared it was."""
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    load_before = os.getloadavg()[0]
    started = time.perf_counter()
    process = subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err, peak = [], [], [0.0]
    done = threading.Event()

    def sample() -> None:
        while not done.wait(SAMPLE_S):
            peak[0] = max(peak[0], tree_pss_mb(process.pid))

    threads = [threading.Thread(target=lambda: out.append(process.stdout.read())),
               threading.Thread(target=lambda: err.append(process.stderr.read())), threading.Thread(target=sample)]
    for thread in threads:
        thread.start()
    _, status, usage = os.wait4(process.pid, 0)
    wall = time.perf_counter() - started
    done.set()
    process.returncode = os.waitstatus_to_exitcode(status)
    for thread in threads:
        thread.join()
    if process.returncode != 0:
        raise SystemExit(f"{' '.join(argv[:4])}... failed ({process.returncode}):\n{''.join(err)[-3000:]}")
    load = max(load_before, os.getloadavg()[0])
    return Timed(wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, peak[0], load, "".join(out), "".join(err))


def update_table(perf_csv: Path, db: Path) -> tuple[Timed, dict]:
    measured = timed([sys.executable, "-m", "madengine", "database", "update-table", "--csv-file-path", str(perf_csv),
                      "--db-url", f"sqlite:///{db}", "--json"])
    return measured, json.loads(measured.out)


def changes_found(db: Path, n_series: int, n_runs: int) -> tuple[int, int, int, int]:
    """(step series with an alert within 10 runs of the step, of them within 2 runs, alerts of the
    other series, alerts in all)."""
    every = layout(n_series)
    stepped = {every[k].identity().key() for k in steps(n_series)}
    connection = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    alerts = connection.execute("SELECT identity_key, after_run FROM dlm_table_alerts WHERE detected = 1").fetchall()
    connection.close()

    def near(runs: int) -> set[str]:
        return {run_of(r)[0] for r in range(step_at(n_runs) - runs, step_at(n_runs) + runs + 1)}

    found = {key for key, after in alerts if key in stepped and after in near(10)}
    placed = {key for key, after in alerts if key in stepped and after in near(2)}
    return len(found), len(placed), sum(key not in stepped for key, _ in alerts), len(alerts)


# --- the import's floor --------------------------------------------------------------------------

@dataclasses.dataclass
class Floor:
    """CPU seconds of the work no import of these rows can leave out, each done by a minimal loop in
    this process with what CPython, SQLite and madengine's C part offer: splitting the file's lines
    into cells, the content key of every row (its non-empty cells as sorted JSON, SHA-256), SQLite taking the rows through one prepared
    INSERT into an empty table and building its four indexes after, and the change detection of every
    series (E-divisive over its figures). The import's own work beyond these (checks, occurrence
    numbers, relative_change, the summary tables, the series read back, alerts, verdicts) is the rest
    of its CPU."""

    csv: float = 0.0
    keys: float = 0.0
    insert: float = 0.0
    indexes: float = 0.0
    changes: float = 0.0

    @property
    def total(self) -> float:
        return self.csv + self.keys + self.insert + self.indexes + self.changes


def measure_floor(perf: Path, work: Path, n_series: int, n_runs: int) -> Floor:
    import itertools
    import operator

    import orjson

    from madengine.stats.changepoint import detect

    try:  # what the import reads with: its C part where it was built, else the csv module and orjson
        from madengine.database._fastrows import key_text, split_line
    except ImportError:
        key_text = split_line = None

    floor, clock = Floor(), time.process_time
    db = work / "floor.db"
    db.unlink(missing_ok=True)
    connection = sqlite3.connect(db)
    with open(perf, newline="", encoding="utf-8") as handle:
        reader = csv.reader(handle, strict=True)
        header = next(reader)
        order = sorted(range(len(header)), key=header.__getitem__)
        names, pick = [header[k] for k in order], operator.itemgetter(*order)
        if split_line is not None:  # every line of these rows is a plain one
            reader = map(split_line, handle, itertools.repeat(csv.field_size_limit()))
        if key_text is not None:
            key_names = tuple(orjson.dumps(name) + b":" for name in names)
            make_key = functools.partial(key_text, key_names)
        else:
            def make_key(cells: tuple[str, ...]) -> bytes:
                return orjson.dumps(dict(itertools.compress(zip(names, cells), cells)))
        columns = ", ".join(f'"{name}" TEXT' for name in header)
        connection.execute(f"CREATE TABLE t (id INTEGER PRIMARY KEY AUTOINCREMENT, row_key TEXT NOT NULL, "
                           f"created_date TEXT, {columns}, extra_columns TEXT, identity_key TEXT)")
        statement = f"INSERT INTO t VALUES (NULL, {', '.join('?' * (len(header) + 4))})"
        connection.execute(f"PRAGMA cache_size = -{128 * 1024}")
        connection.execute("BEGIN")
        while True:
            started = clock()
            rows = list(itertools.islice(reader, 5000))
            floor.csv += clock() - started
            if not rows:
                break
            started = clock()
            keys = [hashlib.sha256(make_key(cells)).hexdigest() for cells in map(pick, rows)]
            floor.keys += clock() - started
            started = clock()
            connection.executemany(statement, [(key, "", *cells, "", key) for key, cells in zip(keys, rows)])
            floor.insert += clock() - started
    started = clock()
    for index in ("UNIQUE INDEX k ON t (row_key)", "INDEX g ON t (model, gpu_architecture, base_docker, status)",
                  "INDEX r ON t (run_id)", "INDEX i ON t (identity_key, status)"):
        connection.execute(f"CREATE {index}")
    connection.commit()
    floor.indexes = clock() - started
    connection.close()
    db.unlink()
    series: dict[int, list[float]] = {}
    for _, one, value in figures(n_series, n_runs, range(n_runs)):
        if value is not None:
            series.setdefault(one.index, []).append(value)
    started = clock()
    for values in series.values():
        detect(values)
    floor.changes = clock() - started
    return floor


# --- the dashboard -------------------------------------------------------------------------------

class Server:
    def __init__(self, db: Path) -> None:
        env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
        self.process = subprocess.Popen([sys.executable, "-m", "madengine", "report", "serve", "--db-url", f"sqlite:///{db}",
                                         "--port", "0"], stderr=subprocess.PIPE, text=True, env=env)
        line = self.process.stderr.readline()
        found = re.search(r"(http://127\.0\.0\.1:\d+/)", line)
        if not found:
            raise SystemExit(f"the server did not start: {line}{self.process.stderr.read()}")
        self.base = found.group(1).rstrip("/")
        self.rss_peak = 0
        self.errors: list[str] = []
        threading.Thread(target=lambda: self.errors.extend(self.process.stderr), daemon=True).start()

    def get(self, path: str) -> tuple[float, bytes]:
        started = time.perf_counter()
        try:
            with urllib.request.urlopen(self.base + path, timeout=60) as response:
                body = response.read()
        except urllib.error.HTTPError as error:
            raise SystemExit(f"{path}: HTTP {error.code}\n{''.join(self.errors[-40:])}") from None
        elapsed = time.perf_counter() - started
        self.sample_rss()
        return elapsed, body

    def sample_rss(self) -> int:
        with open(f"/proc/{self.process.pid}/status") as handle:
            rss = next(int(line.split()[1]) * 1024 for line in handle if line.startswith("VmRSS:"))
        self.rss_peak = max(self.rss_peak, rss)
        return rss

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=30)


def quantiles(times: list[float]) -> tuple[float, float]:
    ordered = sorted(times)
    return statistics.median(ordered), ordered[min(len(ordered) - 1, int(round(0.95 * (len(ordered) - 1))))]


def measure_api(server: Server, n_series: int, runs: list[str]) -> list[tuple[str, float, float, float]]:
    """(call, first, median, p95) per call the pages make, each with CALLS different arguments."""
    q = urllib.parse.quote
    every = layout(n_series)
    keys = [series.identity().key() for series in every]
    models = sorted({series.model for series in every})
    single = sorted({series.model for series in every if not series.config})
    several = multi_config_models(n_series)  # the model-wide trend: CONFIGS series on one page
    calls = {
        "/api/overview": lambda k: "/api/overview" + ("" if k % 2 else f"?page={k % 5 + 1}"),
        "/api/overview?sort=vs_baseline": lambda k: f"/api/overview?sort=vs_baseline&order={'asc' if k % 2 else 'desc'}",
        "/api/overview?status=FAILURE&model=…": lambda k: f"/api/overview?status=FAILURE&model={models[k % len(models)][:-1]}",
        "/api/identities?gpu_architecture=…": lambda k: f"/api/identities?gpu_architecture=gfx942&page={k % 8 + 1}",
        "/api/series?identity=…": lambda k: "/api/series?identity=" + q(keys[(k * 37) % len(keys)]),
        "/api/trend?model=…&machine=… (one config)": lambda k: f"/api/trend?model={single[(k * 13) % len(single)]}"
                                                                 f"&machine=node-a{k % 4:02d}",
        f"/api/trend?model=… ({CONFIGS} configs)": lambda k: f"/api/trend?model={several[(k * 7) % len(several)]}",
        "/api/runs": lambda k: f"/api/runs?page={k % 5 + 1}",
        "/api/run?run=…": lambda k: "/api/run?run=" + q(runs[(k * 7) % len(runs)]),
        "/api/compare?old=…&new=…": lambda k: f"/api/compare?old={q(runs[(k * 11) % (len(runs) - 1)])}"
                                              f"&new={q(runs[(k * 11) % (len(runs) - 1) + 1])}",
        "/api/changes": lambda k: "/api/changes" + ("" if k % 2 else "?kind=regression"),
        "/api/alerts": lambda k: "/api/alerts" + ("" if k % 2 else "?state=untriaged&sort=weight"),
        "/api/version": lambda k: "/api/version",
        "page /": lambda k: "/" + ("" if k % 2 else "?status=FAILURE"),
        "page /trend?identity=…": lambda k: "/trend?identity=" + q(keys[(k * 53) % len(keys)]),
        f"page /trend?model=… ({CONFIGS} configs)": lambda k: f"/trend?model={several[(k * 11) % len(several)]}",
        "page /run?run=…": lambda k: "/run?run=" + q(runs[(k * 3) % len(runs)]),
        "page /compare": lambda k: f"/compare?old={q(runs[(k * 5) % (len(runs) - 2)])}&new={q(runs[(k * 5) % (len(runs) - 2) + 2])}",
        "page /runs": lambda k: "/runs",
        "page /changes": lambda k: "/changes" + ("" if k % 2 else "?state=untriaged"),
    }
    results = []
    for name, make in calls.items():
        times = [server.get(make(k))[0] for k in range(CALLS)]
        median, p95 = quantiles(times)
        results.append((name, times[0], median, p95))
    return results


def first_screen_in_chromium(base: str) -> list[tuple[float, float]]:
    """(seconds from navigation to the load event, to the first contentful paint) of the overview, 5 loads."""
    from playwright.sync_api import sync_playwright

    seconds = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
        for _ in range(5):
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.goto(base + "/", wait_until="load")
            page.wait_for_selector("html[data-ready='1']")
            timing = page.evaluate("() => { const n = performance.getEntriesByType('navigation')[0];"
                                   " const p = performance.getEntriesByName('first-contentful-paint')[0];"
                                   " return [n.startTime, n.loadEventEnd, p ? p.startTime : n.loadEventEnd]; }")
            seconds.append(((timing[1] - timing[0]) / 1000, (timing[2] - timing[0]) / 1000))
            page.close()
        browser.close()
    return seconds


# --- the run -------------------------------------------------------------------------------------

def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work", type=Path, default=None, help="keep the data here (default: a temporary folder)")
    parser.add_argument("--series", "--identities", type=int, default=2000, dest="series",
                        help="result series (default 2,000: half of them 10 configs of a model)")
    parser.add_argument("--runs", type=int, default=500, help="runs (default 500)")
    parser.add_argument("--rows", type=int, default=None,
                        help="rows in all instead of --runs (runs = rows / series), e.g. --rows 100000 for a quick run")
    parser.add_argument("--no-asv", action="store_true", help="leave asv publish out")
    parser.add_argument("--no-browser", action="store_true", help="leave the first screen in Chromium out")
    parser.add_argument("--floor", action="store_true",
                        help="also measure the import's floor: its unavoidable parts as minimal loops (Floor)")
    parser.add_argument("--imports", type=int, default=1,
                        help="import the perf.csv this many times, each into a new database, and judge the median "
                             "CPU one (default 1; the range is printed)")
    parser.add_argument("--dashboard-only", action="store_true",
                        help="measure only the dashboard, over the database an earlier run left in --work")
    args = parser.parse_args()
    runs = max(args.rows // args.series, 2 * STEP_MIN_RUNS) if args.rows else args.runs
    with tempfile.TemporaryDirectory(prefix="dashboard-scale-") as tmp:
        work = args.work or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        if args.dashboard_only:
            return dashboard_only(work / "results.db", args.series, not args.no_browser)
        return run(work, args.series, runs, not args.no_asv, not args.no_browser, args.floor, max(args.imports, 1))


def prepare(work: Path, n_series: int, n_runs: int, with_asv: bool) -> tuple[Path, Path, Path | None]:
    """The perf.csv of ``n_runs`` runs, the file of the next run alone, the asv project (made once per size)."""
    perf, nightly, asv = work / f"perf-{n_series}x{n_runs}.csv", work / f"next-{n_series}x{n_runs}.csv", None
    if not perf.exists():
        print(f"writing {n_series * n_runs:,} rows to {perf} ...", file=sys.stderr, flush=True)
        write_perf_csv(perf.with_suffix(".tmp"), n_series, n_runs, range(n_runs))
        perf.with_suffix(".tmp").rename(perf)
        write_perf_csv(nightly, n_series, n_runs, range(n_runs, n_runs + 1))
    if with_asv:
        if importlib.util.find_spec("asv") is None:
            print("asv is not installed (pip install asv): asv publish is left out", file=sys.stderr)
            return perf, nightly, None
        asv = work / f"asv-{n_series}x{n_runs}"
        if not (asv / "asv.conf.json").exists():
            print(f"writing the asv project {asv} ...", file=sys.stderr, flush=True)
            shutil.rmtree(asv, ignore_errors=True)
            write_asv_project(asv, n_series, n_runs)
    return perf, nightly, asv


def run(work: Path, n_series: int, n_runs: int, with_asv: bool, with_browser: bool, with_floor: bool = False,
        repeat: int = 1) -> int:
    perf, nightly, asv = prepare(work, n_series, n_runs, with_asv)
    db, growing = work / "results.db", work / "growing.csv"
    for stale in (db, db.with_suffix(".db-journal"), growing):
        stale.unlink(missing_ok=True)
    shutil.copyfile(perf, growing)  # the perf.csv the next run appends to (the original stays for the next time)
    imports = []
    for k in range(repeat):
        print(f"importing ({k + 1} of {repeat}) ...", file=sys.stderr, flush=True)
        for stale in (db, db.with_suffix(".db-journal")):
            stale.unlink(missing_ok=True)
        imports.append(update_table(growing, db))
    # the CPU seconds of one import vary by about 10 % between runs on a shared virtual machine: the median says more
    imported, first = sorted(imports, key=lambda pair: pair[0].cpu)[(repeat - 1) // 2]
    spread = [measured for measured, _ in imports]
    publish = None
    if asv is not None:
        print("asv publish ...", file=sys.stderr, flush=True)
        shutil.rmtree(asv / "html", ignore_errors=True)
        publish = timed([sys.executable, "-m", "asv", "publish", "--no-pull", "--config", str(asv / "asv.conf.json")],
                        cwd=asv)
    print("appending the next run and importing again ...", file=sys.stderr, flush=True)
    with open(growing, "ab") as handle, open(nightly, "rb") as run_rows:
        run_rows.readline()  # its header: the run's rows go after the file's own
        shutil.copyfileobj(run_rows, handle)
    appended, after = update_table(growing, db)
    found, placed, false, alerts = changes_found(db, n_series, n_runs)
    if with_floor:
        print("the import's floor ...", file=sys.stderr, flush=True)
    floor = measure_floor(perf, work, n_series, n_runs) if with_floor else None
    api, screen, server, rss_now, complete = measure_dashboard(db, n_series, with_browser)
    return report(locals())


def measure_dashboard(db: Path, n_series: int, with_browser: bool) -> tuple[list, list, Server, int, bool]:
    server = Server(db)
    try:
        runs = [r["run_id"] for r in json.loads(server.get("/api/runs?per_page=500")[1])["items"]]
        complete = json.loads(server.get("/api/changes?per_page=1")[1])["complete"]
        api = measure_api(server, n_series, runs)
        screen = first_screen_in_chromium(server.base) if with_browser else []
        rss_now = server.sample_rss()
    finally:
        server.stop()
    return api, screen, server, rss_now, complete


def dashboard_only(db: Path, n_series: int, with_browser: bool) -> int:
    if not db.exists():
        raise SystemExit(f"{db}: no database yet: run without --dashboard-only first")
    load = os.getloadavg()[0]
    api, screen, server, rss_now, _ = measure_dashboard(db, n_series, with_browser)
    failed = print_dashboard(api, screen, server, rss_now, max(load, os.getloadavg()[0]))
    print("all targets met" if not failed else f"MISSED: {', '.join(failed)}")
    return 1 if failed else 0


def print_dashboard(api: list, screen: list, server: Server, rss_now: int, load: float) -> list[str]:
    failed = []
    print(f"  every API call and page, each {CALLS} times with other arguments (target: median <= "
          f"{TARGET_MEDIAN_S * 1000:.0f} ms, p95 <= {TARGET_P95_S * 1000:.0f} ms); load average {load:.1f}")
    print(f"  {'call':44} {'first ms':>9} {'median ms':>10} {'p95 ms':>8}")
    for name, first, median, p95 in api:
        ok = median <= TARGET_MEDIAN_S and p95 <= TARGET_P95_S
        failed += [] if ok else [name]
        print(f"  {name:44} {first * 1000:9.1f} {median * 1000:10.1f} {p95 * 1000:8.1f}   {'ok' if ok else 'MISSED'}")
    if screen:
        load_s = statistics.median(s[0] for s in screen)
        paint = statistics.median(s[1] for s in screen)
        ok = max(s[0] for s in screen) <= TARGET_FIRST_SCREEN_S
        failed += [] if ok else ["first screen"]
        print(f"  first screen in Chromium (the overview, 5 loads): load event median {load_s:.2f} s "
              f"(max {max(s[0] for s in screen):.2f} s), first contentful paint {paint:.2f} s   "
              f"{'ok' if ok else 'MISSED'} (target <= {TARGET_FIRST_SCREEN_S:.0f} s)")
    print(f"  server RSS: peak {server.rss_peak / 2**20:.0f} MB, at the end {rss_now / 2**20:.0f} MB")
    return failed


def _measured_line(name: str, measured: Timed, verdict: str) -> str:
    return (f"  {name:46} {measured.wall:8.1f} {measured.cpu:7.1f} {measured.pss_mb:8.0f} {measured.rss_mb:8.0f} "
            f"{measured.load:5.1f}   {verdict}")


def report(m: dict) -> int:
    n, runs = m["n_series"], m["n_runs"]
    rows, imported, appended = n * runs, m["imported"], m["appended"]
    failed = []

    def check(ok: bool, name: str) -> str:
        failed.extend([] if ok else [name])
        return "ok" if ok else "MISSED"

    size = m["perf"].stat().st_size
    print(f"results history of {rows:,} rows ({n:,} series: {len(multi_config_models(n))} models x {CONFIGS} configs "
          f"and {n - CONFIGS * len(multi_config_models(n)):,} models of one; {runs} runs; rows as `madengine run` fills "
          f"them, {size / rows:.0f} bytes a row; CV 2 %, a 5 % step in {len(steps(n))} series at run {step_at(runs)}, "
          f"2 % failures); SQLite; {os.cpu_count()} cores")
    print(f"  {'':46} {'wall s':>8} {'CPU s':>7} {'PSS MB':>8} {'RSS MB':>8} {'load':>5}")
    print("  (CPU: all its processes; PSS: all its processes together, peak of samples every "
          f"{SAMPLE_S} s; RSS: its largest process; load: the machine's 1-minute load average)")
    ok = imported.wall <= TARGET_IMPORT_S and imported.cpu <= TARGET_IMPORT_CPU_S and imported.pss_mb <= TARGET_IMPORT_MB
    print(_measured_line(f"madengine database update-table ({rows:,} rows)", imported,
                         f"{check(ok, 'import')} (target <= {TARGET_IMPORT_S:.0f} s wall, <= {TARGET_IMPORT_CPU_S:.0f} s "
                         f"CPU, <= {TARGET_IMPORT_MB} MB)"))
    if len(m["spread"]) > 1:
        cpus, walls = sorted(t.cpu for t in m["spread"]), sorted(t.wall for t in m["spread"])
        print(f"  {'':46} (the median of {len(cpus)} imports; CPU {', '.join(f'{c:.1f}' for c in cpus)} s, "
              f"wall {walls[0]:.1f}-{walls[-1]:.1f} s)")
    publish = m["publish"]
    if publish is not None:
        print(_measured_line("asv publish (the same data)", publish,
                             f"(madengine/asv: {imported.wall / publish.wall:.2f}x the time, "
                             f"{imported.cpu / publish.cpu:.2f}x the CPU, {imported.pss_mb / publish.pss_mb:.2f}x the memory)"))
    resumed = m["after"]["unread"] == rows and m["after"]["inserted"] == n
    print(_measured_line(f"the next run appended ({rows + n:,} rows)", appended,
                         f"{check(appended.wall <= TARGET_APPEND_S and resumed, 'append')} (target <= "
                         f"{TARGET_APPEND_S:.0f} s wall; {m['after']['unread']:,} rows not read again, "
                         f"{m['after']['inserted']:,} inserted; change detection complete: {check(m['complete'], 'complete')})"))
    floor = m["floor"]
    if floor is not None:
        print(f"  the import's floor (its unavoidable parts as minimal loops in one process, CPU s; load "
              f"{os.getloadavg()[0]:.1f}): lines split {floor.csv:.1f}, content keys {floor.keys:.1f}, SQLite inserts "
              f"{floor.insert:.1f} and indexes {floor.indexes:.1f}, change detection {floor.changes:.1f}: "
              f"{floor.total:.1f} s; the import's own work beyond them {imported.cpu - floor.total:.1f} s")
    print(f"  changes: {m['found']} of {len(steps(n))} step series found ({m['placed']} within 2 runs of the step); "
          f"{m['false']} alert(s) among the {n - len(steps(n)):,} others; {m['alerts']} in all, over "
          f"{m['first']['series']:,} series")
    failed += print_dashboard(m["api"], m["screen"], m["server"], m["rss_now"], max(imported.load, appended.load))
    print("all targets met" if not failed else f"MISSED: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
