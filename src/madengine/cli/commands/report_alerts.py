"""``madengine report alerts``: the detected changes of the results database and their triage.

Registered by ``madengine report``; the work is :mod:`madengine.database` (``list_alerts``,
``show_alert``, ``set_alert``; :mod:`madengine.database.alerts` for states and precision).
"""

from __future__ import annotations

import argparse
import json

from madengine.cli.env import Environment
from madengine.core.errors import ExitStatus

STATES = ("untriaged", "acknowledged", "expected", "invalid", "fixed")  # madengine.database.alerts.STATES
KINDS = ("regression", "improvement", "change")


def _common() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--db-url", default=None, metavar="URL",
                        help="results database (default: MADENGINE_DB_URL, TUNA_DB_*, else the embedded SQLite file)")
    common.add_argument("--table", default="dlm_table", metavar="NAME", help="results table (default dlm_table)")
    common.add_argument("--json", action="store_true", help="print the outcome as JSON on stdout")
    return common


def add_subparser(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``alerts`` subcommand to ``madengine report``'s subparsers."""
    parser = subparsers.add_parser(
        "alerts", help="the detected changes of the results database and their triage",
        description="Every change the results database's imports detect is an alert: untriaged until someone "
                    "marks it acknowledged, expected (an intended change), invalid (noise) or fixed, with a note "
                    "and links (a commit, an issue URL). The dashboard shows and sets the same. See "
                    "docs/dashboard.md.")
    parser.set_defaults(handler=lambda args, env: _usage(parser, env))
    actions = parser.add_subparsers(dest="alerts_command", metavar="{list,show,set}", parser_class=type(parser))
    listing = actions.add_parser("list", parents=[_common()], help="the alerts, what needs a look first",
                                 description="Untriaged regressions first, by size x confidence; then the others. "
                                             "Also prints the detector's precision (1 - invalid / triaged).")
    listing.add_argument("--state", action="append", choices=STATES, default=[], help="only this state (repeatable)")
    listing.add_argument("--kind", action="append", choices=KINDS, default=[], help="only this kind (repeatable)")
    listing.add_argument("--all", action="store_true",
                         help="also the alerts the detection no longer finds (withdrawn)")
    listing.set_defaults(handler=handle_list)
    show = actions.add_parser("show", parents=[_common()], help="one alert and its triage history")
    show.add_argument("alert", metavar="ID", help="an alert id (6 or more of its hex digits)")
    show.set_defaults(handler=handle_show)
    setting = actions.add_parser("set", parents=[_common()], help="record what you decided about an alert",
                                 description="Set an alert's state, note and links; who and when are stored with it.")
    setting.add_argument("alert", metavar="ID", help="an alert id (6 or more of its hex digits)")
    setting.add_argument("--state", required=True, choices=STATES, help="the new state")
    setting.add_argument("--note", default="", help="why (at most 2000 characters)")
    setting.add_argument("--link", action="append", default=[], metavar="URL_OR_COMMIT",
                         help="a commit hash or an http(s) URL (an issue, a merge request); repeatable")
    setting.add_argument("--by", default=None, metavar="NAME", help="who decides (default: $USER)")
    setting.set_defaults(handler=handle_set)


def _usage(parser: argparse.ArgumentParser, env: Environment) -> ExitStatus:
    parser.print_help(env.stderr)
    return ExitStatus.BAD_INPUT


def _size(alert) -> str:
    return "" if alert.size_percent is None else f"{alert.size_percent:+.1f}%"


def handle_list(args: argparse.Namespace, env: Environment) -> ExitStatus:
    from madengine.cli.render import table
    from madengine.database import list_alerts, precision

    alerts = list_alerts(args.db_url, env.environ, args.table, states=args.state, kinds=args.kind, withdrawn=args.all)
    every = list_alerts(args.db_url, env.environ, args.table, withdrawn=True)
    figures = precision(every)
    if args.json:
        env.data(json.dumps({"alerts": [a.to_json() for a in alerts], "precision": figures}, indent=1))
    else:
        rows = [(a.alert_id, a.state, a.kind, a.change.get("identity", a.model), _size(a), f"{a.confidence:.3f}",
                 a.after_run, "yes" if a.latest else "", a.note) for a in alerts]
        env.data(table(("id", "state", "kind", "result", "size", "confidence", "first run after", "in effect",
                        "note"), rows, wrap=(8,)))
    overall = figures["overall"]
    shown = "n/a" if overall["precision"] is None else f"{overall['precision']:.0%}"
    env.message(f"madengine: {len(alerts)} alert(s); detector precision {shown} "
                f"({overall['invalid']} invalid of {overall['triaged']} triaged, {overall['untriaged']} untriaged)")
    return ExitStatus.OK


def handle_show(args: argparse.Namespace, env: Environment) -> ExitStatus:
    from madengine.database import show_alert

    alert, log = show_alert(args.alert, args.db_url, env.environ, args.table)
    if args.json:
        env.data(json.dumps({**alert.to_json(), "log": log}, indent=1))
    else:
        lines = [f"{alert.alert_id}  {alert.state}  {alert.kind} {_size(alert)} of {alert.change.get('identity', '')}",
                 f"  first run after: {alert.after_run} {alert.after_started_at}   last run before: {alert.before_run}",
                 f"  confidence {alert.confidence:.4f}{'' if alert.detected else '  (no longer detected)'}",
                 f"  look next: {alert.change.get('trace_diff', '')}"]
        lines += [f"  {entry['at']}  {entry['by']}: {entry['state']}" + (f" - {entry['note']}" if entry['note'] else "")
                  + (f" [{', '.join(entry['links'])}]" if entry['links'] else "") for entry in log]
        env.data("\n".join(lines))
    return ExitStatus.OK


def handle_set(args: argparse.Namespace, env: Environment) -> ExitStatus:
    from madengine.database import set_alert, triage

    by = args.by if args.by is not None else (env.environ.get("USER") or env.environ.get("USERNAME") or "")
    decision = triage(args.state, args.note, args.link, by, prefix="--")
    alert = set_alert(args.alert, decision, args.db_url, env.environ, args.table)
    if args.json:
        env.data(json.dumps(alert.to_json(), indent=1))
    env.message(f"madengine: alert {alert.alert_id} ({alert.change.get('identity', alert.model)}) is now "
                f"{alert.state}, by {alert.updated_by}")
    return ExitStatus.OK
