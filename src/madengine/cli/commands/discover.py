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
    """The JSON array of the models' entries: the texts the catalog kept where it did (the same
    text: rendering 10,000 entries again would be most of a cached ``discover``)."""
    from madengine.core import jsonio
    from madengine.core.gcpause import collector_paused

    texts = None if pretty else _entry_texts(catalog, models)
    text = jsonio.joined(texts) if texts is not None else None
    if text is None:
        with collector_paused():  # 10,000 short-lived dicts: not worth scanning for cycles
            text = jsonio.dumps([m.to_dict() for m in models], indent=pretty)
    return text


def _entry_texts(catalog: Catalog, models: list[Model]) -> list[str | None] | None:
    """The JSON of each model's entry: as the catalog kept it for a model selected unchanged, else
    rendered here (a copy with tag configs); None where the catalog kept none (the cache off)."""
    import operator

    from madengine.core import jsonio

    kept = catalog.entry_json
    if len(kept) != len(catalog.models) or not any(kept):
        return None
    if len(models) == len(kept) and all(map(operator.is_, models, catalog.models)):
        texts = kept  # the whole catalog as loaded: 'all', or a tag of every model
    else:
        by_model = dict(zip(map(id, catalog.models), kept))
        texts = [by_model.get(id(m)) for m in models]
    if all(texts):
        return texts
    return [text or jsonio.compact(m.to_dict()) for text, m in zip(texts, models)]
