"""The agreed names of spans and attributes: the run path emits them, trace-diff and the docs read them.

Span names are low-cardinality (what happened); what it happened to (the model, the repeat) is an
attribute. Attribute keys live under the ``madengine.`` namespace, as OpenTelemetry recommends for
names that no semantic convention covers.
"""

from __future__ import annotations

# --- root spans: one per command --------------------------------------------------------------
SPAN_RUN = "madengine.run"  #: ``madengine run``: context detection and every model are its children
SPAN_BUILD_COMMAND = "madengine.build"  #: ``madengine build``
SPAN_BENCH = "madengine.bench"  #: ``madengine bench``
SPAN_SCORECARD = "madengine.scorecard"  #: ``madengine scorecard`` (bench's comparison across backends)
SPAN_SERVE_BENCH = "madengine.serve_bench"  #: ``madengine serve-bench``

# --- one model ----------------------------------------------------------------------------------
SPAN_MODEL = "model"  #: one model (with its tag configs) in a run; the phases below are its children

# --- phases, in the order they happen ----------------------------------------------------------
SPAN_CONTEXT_DETECTION = "context_detection"  #: host detection + context merging (child of the run span)
SPAN_DATA_PROVISION = "data_provision"  #: data providers fetch and mount
SPAN_IMAGE_BUILD = "image_build"  #: docker build (or the manifest lookup / pull)
SPAN_CONTAINER_START = "container_start"  #: container created and started (docker executor)
SPAN_PRE_SCRIPTS = "pre_scripts"  #: every pre-script step (tools' and the context's)
SPAN_MODEL_STEP = "model_step"  #: the model's own step, once per repeat (``madengine.repeat`` = 1, 2, ...)
SPAN_POST_SCRIPTS = "post_scripts"  #: every post-script step
SPAN_PARSING = "parsing"  #: performance parsing and tool summaries (finalizers)
SPAN_RECORDING = "recording"  #: the locked append to perf.csv (and the database, when it records)

#: the phases ``report trace-diff`` lines up, in run order
PHASES = (SPAN_CONTEXT_DETECTION, SPAN_DATA_PROVISION, SPAN_IMAGE_BUILD, SPAN_CONTAINER_START, SPAN_PRE_SCRIPTS,
          SPAN_MODEL_STEP, SPAN_POST_SCRIPTS, SPAN_PARSING, SPAN_RECORDING)

# --- distributed work and benchmarking ---------------------------------------------------------
SPAN_SLURM_TASK = "slurm_task"  #: one task of a Slurm job array, as the submitting process sees it
SPAN_PARALLEL_SLOT = "parallel_slot"  #: one ``--parallel`` slot (a thread) working through its models
SPAN_ORT_MODEL_RUN = "ort.model_run"  #: one ONNX Runtime ``session.run`` from its profile

# --- phases of one benchmark (bench, scorecard: children of the model × backend's ``model`` span) --
# The portable harness (madengine.bench.harness, madengine.bench.backends) names its phases with
# these same strings; tests/test_tracing_bench.py checks that they agree.
SPAN_SESSION_CREATE = "session_create"  #: bench: the ONNX Runtime session created (graph optimised)
SPAN_PREPARE = "prepare"  #: scorecard, bench SCRIPT.py: the backend compiles / creates its session
SPAN_FIRST_INFERENCE = "first_inference"  #: the first inference, timed apart
SPAN_WARMUP = "warmup"  #: the other un-timed warm-up runs
SPAN_INFERENCE = "inference"  #: the timed (or profiled) session.run loop; ORT operators are its children
SPAN_PROFILE = "profile"  #: bench --profile: the separate profiling session (session_create, inference)
SPAN_CHECK = "check"  #: scorecard, bench SCRIPT.py: the outputs compared with the reference
SPAN_SCRIPT = "script"  #: bench SCRIPT.py: one script (analysis, builds and its models' benchmarks)
SPAN_ANALYSIS = "analysis"  #: bench SCRIPT.py: the script run under the analysis hook
SPAN_ONNX_BUILD = "onnx_build"  #: bench SCRIPT.py: one model's export and optimisation (or its cached build)

#: the phases of a benchmark that ``report trace-diff`` lines up, in order
BENCH_PHASES = (SPAN_SESSION_CREATE, SPAN_PREPARE, SPAN_FIRST_INFERENCE, SPAN_WARMUP, SPAN_INFERENCE, SPAN_PROFILE,
                SPAN_CHECK)
#: ORT node kernels keep their op type as the span name (``MatMul``, ``Conv``), category ``ort``

# --- a serving benchmark (serve-bench, or beside a serving model's model step) ---------------------
SPAN_SERVING_READY = "serving.ready"  #: the wait for the endpoint's /health or /v1/models
SPAN_SERVING_LOAD_POINT = "serving.load_point"  #: one load point (madengine.serving.load_point)
SPAN_SERVING_REQUEST = "serving.request"  #: one streamed request, with its real times (category serving)
ATTR_LOAD_POINT = "madengine.serving.load_point"  #: ``concurrency=4``, ``rate=2.5``

# --- attributes -------------------------------------------------------------------------------
ATTR_RUN_ID = "madengine.run_id"
ATTR_MODEL = "madengine.model"
ATTR_TAG_CONFIGS = "madengine.tag_configs"  #: the canonical text of results/identity (``fast:size=64``)
ATTR_IMAGE = "madengine.image"
ATTR_EXECUTOR = "madengine.executor"
ATTR_EXIT_CODE = "madengine.exit_code"
ATTR_STATUS = "madengine.status"  #: SUCCESS / FAILURE / SKIPPED, as in perf.csv
ATTR_REASON = "madengine.reason"
ATTR_PERFORMANCE = "madengine.performance"  #: the figure
ATTR_METRIC = "madengine.metric"
ATTR_REPEAT = "madengine.repeat"  #: 1-based repeat index of a model step
ATTR_BACKEND = "madengine.backend"  #: bench / scorecard: ``onnxruntime-cpu``, ``openvino-cpu``, ``torch-eager``
ATTR_SCORECARD_STATUS = "madengine.scorecard.status"  #: PASS / MISMATCH / UNSUPPORTED / ERROR
ATTR_LATENCY_RATIO = "madengine.latency_ratio"  #: scorecard: p50 over the baseline's p50
ATTR_PROFILED = "madengine.profiled"  #: an inference span of the profiling session (true)
ATTR_SCRIPT = "madengine.script"  #: bench SCRIPT.py: the script's path
ATTR_BUILD_CACHE = "madengine.build_cache"  #: bench SCRIPT.py: hit / built / rebuilt / stale / failed
ATTR_SLURM_JOB_ID = "madengine.slurm.job_id"
ATTR_SLURM_TASK_ID = "madengine.slurm.task_id"
ATTR_SLOT = "madengine.parallel.slot"
ATTR_STEP = "madengine.step"  #: the name of one pre/post-script step

# ORT operator spans
ATTR_ORT_NODE = "ort.node"
ATTR_ORT_OP_TYPE = "ort.op_type"
ATTR_ORT_PROVIDER = "ort.provider"
ATTR_ORT_RUN_INDEX = "ort.run_index"

#: the trace file of a run folder (``madengine_runs/<run id>/trace.json``)
TRACE_FILE = "trace.json"

#: the environment variables of W3C Trace Context propagation to child processes
ENV_TRACEPARENT = "TRACEPARENT"
ENV_TRACESTATE = "TRACESTATE"
