"""``madengine report alerts``: the detected changes of the results database and their triage.

Registered by ``madengine report``; the work is :mod:`madengine.database` (``list_alerts``,
``show_alert``, ``list_summaries``, ``set_alerts``; :mod:`madengine.database.alerts` for states,
summaries and precision).
"""

from __future__ import annotations

import argparse
import json
import os

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
    actions = parser.add_subparsers(dest="alerts_command", metavar="{list,summaries,show,set}",
                                    parser_class=type(parser))
    listing = actions.add_parser("list", parents=[_common()], help="the alerts, what needs a look first",
                                 description="Untriaged regressions first, by size x confidence; then the others. "
                                             "Also prints the detector's precision (1 - invalid / triaged).")
    listing.add_argument("--state", action="append", choices=STATES, default=[], help="only this state (repeatable)")
    listing.add_argument("--kind", action="append", choices=KINDS, default=[], help="only this kind (repeatable)")
    listing.add_argument("--all", action="store_true",
                         help="also the alerts the detection no longer finds (withdrawn)")
    listing.set_defaults(handler=handle_list)
    grouped = actions.add_parser(
        "summaries", parents=[_common()], help="the alerts grouped by the run that introduced them",
        description="One summary per run that introduced alerts (its id is the run id), as Perfherder groups "
                    "alerts by push: its counts of regressions and improvements, its alerts the worst first, and "
                    "the suspected commit range when the rows carry git_commit. Summaries with an untriaged "
                    "regression first, then the newest. Triage one with 'set --summary RUN'.")
    grouped.add_argument("--state", action="append", choices=STATES, default=[], help="only alerts in this state "
                                                                                      "(repeatable)")
    grouped.add_argument("--kind", action="append", choices=KINDS, default=[], help="only this kind (repeatable)")
    grouped.add_argument("--limit", type=int, default=20, metavar="N", help="at most N summaries (default 20; 0: all)")
    grouped.set_defaults(handler=handle_summaries)
    show = actions.add_parser("show", parents=[_common()], help="one alert and its triage history")
    show.add_argument("alert", metavar="ID", help="an alert id (6 or more of its hex digits)")
    show.set_defaults(handler=handle_show)
    setting = actions.add_parser(
        "set", parents=[_common()], help="record what you decided about alerts: one, several, or a summary",
        description="Set the state, note and links of alerts at once: those named by id, every alert of a summary "
                    "(--summary RUN), or the named alerts of that summary. Who and when are stored with them; an "
                    "alert that says so already is not written again.")
    setting.add_argument("alert", metavar="ID", nargs="*", help="alert ids (6 or more of their hex digits each)")
    setting.add_argument("--summary", default=None, metavar="RUN",
                         help="the alerts of this summary (its run id; 'report alerts summaries' lists them)")
    setting.add_argument("--state", required=True, choices=STATES, help="the new state")
    setting.add_argument("--note", default="", help="why (at most 2000 characters)")
    setting.add_argument("--link", action="append", default=[], metavar="URL_OR_COMMIT",
                         help="a commit hash or an http(s) URL (an issue, a merge request); repeatable")
    setting.add_argument("--by", default=None, metavar="NAME",
                         help="who decides (default: $USER, else the name of the account running madengine)")
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


def _counts(summary) -> str:
    return (f"{summary.count('regression')} regression(s), {summary.count('improvement')} improvement(s), "
            f"{summary.untriaged} untriaged")


def handle_summaries(args: argparse.Namespace, env: Environment) -> ExitStatus:
    from madengine.cli.render import table
    from madengine.core.errors import InputError
    from madengine.database import list_summaries
    from madengine.database.alerts import change_words

    if args.limit < 0:
        raise InputError(f"must be 0 or more, got {args.limit}", path="--limit")
    made = list_summaries(args.db_url, env.environ, args.table, states=args.state, kinds=args.kind,
                          limit=args.limit or None)
    if args.json:
        env.data(json.dumps({"summaries": [s.to_json() for s in made]}, indent=1))
    else:
        blocks = []
        for summary in made:
            commits = "; ".join(c["range"] for c in summary.commits)
            head = f"summary {summary.summary_id}  {summary.started_at}  {_counts(summary)}" + \
                (f"  commits {commits}" if commits else "")
            rows = [(a.alert_id, a.state, a.metric, change_words(a.size_percent, a.kind),
                     a.change.get("identity", a.model), f"{a.confidence:.3f}") for a in summary.alerts]
            blocks.append(head + "\n" + table(("id", "state", "metric", "change", "result", "confidence"), rows))
        env.data("\n\n".join(blocks))
    env.message(f"madengine: {len(made)} alert summar{'y' if len(made) == 1 else 'ies'}")
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


def account_name(environ) -> str:
    """Who runs madengine: $USER, $USERNAME, else the name of the account (an empty $USER in a
    container or a cron job)."""
    name = environ.get("USER") or environ.get("USERNAME") or ""
    if not name:
        try:
            import pwd

            name = pwd.getpwuid(os.getuid()).pw_name
        except (ImportError, KeyError):  # no such account in the password database (a container's uid)
            name = ""
    return name


def handle_set(args: argparse.Namespace, env: Environment) -> ExitStatus:
    from madengine.database import set_alerts, triage

    by = args.by if args.by is not None else account_name(env.environ)
    outcome = set_alerts(args.alert, lambda: triage(args.state, args.note, args.link, by, prefix="--"),
                         args.db_url, env.environ, args.table, summary=args.summary)
    one = len(args.alert) == 1 and args.summary is None
    if args.json:
        env.data(json.dumps(outcome.alerts[0].to_json() if one else outcome.to_json(), indent=1))
    what = f"summary {outcome.summary}: " if outcome.summary else ""
    if len(outcome.unchanged) == 1:
        alert = outcome.unchanged[0]
        env.message(f"madengine: {what}alert {alert.alert_id} ({alert.change.get('identity', alert.model)}) is "
                    f"{alert.state} already, with this note and these links: nothing written")
    elif outcome.unchanged:
        env.message(f"madengine: {what}{len(outcome.unchanged)} alerts say so already (state, note and links): "
                    f"nothing written for them")
    if outcome.changed:
        alert = outcome.changed[0]
        shown = f"alert {alert.alert_id} ({alert.change.get('identity', alert.model)}) is" \
            if len(outcome.changed) == 1 else f"{len(outcome.changed)} alerts are"
        env.message(f"madengine: {what}{shown} now {alert.state}, by {alert.updated_by}")
    return ExitStatus.OK
