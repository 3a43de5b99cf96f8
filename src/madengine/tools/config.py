"""tools.json: loading, validation, and the tools a run's context selects.

Where definitions come from (later wins, tool by tool):

1. madengine's bundled ``tools.json`` (always: the built-in tools stay usable);
2. ``--tools-json-file-name FILE`` when given (it must exist), else ``<model repo>/tools.json``
   when that exists.

A file's shape: ``{"tools": {"<name>": {"pre_scripts": [{"path": ..., "args": ...}], "cmd": "...",
"env_vars": {...}, "post_scripts": [...], "outputs": [...], "summary": "...", "description": "..."}}}``.
"""

from __future__ import annotations

import dataclasses
import difflib
import re
import shlex
from pathlib import Path
from typing import Any

from madengine.core.errors import ConfigError, ContextError
from madengine.core.inputfile import check_input
from madengine.core.jsonio import read_json_file

BUNDLED_TOOLS_JSON = Path(__file__).resolve().with_name("tools.json")
#: the folder bundled script paths are relative to (``tools/cpu_monitor.py`` → ``scripts/tools/...``)
BUNDLED_SCRIPTS = Path(__file__).resolve().parent.parent / "scripts"
#: built-in summaries a tool can name (``"summary": ...``); see madengine.tools.summaries
SUMMARIES = ("cpu_monitor", "gpu_power", "gpu_vram", "library_trace")

_TOOL_KEYS = ("pre_scripts", "post_scripts", "cmd", "env_vars", "outputs", "summary", "description")
_ENTRY_KEYS = ("name", "cmd", "env_vars")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclasses.dataclass(frozen=True)
class ScriptRef:
    """A pre/post-script: a file path (resolved against ``base_dirs``) and its arguments."""

    path: str
    args: tuple[str, ...]
    where: str  # e.g. "tools.rocprof.pre_scripts[0]" (for error messages)


@dataclasses.dataclass(frozen=True)
class ToolDef:
    name: str
    cmd: str = ""
    env: dict[str, str] = dataclasses.field(default_factory=dict)
    pre_scripts: tuple[ScriptRef, ...] = ()
    post_scripts: tuple[ScriptRef, ...] = ()
    outputs: tuple[str, ...] = ()
    summary: str = ""
    description: str = ""
    source: str = ""  # the tools.json that defined it
    #: folders relative script paths are looked up in, in order
    base_dirs: tuple[Path, ...] = ()


@dataclasses.dataclass(frozen=True)
class ToolSelection:
    """What a context asks for: tools in context order, and the innermost context scripts."""

    tools: tuple[ToolDef, ...] = ()
    pre_scripts: tuple[ScriptRef, ...] = ()
    post_scripts: tuple[ScriptRef, ...] = ()
    #: folders the context's own script paths are looked up in
    base_dirs: tuple[Path, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.tools or self.pre_scripts or self.post_scripts)


def tools_json_path(tools_json_file_name: str | None, root: Path) -> Path | None:
    """The repository's tools file: the flag's file (which must exist), else ``<root>/tools.json``."""
    if tools_json_file_name:
        path = Path(tools_json_file_name)
        check_input(path, error=ConfigError, hint="check --tools-json-file-name")
        return path
    default = Path(root) / "tools.json"
    return default if check_input(default, error=ConfigError, missing=None) else None


def load_tools(tools_json_file_name: str | None, root: Path) -> dict[str, ToolDef]:
    """Every tool definition a run can select: bundled ones overlaid by the repository's file."""
    tools = parse_tools_file(BUNDLED_TOOLS_JSON, base_dirs=(BUNDLED_SCRIPTS,))
    repo_file = tools_json_path(tools_json_file_name, root)
    if repo_file is not None:
        tools.update(parse_tools_file(repo_file, base_dirs=(Path(root).resolve(), BUNDLED_SCRIPTS)))
    return tools


def parse_tools_file(path: Path, *, base_dirs: tuple[Path, ...]) -> dict[str, ToolDef]:
    shown = str(path)
    document = read_json_file(path, error=ConfigError)
    if not isinstance(document, dict) or not isinstance(document.get("tools"), dict):
        raise ConfigError('must be an object with a "tools" object', path=shown, field="tools",
                          hint='e.g. {"tools": {"my_tool": {"cmd": "..."}}}')
    return {name: parse_tool(name, spec, shown, base_dirs) for name, spec in document["tools"].items()}


def parse_tool(name: str, spec: Any, shown: str, base_dirs: tuple[Path, ...]) -> ToolDef:
    where = f"tools.{name}"
    if not isinstance(spec, dict):
        raise ConfigError(f"must be an object, got {type(spec).__name__}", path=shown, field=where)
    unknown = sorted(set(spec) - set(_TOOL_KEYS))
    if unknown:
        raise ConfigError(f"unknown key(s) {', '.join(unknown)}", path=shown, field=where,
                          hint="allowed: " + ", ".join(_TOOL_KEYS))
    summary = _string(spec.get("summary", ""), shown, f"{where}.summary")
    if summary and summary not in SUMMARIES:
        raise ConfigError(f"unknown summary '{summary}'", path=shown, field=f"{where}.summary",
                          hint="use one of " + ", ".join(SUMMARIES))
    outputs = spec.get("outputs", [])
    if not isinstance(outputs, list) or not all(isinstance(o, str) and o.strip() for o in outputs):
        raise ConfigError("must be a list of file patterns", path=shown, field=f"{where}.outputs")
    cmd = _string(spec.get("cmd", ""), shown, f"{where}.cmd")
    _split(cmd, ConfigError, shown, f"{where}.cmd")
    return ToolDef(
        name=name, cmd=cmd, env=env_table(spec.get("env_vars", {}), ConfigError, shown, f"{where}.env_vars"),
        pre_scripts=script_refs(spec.get("pre_scripts", []), ConfigError, shown, f"{where}.pre_scripts"),
        post_scripts=script_refs(spec.get("post_scripts", []), ConfigError, shown, f"{where}.post_scripts"),
        outputs=tuple(o.strip() for o in outputs), summary=summary,
        description=_string(spec.get("description", ""), shown, f"{where}.description"),
        source=shown, base_dirs=base_dirs)


