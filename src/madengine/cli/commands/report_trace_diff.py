"""``madengine report trace-diff RUN_A RUN_B [MODEL]``: two runs' phase timelines side by side.

Registered by ``madengine report``; owned by the tracing part (madengine.tracing.diff does the work).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from madengine.cli.env import Environment
from madengine.core.errors import ExitStatus


def add_subparser(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``trace-diff`` subcommand to ``madengine report``'s subparsers."""
    parser = subparsers.add_parser(
        "trace-diff", help="two runs' phase timelines side by side: which phase grew, by how much",
        description="Line up the phases of two traced runs per model (context detection, data provision, image "
                    "build, container start, pre-scripts, each model step, post-scripts, parsing, recording) and "
                    "show which phase grew and by how much. A run is a run id (a folder under --runs-dir), a run "
                    "folder, or a trace.json.")
    parser.add_argument("run_a", metavar="RUN_A", help="the earlier (reference) run")
    parser.add_argument("run_b", metavar="RUN_B", help="the later run")
    parser.add_argument("model", metavar="MODEL", nargs="?", default=None,
                        help="only this model (its name, or 'name [tag configs]' as listed)")
    parser.add_argument("--runs-dir", default="madengine_runs", metavar="DIR",
                        help="where run ids are looked up (default: madengine_runs)")
    parser.add_argument("--json", action="store_true", help="print the comparison as JSON on stdout")
    parser.set_defaults(handler=handle)


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def handle(args: argparse.Namespace, env: Environment) -> ExitStatus:
    from madengine.cli.render import table
    from madengine.tracing.diff import summary_lines, trace_diff

    path_a, path_b, diffs = trace_diff(args.run_a, args.run_b, args.model, runs_dir=Path(args.runs_dir))
    if args.json:
        env.data(json.dumps({"a": str(path_a), "b": str(path_b), "models": [d.to_json() for d in diffs]}, indent=1))
    else:
        rows = []
        for model in diffs:
            grew = model.grew_most
            for phase in model.phases:
                rows.append((model.model, phase.phase, _seconds(phase.a_s), _seconds(phase.b_s),
                             "" if phase.delta_s is None else f"{phase.delta_s:+.3f}",
                             "" if phase.change is None else f"{phase.change * 100:+.1f}%",
                             "grew most" if phase is grew else ""))
        env.data(table(("model", "phase", "A (s)", "B (s)", "delta (s)", "change", "note"), rows))
    env.message(f"madengine: A = {path_a}, B = {path_b}")
    for line in summary_lines(diffs):
        env.message(f"madengine: {line}")
    return ExitStatus.OK
