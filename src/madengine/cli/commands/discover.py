"""madengine discover: list the models the tags select."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from madengine.cli.env import Environment
from madengine.core.errors import ExitStatus
from madengine.cli.commands import SUMMARIES

if TYPE_CHECKING:
    from madengine.catalog import Catalog, Model


def add_tags_argument(parser: argparse.ArgumentParser, required: bool = False) -> None:
    parser.add_argument("--tags", "-t", nargs="+", action="extend", default=[], required=required, metavar="TAG",
                        help="model names or tags; 'all', '<dir>/<model>', '<dir>/all', 'name:key=value'; "
                             "space- or comma-separated")


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("discover", help=SUMMARIES["discover"],
                                   description="List the models the tags select (all models without --tags).")
    add_tags_argument(parser)
    parser.add_argument("--json", action="store_true", help="print a JSON array of the model objects on stdout")
    parser.add_argument("--pretty", action="store_true", help="indent the --json output")
    parser.set_defaults(handler=handle)


def handle(args: argparse.Namespace, env: Environment) -> ExitStatus:
    from madengine.catalog import list_catalog, load_catalog, select_models

    catalog = load_catalog(environ=env.environ)
    if args.tags:
        models = select_models(catalog, args.tags)  # an invalid selected model is an error (exit 2)
    else:
        models, invalid = list_catalog(catalog)
        for error in invalid:  # listed without tags, a broken dynamic model only warns
            env.message(f"madengine: warning: not listed: {error}")
    if args.json:
        env.data(_json(catalog, models, args.pretty))
        return ExitStatus.OK
    from madengine.cli.render import table

    rows = [(m.name, ",".join(m.tags), m.dockerfile, m.scripts, m.run_args) for m in models]
    env.data(table(("name", "tags", "dockerfile", "scripts", "args"), rows))
    env.message(f"{len(models)} model(s) in {catalog.root}")
    return ExitStatus.OK


def _json(catalog: Catalog, models: list[Model], pretty: bool) -> str:
    """The JSON array of the models' entries. A model selected unchanged from the catalog cache is
    written as the JSON the cache kept of its entry: rendering 10,000 entries again would be most
    of a cached ``discover``. The text is the same either way."""
    from madengine.core import jsonio
    from madengine.core.gcpause import collector_paused

    kept = catalog.entry_json
    text = None
    if kept and not pretty:  # a model not kept (a copy with tag configs) is rendered here
        text = jsonio.joined([kept.get(id(m)) or jsonio.compact(m.to_dict()) for m in models])
    if text is None:
        with collector_paused():  # 10,000 short-lived dicts: not worth scanning for cycles
            text = jsonio.dumps([m.to_dict() for m in models], indent=pretty)
    return text