def select_tools(context_values: dict[str, Any], tools_json_file_name: str | None, root: Path) -> ToolSelection:
    """The tools (with per-run ``cmd``/``env_vars`` overrides) and scripts the context asks for."""
    entries = context_values.get("tools") or []
    pre = script_refs(context_values.get("pre_scripts") or [], ContextError, "context", "pre_scripts")
    post = script_refs(context_values.get("post_scripts") or [], ContextError, "context", "post_scripts")
    base_dirs = (Path(root).resolve(), BUNDLED_SCRIPTS)
    if not entries:
        return ToolSelection(pre_scripts=pre, post_scripts=post, base_dirs=base_dirs)
    if not isinstance(entries, list):
        raise ContextError("must be a list", path="context", field="tools")
    known = load_tools(tools_json_file_name, root)
    chosen: list[ToolDef] = []
    for index, entry in enumerate(entries):
        chosen.append(_selected(index, entry, known, tools_json_file_name, root))
    names = [tool.name for tool in chosen]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise ContextError(f"tool(s) listed more than once: {', '.join(repeated)}", path="context", field="tools")
    return ToolSelection(tools=tuple(chosen), pre_scripts=pre, post_scripts=post, base_dirs=base_dirs)


def _selected(index: int, entry: Any, known: dict[str, ToolDef], tools_json_file_name: str | None,
              root: Path) -> ToolDef:
    field = f"tools[{index}]"
    if isinstance(entry, str):
        entry = {"name": entry}
    if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
        raise ContextError('must be an object with a "name"', path="context", field=field,
                           hint="e.g. {'tools': [{'name': 'cpu_monitor'}]}")
    unknown = sorted(set(entry) - set(_ENTRY_KEYS))
    if unknown:
        raise ContextError(f"unknown key(s) {', '.join(unknown)}", path="context", field=field,
                           hint="a tool entry may set only name, cmd and env_vars")
    name = entry["name"]
    if name not in known:
        source = tools_json_path(tools_json_file_name, root)
        close = difflib.get_close_matches(name, list(known), n=3)
        hint = ("did you mean: " + ", ".join(close)) if close else "known tools: " + ", ".join(sorted(known))
        raise ConfigError(f"unknown tool '{name}'", path=str(source or BUNDLED_TOOLS_JSON),
                          field=f"context {field}.name", hint=hint)
    tool = known[name]
    changes: dict[str, Any] = {}
    if "cmd" in entry:
        changes["cmd"] = _string(entry["cmd"], "context", f"{field}.cmd", ContextError)
        _split(changes["cmd"], ContextError, "context", f"{field}.cmd")
    if "env_vars" in entry:
        changes["env"] = {**tool.env, **env_table(entry["env_vars"], ContextError, "context", f"{field}.env_vars")}
    return dataclasses.replace(tool, **changes) if changes else tool


def script_refs(value: Any, error: type, shown: str, where: str) -> tuple[ScriptRef, ...]:
    if not isinstance(value, list):
        raise error("must be a list of {path, args} objects", path=shown, field=where)
    refs = []
    for index, item in enumerate(value):
        field = f"{where}[{index}]"
        if not isinstance(item, dict) or not isinstance(item.get("path"), str) or not item["path"].strip():
            raise error('must be an object with a "path"', path=shown, field=field,
                        hint='e.g. {"path": "scripts/common/pre.sh", "args": "--flag"}')
        unknown = sorted(set(item) - {"path", "args"})
        if unknown:
            raise error(f"unknown key(s) {', '.join(unknown)}", path=shown, field=field, hint="use path and args")
        args = item.get("args", "")
        if isinstance(args, list) and all(isinstance(a, (str, int, float)) for a in args):
            argv = tuple(str(a) for a in args)
        elif isinstance(args, (str, int, float)):
            argv = tuple(_split(str(args), error, shown, f"{field}.args"))
        else:
            raise error("must be a string or a list of strings", path=shown, field=f"{field}.args")
        refs.append(ScriptRef(path=item["path"].strip(), args=argv, where=field))
    return tuple(refs)


def env_table(value: Any, error: type, shown: str, where: str) -> dict[str, str]:
    if not isinstance(value, dict):
        raise error("must be an object of NAME: value", path=shown, field=where)
    table = {}
    for name, item in value.items():
        if not _ENV_NAME.match(str(name)):
            raise error(f"'{name}' is not a valid variable name", path=shown, field=where)
        if isinstance(item, (dict, list)):
            raise error(f"value of '{name}' must be a string or number", path=shown, field=where)
        table[str(name)] = "" if item is None else str(item)
    return table


def _string(value: Any, shown: str, where: str, error: type = ConfigError) -> str:
    if not isinstance(value, str):
        raise error(f"must be a string, got {type(value).__name__}", path=shown, field=where)
    return value.strip()


def _split(text: str, error: type, shown: str, where: str) -> list[str]:
    try:
        return shlex.split(text)
    except ValueError as exc:
        raise error(f"cannot be split into arguments ({exc})", path=shown, field=where) from None
