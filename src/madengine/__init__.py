"""madengine: run AI models reliably in containers, measure them, record the results.

The public surface is the command line (``madengine``) and the Python API in :mod:`madengine.api`
(``madengine.discover``, ``run``, ``bench``, ``read_results``, ``benchmark_model``, ...), whose names are loaded on
first use so that ``import madengine`` stays fast. The packages below are the stages:
catalog → context → execution → results → reports/database. See docs/architecture.md.
"""

from madengine.core.version import __version__

#: names of :mod:`madengine.api` offered as ``madengine.<name>`` (loaded on first use)
API_NAMES = ("discover", "run", "bench", "read_results", "benchmark_model", "benchmark_script", "BackendResult",
             "BuildInfo", "ModelInfo", "ModelResult", "Result", "Results", "RunSummary", "ScriptBenchSummary",
             "ScriptResult", "TensorInfo")


def __getattr__(name: str):
    if name in API_NAMES:
        from madengine import api  # on first use: the API imports most of the package

        return getattr(api, name)
    raise AttributeError(f"module 'madengine' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(API_NAMES))
