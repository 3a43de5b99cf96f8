"""Wrapping one model run in the selected tools: steps, wrapper command, env vars, outputs.

For tools ``[A, B]`` the run becomes::

    pre-scripts of B, pre-scripts of A, context pre_scripts,
    cmd_B cmd_A <model argv>,
    context post_scripts, post-scripts of A, post-scripts of B

Env vars merge in tool order (later wins) into the run's environment. Files the tools name (a
pre/post-script ``path``, or an argument of ``cmd``/``args`` that names an existing file, such as
``tools/cpu_monitor.py``) are copied into ``<work>/madengine_tools/`` and the argument is rewritten
to point at the copy, relative to the model's folder where every tool step runs.
"""

from __future__ import annotations

import posixpath
import shlex
import shutil
from pathlib import Path
from typing import Any, Callable

from madengine.core.errors import ConfigError, ContextError
from madengine.core.spec import RunSpec, Step
from madengine.tools.config import BUNDLED_SCRIPTS, ScriptRef, ToolSelection, select_tools

#: the work-folder subfolder tool files are copied into
TOOLS_DIR = "madengine_tools"
#: background samplers outlive a timeout by this much at most (the post-script never ran then)
SAMPLER_GRACE_SECONDS = 300


def apply_tools(spec: RunSpec, context: Any, tools_json: str | None, root: Path) -> None:
    """Add the context's tools and pre/post scripts to ``spec`` (steps, env, outputs, finalizers).

    Raises ConfigError/ContextError for a malformed tools.json, an unknown tool or a script
    that does not exist; the runner turns those into a FAILURE row.
    """
    values = context if isinstance(context, dict) else context.values
    selection = select_tools(values, tools_json, Path(root))
    if not selection:
        return
    model_step = next((step for step in spec.steps if step.is_model), None)
    if model_step is None:
        return
    stager = Stager(spec.workdir, model_step.cwd)
    pre = [stager.script_step("pre-script context", ref, selection.base_dirs, model_step.cwd, ContextError)
           for ref in selection.pre_scripts]
    post = [stager.script_step("post-script context", ref, selection.base_dirs, model_step.cwd, ContextError)
            for ref in selection.post_scripts]
    prefix: list[str] = []
    wrappers: set[str] = set()
    env: dict[str, str] = {}
    outputs: list[str] = []
    summaries: list[str] = []
    for tool in selection.tools:
        pre = [stager.script_step(f"pre-script {tool.name}", ref, tool.base_dirs, model_step.cwd, ConfigError,
                                  tool.source) for ref in tool.pre_scripts] + pre
        post = post + [stager.script_step(f"post-script {tool.name}", ref, tool.base_dirs, model_step.cwd,
                                          ConfigError, tool.source) for ref in tool.post_scripts]
        if tool.cmd and tool.cmd not in wrappers:  # tools sharing one wrapper (library traces) run it once
            wrappers.add(tool.cmd)
            prefix = stager.rewrite(shlex.split(tool.cmd), tool.base_dirs) + prefix
        env.update(tool.env)
        outputs.extend(tool.outputs)
        if tool.summary and tool.summary not in summaries:  # shared outputs are summarised once
            summaries.append(tool.summary)
    model_step.argv = prefix + model_step.argv
    spec.env.update(env)
    if spec.timeout:
        spec.env["MAD_TOOLS_MAX_SECONDS"] = str(spec.timeout + SAMPLER_GRACE_SECONDS)
    position = spec.steps.index(model_step)
    spec.steps[position:position + 1] = pre + [model_step] + post
    for pattern in outputs:
        collected = posixpath.normpath(posixpath.join(model_step.cwd, pattern)) if model_step.cwd else pattern
        if collected not in spec.collect:
            spec.collect.append(collected)
    spec.finalizers.extend(finalizers(selection, summaries, model_step.cwd))


def finalizers(selection: ToolSelection, summaries: list[str],
               cwd: str) -> list[Callable[[RunSpec], dict[str, Any]]]:
    """Stop leftover samplers, then summarise outputs, then name the tools in the row."""
    from madengine.tools import summaries as summary_functions

    result: list[Callable[[RunSpec], dict[str, Any]]] = [stop_background_samplers]
    for name in summaries:
        result.append(summary_functions.finalizer(name, cwd))
    if selection.tools:
        names = ",".join(tool.name for tool in selection.tools)
        result.append(lambda _spec: {"tools": names})
    return result


def stop_background_samplers(spec: RunSpec) -> dict[str, Any]:
    """Ask samplers whose post-script never ran (failed pre-script, timeout) to stop now.

    Each sampler watches for a ``<name>.stop`` file next to its ``<name>.pid`` file; creating it
    is safe whatever the executor (no pid of another namespace is ever signalled from here).
    """
    tools_dir = spec.workdir / TOOLS_DIR
    if tools_dir.is_dir():
        for pid_file in tools_dir.rglob("*.pid"):
            try:
                pid_file.with_suffix(".stop").touch()
            except OSError:
                continue
    return {}


class Stager:
    """Copies tool files into ``<work>/madengine_tools`` and refers to them from the step folder."""

    def __init__(self, workdir: Path, cwd: str) -> None:
        self.workdir = Path(workdir)
        self.cwd = cwd
        self._copied: set[Path] = set()

    def script_step(self, name: str, ref: ScriptRef, base_dirs: tuple[Path, ...], cwd: str, error: type,
                    source: str = "context") -> Step:
        found = resolve(ref.path, base_dirs, require_slash=False)
        if found is None:
            raise error(f"script '{ref.path}' not found", path=source, field=f"{ref.where}.path",
                        hint="paths are relative to the model repository root (or madengine's bundled scripts)")
        staged = self.stage(*found)
        interpreter = "python3" if staged.endswith(".py") else "bash"
        args = self.rewrite(list(ref.args), base_dirs)
        return Step(f"{name}: {posixpath.basename(staged)}", [interpreter, staged, *args], cwd=cwd)

    def rewrite(self, argv: list[str], base_dirs: tuple[Path, ...]) -> list[str]:
        """``argv`` with every argument that names a tool file replaced by its staged copy."""
        out = []
        for arg in argv:
            found = resolve(arg, base_dirs, require_slash=True)
            out.append(self.stage(*found) if found else arg)
        return out

    def stage(self, source: Path, base: Path) -> str:
        """Copy ``source`` (with the files beside it) into the work folder; its path from the step folder."""
        area = "madengine" if base == BUNDLED_SCRIPTS else "repo"
        relative = source.relative_to(base)
        target_dir = self.workdir / TOOLS_DIR / area / relative.parent
        if source.parent == base:  # a file at the top of its base: copy only the file
            target_dir.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target_dir / source.name)
        elif source.parent not in self._copied:  # its folder: scripts may call their siblings
            shutil.copytree(source.parent, target_dir, dirs_exist_ok=True,
                            ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
            self._copied.add(source.parent)
        staged = posixpath.join(TOOLS_DIR, area, relative.as_posix())
        return posixpath.relpath(staged, self.cwd) if self.cwd else staged


def resolve(value: str, base_dirs: tuple[Path, ...], *, require_slash: bool) -> tuple[Path, Path] | None:
    """``(file, base)`` of the first base folder holding relative path ``value``; None if none does."""
    if not value or value.startswith(("/", "-", "~")) or (require_slash and "/" not in value):
        return None
    for base in base_dirs:
        base = Path(base).resolve()
        candidate = (base / value).resolve()
        if candidate.is_file() and candidate.is_relative_to(base):
            return candidate, base
    return None
