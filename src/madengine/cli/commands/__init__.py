"""The subcommands: one module each, with ``add_parser(subparsers)`` and ``handle(args, env)``.

``SUMMARIES`` is each command's one-line help: ``madengine --help`` lists them without importing
any command module (only the command that runs is imported and builds its parser).
"""

SUMMARIES = {
    "run": "build and run models, record their performance",
    "build": "build images and write a build manifest for 'run --manifest-file'",
    "discover": "list models of the catalog selected by tags",
    "doctor": "check whether this host can run the selected models (Docker, GPUs, driver, PyTorch) and what to fix",
    "report": "reports on perf.csv: update-perf, to-html, to-email, compare, regressions, collect, trace-diff",
    "database": "store results in SQLite (default), MySQL or MongoDB",
    "bench": "benchmark ONNX models (or the PyTorch models of a script) and record them in perf.csv",
    "scorecard": "ONNX models on several backends: outputs checked, timings side by side",
    "serve-bench": "load an OpenAI-compatible server: TTFT, TPOT, ITL, E2E and throughput, one row per load point",
    "cache": "list, inspect, delete and report cached builds",
    "k8s": "Kubernetes objects without a cluster: render jobs as YAML, print the RBAC a namespace needs",
    "clean": "remove the containers and processes that ended runs left behind (after a SIGKILL)",
    "completion": "print the shell completion script (bash or zsh)",
}
