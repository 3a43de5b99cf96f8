"""Profiling tools and system monitors that wrap a model run (tools.json).

A run selects tools through its context (``{'tools': [{'name': 'cpu_monitor'}]}``); the runner
calls :func:`apply_tools` once the work folder is ready, and the tools add pre/post-script steps,
a wrapper command in front of the model, env vars, output files to collect and summaries that
become perf.csv columns. Definitions: madengine's bundled ``tools.json`` overlaid by the model
repository's (``--tools-json-file-name`` or ``<repo>/tools.json``); see docs/tools.md.

Also hosts ``madengine.tools.discover_models``, the import path older model repositories use.
"""

from pathlib import Path
from typing import Any

from madengine.core.lazy import lazy_exports

_EXPORTS = {
    "apply_tools": "madengine.tools.apply", "TOOLS_DIR": "madengine.tools.apply",
    "BUNDLED_TOOLS_JSON": "madengine.tools.config", "ScriptRef": "madengine.tools.config",
    "ToolDef": "madengine.tools.config", "ToolSelection": "madengine.tools.config",
    "load_tools": "madengine.tools.config", "select_tools": "madengine.tools.config",
}


# lazy: ``madengine.tools.discover_models`` (imported by model repositories) must stay light
__getattr__ = lazy_exports(__name__, _EXPORTS)


def validate_tools(context: Any, tools_json: str | None, root: Path) -> None:
    """Load tools.json and check the context's tool entries (raises ConfigError/ContextError).

    For a run to refuse bad input (exit 2) before building anything; :func:`apply_tools` checks
    the same again per model.
    """
    from madengine.tools.config import select_tools

    values = context if isinstance(context, dict) else context.values
    select_tools(values, tools_json, root)


__all__ = ["BUNDLED_TOOLS_JSON", "TOOLS_DIR", "ScriptRef", "ToolDef", "ToolSelection", "apply_tools",
           "load_tools", "select_tools", "validate_tools"]
