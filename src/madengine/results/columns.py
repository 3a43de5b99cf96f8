"""The one definition of the perf.csv columns in the whole code base.

``PERF_COLUMNS`` is the column set and order of the original madengine's perf.csv, which CI
pipelines and dashboards read by position and by name. madengine adds its own columns only at
the end (``EXTRA_COLUMNS``); per-result columns (e.g. from ``multiple_results`` CSVs or
``madengine bench`` statistics) come after those, in first-seen order.
"""

from __future__ import annotations

PERF_COLUMNS: tuple[str, ...] = (
    "model",
    "n_gpus",
    "training_precision",
    "pipeline",
    "args",
    "tags",
    "docker_file",
    "base_docker",
    "docker_sha",
    "docker_image",
    "git_commit",
    "machine_name",
    "gpu_architecture",
    "performance",
    "metric",
    "relative_change",
    "status",
    "build_duration",
    "test_duration",
    "dataname",
    "data_provider_type",
    "data_size",
    "data_download_duration",
    "build_number",
    "additional_docker_run_options",
)

#: a distributed job's row (madengine.results.aggregate; empty for other rows)
JOB_COLUMNS: tuple[str, ...] = (
    "launcher",  # torchrun, deepspeed, ... (madengine.launch)
    "world_size",  # nnodes × nproc_per_node: the job's ranks
    "nnodes",
    "nproc_per_node",
    "node_aggregation",  # how the nodes' figures made performance: sum | mean | max
    "node_n",  # the nodes whose figure counted
    "node_cv",  # their spread: sample stddev / |mean|, a fraction; empty below 2 nodes
    "node_performance",  # JSON list of each node's figure by node rank (null: the node printed none)
)

EXTRA_COLUMNS: tuple[str, ...] = (
    "reason",  # why a row is FAILURE or SKIPPED
    "run_id",  # one id per `madengine run` invocation (or Slurm job)
    "executor",  # docker | local | slurm | bench
    "started_at",  # ISO-8601 UTC time the model's run started
    "image_id",  # the image actually run (sha256:...)
    "gpu_vendor",  # AMD | NVIDIA | CPU
    "context",  # JSON of the detected/overridden context values that matter for the result
    "madengine_version",
    "command_line",  # the exact command line that produced the row
    "artifacts",  # ';'-separated paths of logs, tool outputs and other files of the run
    # result identity (madengine.results.identity) and repeated measurements (madengine.results.samples)
    "tag_configs",  # canonical tag configs the model was selected with: fast:size=64
    "backend",  # '' for run rows; onnxruntime-<provider>, scorecard backend ids, torch-eager
    "trace_id",  # 32 lowercase hex: the OpenTelemetry trace id of the run
    "perf_n",  # samples behind performance (repeats kept); performance is their median
    "perf_mean",
    "perf_stddev",  # sample standard deviation (n-1); empty for one sample
    "perf_cv",  # stddev / |mean|, a fraction
    "perf_min",
    "perf_max",
    "perf_ci95_low",  # 95 % CI: of the geometric mean (log-scale t) for positive figures, of the median (exact
    # bootstrap) for figures >= 0 with a zero, else of the mean (docs/statistics.md)
    "perf_ci95_high",
    "perf_samples",  # JSON list of every kept sample, in run order
    "warmup_runs",  # discarded runs before the kept ones
    # what tells two run rows apart (madengine.execution.provenance; docs/run.md "Provenance")
    "precision_source",  # reported (the model printed training_precision: X) | declared (models.json only) | ''
    "framework_versions",  # JSON: python, torch, torch_cuda/torch_hip, rocm, cuda, onnxruntime, ... in the image
    "thread_settings",  # JSON: OMP_NUM_THREADS and the like as the model saw them, and its CPUs
    "host_load_start",  # runnable tasks per logical CPU (madengine's own excluded) as the model's run began
    "host_load_end",  # ... and as it ended; above 1 the host was busier than its CPUs
    "warnings",  # '; '-separated notes: a busy host, an unstable figure, a contradicted precision
    *JOB_COLUMNS,
)

ALL_COLUMNS: tuple[str, ...] = PERF_COLUMNS + EXTRA_COLUMNS


class Status:
    SUCCESS = "SUCCESS"
    FAILURE = "FAILURE"
    SKIPPED = "SKIPPED"

    ALL = (SUCCESS, FAILURE, SKIPPED)
