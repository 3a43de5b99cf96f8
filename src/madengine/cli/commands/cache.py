"""madengine cache: list, inspect, delete and report the builds of ``madengine bench SCRIPT.py``."""

from __future__ import annotations

import argparse
import csv
import io
import json
from pathlib import Path

from madengine.cli.env import Environment
from madengine.core.errors import ExitStatus, InputError
from madengine.cli.commands import SUMMARIES

DESCRIPTION = """\
The cache holds the ONNX builds of the PyTorch models found in scripts (builds/<script>_<hash>/:
state.json, onnx/*.onnx, inputs.npz, log_export.txt) and the prepared copies of .onnx models
(onnx/, tensorrt/). Its folder is --cache-dir, else $MADENGINE_CACHE_DIR, else
$XDG_CACHE_HOME/madengine, else ~/.cache/madengine."""

EXAMPLES = """\
examples:
  madengine cache list
  madengine cache stats my_script_1a2b3c4d
  madengine cache report -o builds.csv
  madengine cache delete my_script_1a2b3c4d
  madengine cache delete --all
"""


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("cache", help=SUMMARIES["cache"],
                                   description=DESCRIPTION, epilog=EXAMPLES,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
    actions = parser.add_subparsers(dest="action", metavar="{list,stats,delete,report}", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--cache-dir", metavar="DIR", help="the cache folder (default: see madengine cache --help)")
    listing = actions.add_parser("list", parents=[common], help="one line per build")
    listing.add_argument("--json", action="store_true", help="print the builds as JSON")
    stats = actions.add_parser("stats", parents=[common], help="one build's state: versions, hashes, files, timings")
    stats.add_argument("name", metavar="NAME", help="the build's name (see madengine cache list)")
    stats.add_argument("--json", action="store_true", help="print the state as JSON")
    delete = actions.add_parser("delete", parents=[common], help="delete builds")
    delete.add_argument("names", nargs="*", metavar="NAME", help="builds to delete")
    delete.add_argument("--all", action="store_true",
                        help="delete everything madengine cached: every build and every prepared model")
    report = actions.add_parser("report", parents=[common], help="CSV of every build with its latest results")
    report.add_argument("-o", "--output", metavar="CSV", help="write the CSV here (default: stdout)")
    parser.set_defaults(handler=handle)


def handle(args: argparse.Namespace, env: Environment) -> ExitStatus:
    from madengine.bench.cache.root import cache_root

    root = cache_root(env.environ, args.cache_dir)
    return {"list": _list, "stats": _stats, "delete": _delete, "report": _report}[args.action](args, env, root)


def _list(args: argparse.Namespace, env: Environment, root: Path) -> ExitStatus:
    from madengine.bench.cache.builds import list_builds
    from madengine.cli.render import table

    builds = list_builds(root)
    if args.json:
        env.data(json.dumps(builds, indent=1, default=str))
        return ExitStatus.OK
    rows = [(b["name"], b.get("status", ""), (b.get("model") or {}).get("class", ""),
             (b.get("key") or {}).get("model_hash", ""), (b.get("key") or {}).get("settings", {}).get("fp16", ""),
             b.get("updated_at", ""), f"{b['size_bytes'] / 1e6:.1f}") for b in builds]
    env.data(table(("build", "status", "class", "hash", "fp16", "updated_at", "MB"), rows, max_width=70))
    env.message(f"madengine: {len(builds)} build(s) in {root}")
    return ExitStatus.OK


def _stats(args: argparse.Namespace, env: Environment, root: Path) -> ExitStatus:
    from madengine.bench.cache.builds import build_files, build_folder, read_state

    folder = build_folder(root, args.name)
    if not folder.is_dir():
        raise InputError(f"no build named '{args.name}' in {root}", path="NAME", hint="see madengine cache list")
    state = read_state(folder) or {"status": "unreadable"}
    state = dict(state, name=args.name, folder=str(folder), files_on_disk=build_files(folder))
    if args.json:
        env.data(json.dumps(state, indent=1, default=str))
        return ExitStatus.OK
    env.data(_stats_text(state))
    return ExitStatus.OK


def _stats_text(state: dict) -> str:
    key, model = state.get("key") or {}, state.get("model") or {}
    lines = [f"build      {state['name']}", f"folder     {state['folder']}", f"status     {state.get('status', '')}"
             + (f" ({state['error']})" if state.get("error") else ""),
             f"updated    {state.get('updated_at', '')}",
             f"model      {model.get('name', '')} {model.get('class', '')} from {model.get('script', '')}",
             f"parameters {model.get('parameters', '')}"]
    lines.append("hashes     " + ", ".join(f"{k} {key.get(k, '')}" for k in
                                          ("model_hash", "structure_sha256", "code_sha256", "weights_sha256")))
    lines.append("inputs     " + "; ".join((key.get("inputs") or "").splitlines()))
    lines.append("settings   " + ", ".join(f"{k}={v}" for k, v in sorted((key.get("settings") or {}).items())))
    lines.append("arguments  " + " ".join(key.get("script_args") or []))
    lines.append("versions   " + ", ".join(f"{k} {v}" for k, v in sorted((key.get("versions") or {}).items())))
    lines.append("timings    " + ", ".join(f"{k} {v:.3f}" for k, v in sorted((state.get("timings") or {}).items())))
    lines.append("files")
    lines += [f"  {f['path']}  {f['bytes']:,} bytes" for f in state["files_on_disk"]]
    for backend, result in sorted((state.get("results") or {}).items()):
        lines.append(f"result     {backend}: {result.get('status', '')} p50 {result.get('p50_ms', '')} ms, "
                     f"{result.get('samples_per_second', '')} samples/s {result.get('correctness', '')} "
                     f"({result.get('at', '')})")
    return "\n".join(lines)


def _delete(args: argparse.Namespace, env: Environment, root: Path) -> ExitStatus:
    import shutil

    from madengine.bench.cache.builds import build_folder, delete_build
    from madengine.bench.cache.root import CACHE_FOLDERS

    if args.all == bool(args.names):
        raise InputError("give build NAMEs or --all (not both)", path="delete")
    if args.all:
        for name in CACHE_FOLDERS:
            shutil.rmtree(root / name, ignore_errors=True)
        env.message(f"madengine: deleted every build, prepared model and catalog cache in {root}")
        return ExitStatus.OK
    unknown = [name for name in args.names if not build_folder(root, name).is_dir()]
    if unknown:
        raise InputError(f"no build named {', '.join(unknown)} in {root}", path="NAME",
                         hint="see madengine cache list; nothing was deleted")
    for name in args.names:
        delete_build(root, name)
        env.message(f"madengine: deleted {name}")
    return ExitStatus.OK


def _report(args: argparse.Namespace, env: Environment, root: Path) -> ExitStatus:
    from madengine.bench.cache.builds import report_rows

    columns, rows = report_rows(root)
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    if args.output:
        Path(args.output).write_text(buffer.getvalue(), encoding="utf-8")
        env.message(f"madengine: {len(rows)} build(s) → {args.output}")
    else:
        env.data(buffer.getvalue().rstrip("\n"))
    return ExitStatus.OK
