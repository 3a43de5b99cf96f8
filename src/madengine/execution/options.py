"""Typed options of a run and of image builds (what the CLI flags say, already checked), and the
tables of their flags.

Option groups are split by who reads them: :class:`RunOptions` (running models) and
:class:`BuildOptions` (building images) here; transport, parallel and Slurm options live with the
code that reads them in :mod:`madengine.distributed.options`. :data:`RUN_FLAGS`,
:data:`IMAGE_FLAGS` and :data:`CONTEXT_FLAGS` build the parser of ``madengine run`` (and ``build``)
and the argv of a run that runs elsewhere (a Slurm task): :mod:`madengine.core.flagtable`.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from madengine.core.flagtable import Flag, boolean, timeout, whole

DEFAULT_TIMEOUT = 7200
EXECUTORS = ("auto", "docker", "local", "slurm", "k8s")


@dataclasses.dataclass(frozen=True)
class BuildOptions:
    no_cache: bool = False  # --clean-docker-cache
    pull: bool = False
    rebuild: bool = False  # build even when an image of the same build inputs exists
    live_output: bool = False


@dataclasses.dataclass(frozen=True)
class RunOptions:
    tags: tuple[str, ...] = ()
    #: None → the model's ``timeout`` (else DEFAULT_TIMEOUT); 0 → never; N → N seconds
    timeout: int | None = None
    live_output: bool = False
    context_file: str | None = None
    context_string: str | None = None
    generate_sys_env_details: bool = False
    keep_alive: bool = False
    keep_model_dir: bool = False
    skip_model_run: bool = False
    disable_skip_gpu_arch: bool = False
    output: Path = Path("perf.csv")
    executor: str = "auto"  # auto | docker | local | slurm | k8s
    data_config_file_name: str = "data.json"
    tools_json_file_name: str | None = None
    force_mirror_local: str | None = None
    runs_dir: Path = Path("madengine_runs")
    #: the model repository (None: ``MODEL_DIR``, else the current folder)
    root: Path | None = None
    #: runs of the model step that count (None: the model's ``repeat`` field, else 1)
    repeat: int | None = None
    #: runs of the model step before those, discarded (warm-up)
    warmup_runs: int = 0
    trace: bool = True  # --no-trace turns it off
    trace_file: Path | None = None  # --trace FILE: the trace.json elsewhere than the run folder
    db_url: str | None = None  # --db-url: also record each row into this results database (else MADENGINE_DB_URL)

    def timeout_for(self, model_timeout: int | None) -> int | None:
        """Seconds allowed for the model script; None means no limit."""
        if self.timeout is not None:
            return None if self.timeout == 0 else self.timeout
        if model_timeout is not None:
            return None if model_timeout == 0 else model_timeout
        return DEFAULT_TIMEOUT


# -- their flags -----------------------------------------------------------------------------------
#: --clean-docker-cache, --rebuild, --pull: :class:`BuildOptions` (run and build)
IMAGE_FLAGS = (
    Flag(("--clean-docker-cache",), "clean_docker_cache", "rebuild images without the build cache", switch=True,
         field="no_cache"),
    Flag(("--rebuild",), "rebuild", "build images even when an image of the same build inputs exists (skipped by "
         "default)", switch=True),
    Flag(("--pull",), "pull", "pull base images even when present locally", switch=True),
)

#: the user's context (run and build; a Slurm task gets the job's context file instead)
CONTEXT_FLAGS = (
    Flag(("--additional-context", "-c"), "additional_context", "context overrides as JSON or a Python dict literal, "
         "e.g. \"{'gpu_vendor': 'AMD'}\"", metavar="DICT", field="context_string"),
    Flag(("--additional-context-file", "-f"), "additional_context_file", "context overrides from a JSON file "
         "(applied before --additional-context)", metavar="FILE", field="context_file"),
)

REPEAT = Flag(("--repeat",), "repeat", "run each model's script N times in the same container (default: the model's "
              "'repeat', else 1); performance is the median, with n, mean, stddev, CV, min, max and a 95%% CI",
              parse=whole(1), metavar="N")
WARMUP_RUNS = Flag(("--warmup-runs",), "warmup_runs", "run each model's script K times first and discard those runs "
                   "(default 0)", parse=whole(0), default=0, metavar="K")
TIMEOUT = Flag(("--timeout",), "timeout", "limit for each model script: -1 = the model's 'timeout' or 7200 s "
               "(default), 0 = never", parse=timeout, metavar="SECONDS")
LIVE_OUTPUT = Flag(("--live-output", "-l"), "live_output", "stream model and build output to stderr", switch=True)
#: what a run does beyond its models: :class:`RunOptions`, in the order of ``madengine run --help``
RUN_FLAGS = (
    Flag(("--generate-sys-env-details", "--sys-env-details"), "generate_sys_env_details", "collect host and "
         "container environment details into the run's artifacts", parse=boolean, default=False, bare=True,
         metavar="BOOL"),
    Flag(("--keep-alive",), "keep_alive", "keep containers (and work folders) after the run", switch=True),
    Flag(("--keep-model-dir",), "keep_model_dir", "keep each model's work folder after the run", switch=True),
    Flag(("--skip-model-run",), "skip_model_run", "build images only; rows are SKIPPED", switch=True),
    Flag(("--disable-skip-gpu-arch",), "disable_skip_gpu_arch", "run models despite their skip_gpu_arch",
         switch=True),
    Flag(("--executor",), "executor", "where models run: docker (default when an engine answers), local, slurm, or "
         "k8s (a Kubernetes job per model; the context's 'k8s' block says where and how)", default="auto",
         choices=EXECUTORS),
    Flag(("--runs-dir",), "runs_dir", "folder for per-run logs and artifacts (default: madengine_runs)",
         parse=Path, default=Path("madengine_runs"), metavar="DIR"),
    Flag(("--data-config-file-name",), "data_config_file_name", "data provider config", default="data.json",
         metavar="FILE"),
    Flag(("--tools-json-file-name", "--tools-config"), "tools_json_file_name", "tools config (default: tools.json "
         "of the model repository)", metavar="FILE"),
    Flag(("--force-mirror-local",), "force_mirror_local", "mirror every non-local data provider's data into DIR and "
         "reuse it", metavar="DIR"),
)
#: --trace FILE / --no-trace (run, bench, scorecard: one choice of two)
TRACE_FLAGS = (
    Flag(("--trace",), "trace_file", "write the command's trace (Chrome trace-event JSON, opens in ui.perfetto.dev) "
         "to FILE instead of <runs dir>/<run id>/trace.json", parse=Path, metavar="FILE"),
    Flag(("--no-trace",), "no_trace", "record no trace (the trace_id column stays empty)", switch=True,
         negated=True, field="trace"),
)
#: every flag of :class:`RunOptions`
RUN_OPTION_FLAGS = (REPEAT, WARMUP_RUNS, TIMEOUT, LIVE_OUTPUT, *CONTEXT_FLAGS, *RUN_FLAGS, *TRACE_FLAGS)
#: madengine run's own output, no option of the run's: no perf.html
NO_HTML = Flag(("--no-html",), "no_html", "do not write perf.html beside perf.csv", switch=True, field="")
