"""madengine: run AI models reliably in containers, measure them, record the results.

The public surface is the command line (``madengine``) and the Python API in :mod:`madengine.api`
(``madengine.discover``, ``run``, ``bench``, ``read_results``, ``benchmark_model``, ...), whose names are loaded on
first use so that ``import madengine`` stays fast. The packages below are the stages:
catalog → context → execution → results → reports/database. See docs/architecture.md.
"""

__version__ = "2.0.0"

#: names of :mod:`madengine.api` offered as ``madengine.<name>`` (loaded on first use)
API_NAMES = ("discover", "run", "bench", "read_results", "benchmark_model", "benchmark_script", "BackendResult",
             "BuildInfo", "ModelInfo", "ModelResult", "Result", "Results", "RunSummary", "ScriptBenchSummary",
             "ScriptResult", "TensorInfo")


def __getattr__(name: str):
    if name in API_NAMES:
        # importlib, not an import statement: every module reads __version__ from here, and none of
        # them depends on the API (the layers of docs/architecture.md put it above bench)
        import importlib

        return getattr(importlib.import_module("madengine.api"), name)
    raise AttributeError(f"module 'madengine' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(API_NAMES))
