"""madengine report: update-perf, to-html, to-email, compare (and collect, owned by its own module)."""

from __future__ import annotations

import argparse
import functools
import json
from pathlib import Path
from typing import TYPE_CHECKING

from madengine.cli.commands import report_alerts, report_collect, report_serve, report_trace_diff
from madengine.cli.env import Environment
from madengine.cli.flags import add_perf_csv_argument
from madengine.core.errors import CredentialError, ExitStatus, InputError
from madengine.cli.commands import SUMMARIES

if TYPE_CHECKING:
    from madengine.reports.mail import SmtpSettings

SMTP_ENV = ("MADENGINE_SMTP_HOST", "MADENGINE_SMTP_PORT", "MADENGINE_SMTP_TO", "MADENGINE_SMTP_FROM",
            "MADENGINE_SMTP_USER", "MADENGINE_SMTP_PASSWORD")


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("report", help=SUMMARIES["report"],
                                   description="Append results to perf.csv and turn perf.csv files into reports.")
    parser.set_defaults(handler=functools.partial(_usage, parser))
    commands = parser.add_subparsers(dest="report_command",
                                     metavar="{update-perf,to-html,to-email,compare,regressions,alerts,collect,trace-diff,serve}")
    _add_update_perf(commands)
    _add_to_html(commands)
    _add_to_email(commands)
    _add_compare(commands)
    _add_regressions(commands)
    report_alerts.add_subparser(commands)
    report_collect.add_subparser(commands)
    report_trace_diff.add_subparser(commands)
    report_serve.add_subparser(commands)


def _usage(parser: argparse.ArgumentParser, args: argparse.Namespace, env: Environment) -> ExitStatus:
    parser.print_help(env.stderr)
    return ExitStatus.BAD_INPUT


# --- update-perf -------------------------------------------------------------------------------

def _add_update_perf(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser("update-perf", help="append a result (JSON or multiple_results CSV) to perf.csv",
                                 description="Append one result to perf.csv (created with the standard header when "
                                             "missing). Existing rows are never rewritten or lost; columns the file "
                                             "lacks are added at the end.")
    result = parser.add_mutually_exclusive_group()
    result.add_argument("--single_result", "--single-result", dest="single_result", metavar="JSON",
                        help="a result object (or list of them); status SUCCESS when it has a numeric performance")
    result.add_argument("--exception-result", "--exception_result", dest="exception_result", metavar="JSON",
                        help="the result of a run that raised: recorded as FAILURE")
    result.add_argument("--failed-result", "--failed_result", dest="failed_result", metavar="JSON",
                        help="the result of a run that failed: recorded as FAILURE")
    result.add_argument("--multiple-results", "--multiple_results", dest="multiple_results", metavar="CSV",
                        help="a multiple_results CSV (model, performance, metric, extra columns): one row per line")
    parser.add_argument("--perf-csv", "--perf_csv", "--csv-file-path", dest="perf_csv", default="perf.csv", metavar="CSV",
                        help="perf.csv to append to (default: perf.csv)")
    parser.add_argument("--model-name", "--model_name", dest="model_name", default=None,
                        help="model name: prefix of multiple_results rows ('<name>_<row model>'); "
                             "the model of a JSON result that names none")
    parser.add_argument("--common-info", "--common_info", dest="common_info", default=None, metavar="JSON",
                        help="run details shared by every row (a JSON object); the result's own values win")
    parser.add_argument("--json", action="store_true", help="print the appended rows as JSON on stdout")
    parser.set_defaults(handler=handle_update_perf)


def handle_update_perf(args: argparse.Namespace, env: Environment) -> ExitStatus:
    from madengine.reports.update_perf import update_perf

    def path(value: str | None) -> Path | None:
        return Path(value) if value else None

    rows = update_perf(Path(args.perf_csv), single_result=path(args.single_result),
                       exception_result=path(args.exception_result), failed_result=path(args.failed_result),
                       multiple_results=path(args.multiple_results), model_name=args.model_name,
                       common_info=path(args.common_info))
    if args.json:
        env.data(json.dumps(rows, indent=1))
    env.message(f"madengine: appended {len(rows)} row(s) to {args.perf_csv}" if rows
                else f"madengine: no result given; {args.perf_csv} exists with its header")
    return ExitStatus.OK


# --- to-html -----------------------------------------------------------------------------------

def _add_to_html(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser("to-html", help="write perf.html (self-contained page) from perf.csv",
                                 description="Write one self-contained HTML page (summary, charts, sortable and "
                                             "filterable tables) from a perf.csv, beside it by default.")
    add_perf_csv_argument(parser, "--csv-file-path", "--csv_file_path", help="the perf.csv to report on")
    parser.add_argument("-o", "--output", default=None, metavar="HTML",
                        help="page to write (default: the CSV's name with .html, beside it)")
    parser.set_defaults(handler=handle_to_html)


def handle_to_html(args: argparse.Namespace, env: Environment) -> ExitStatus:
    from madengine.reports.html import csv_to_html

    page = csv_to_html(Path(args.perf_csv), Path(args.output) if args.output else None)
    env.data(str(page))
    return ExitStatus.OK


# --- to-email ----------------------------------------------------------------------------------

def _add_to_email(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser("to-email", help="one HTML email body from every CSV in a folder; optionally send it",
                                 description="Write one HTML email body with a section per CSV file of a folder "
                                             "(sorted by name). With an SMTP host it is also sent as a MIME message "
                                             "(text + HTML). SMTP settings fall back to the environment: "
                                             + ", ".join(SMTP_ENV) + " (the password only from the environment).")
    add_perf_csv_argument(parser, "--csv-file-path", "--csv_file_path", "--dir", default=None,
                          help="the perf.csv to report on, or a folder of CSV files (each one a section); default: "
                               "./perf.csv, else every CSV of the current folder")
    parser.add_argument("-o", "--output", default=None, metavar="HTML",
                        help="file to write the body to (default: DIR/run_results.html)")
    parser.add_argument("--subject", default=None, help="email subject (default: the summary counts)")
    smtp = parser.add_argument_group("sending (only when an SMTP host is given)")
    smtp.add_argument("--smtp-host", default=None, metavar="HOST", help="SMTP server [MADENGINE_SMTP_HOST]")
    smtp.add_argument("--smtp-port", type=int, default=None, metavar="PORT",
                      help="SMTP port (default 25, or 465 with --smtp-ssl) [MADENGINE_SMTP_PORT]")
    smtp.add_argument("--to", action="append", default=[], metavar="ADDR",
                      help="recipient; repeat or comma-separate [MADENGINE_SMTP_TO]")
    smtp.add_argument("--from", dest="sender", default=None, metavar="ADDR", help="sender [MADENGINE_SMTP_FROM]")
    smtp.add_argument("--smtp-user", default=None, metavar="USER",
                      help="log in as USER with the password in MADENGINE_SMTP_PASSWORD [MADENGINE_SMTP_USER]")
    smtp.add_argument("--smtp-ssl", action="store_true",
                      help="implicit TLS (SMTPS); without it STARTTLS is used whenever the server offers it")
    smtp.add_argument("--smtp-timeout", type=_smtp_timeout, default=30.0, metavar="SECONDS",
                      help="connection timeout")
    parser.set_defaults(handler=handle_to_email)


def _smtp_timeout(text: str) -> float:
    from madengine.core.values import seconds

    value = seconds(text, maximum=3600)
    if not value:
        raise argparse.ArgumentTypeError(f"'{text}' is not a number of seconds (more than 0, at most 3600)")
    return value


def _recipients(values: list[str]) -> list[str]:
    return [address.strip() for value in values for address in value.split(",") if address.strip()]


def smtp_settings(args: argparse.Namespace, environ) -> "SmtpSettings | None":
    """SMTP settings from flags, then the environment; None when no host is set (write only)."""
    from madengine.core.redact import register_secret, register_username
    from madengine.reports.mail import SmtpSettings

    host = args.smtp_host or environ.get("MADENGINE_SMTP_HOST", "")
    if not host:
        return None
    from madengine.core.values import port_number

    from_flag = args.smtp_port is not None
    port_text = str(args.smtp_port) if from_flag else environ.get("MADENGINE_SMTP_PORT", "")
    port = port_number(port_text) if port_text else (465 if args.smtp_ssl else 25)
    if port is None:
        raise InputError(f"'{port_text}' is not a port number (1-65535)",
                         path="--smtp-port" if from_flag else "MADENGINE_SMTP_PORT")
    user = args.smtp_user or environ.get("MADENGINE_SMTP_USER") or None
    password = environ.get("MADENGINE_SMTP_PASSWORD") or None
    if password:
        register_secret(password)
        register_username(user)
    if user and not password:
        raise CredentialError("an SMTP user needs a password", path="MADENGINE_SMTP_PASSWORD",
                              hint="set it in the environment; it is never taken from the command line")
    return SmtpSettings(host=host, port=port, sender=args.sender or environ.get("MADENGINE_SMTP_FROM", ""),
                        recipients=_recipients(args.to or [environ.get("MADENGINE_SMTP_TO", "")]),
                        user=user, password=password, use_ssl=args.smtp_ssl, timeout=args.smtp_timeout)


def handle_to_email(args: argparse.Namespace, env: Environment) -> ExitStatus:
    from madengine.reports.mail import send_email, write_email

    settings = smtp_settings(args, env.environ)
    if settings and (not settings.sender or not settings.recipients):
        raise InputError("sending needs --from and --to", path="--from/--to",
                         hint="or set MADENGINE_SMTP_FROM and MADENGINE_SMTP_TO")
    target, body = write_email(Path(args.perf_csv or ("perf.csv" if Path("perf.csv").is_file() else ".")), Path(args.output) if args.output else None, args.subject)
    env.data(str(target))
    env.message(f"madengine: email body of {len(body.files)} file(s) written to {target}")
    if settings:
        send_email(body, settings)
        env.message(f"madengine: sent to {', '.join(settings.recipients)} via {settings.host}:{settings.port}")
    return ExitStatus.OK


# --- compare -----------------------------------------------------------------------------------

DEFAULT_THRESHOLD_PERCENT = 3.0  # madengine.stats.compare.DEFAULT_MIN_EFFECT in percent (not imported: --help stays light)

def _threshold(text: str) -> float:
    from madengine.core.values import seconds  # a finite non-negative number, like a duration

    value = seconds(text.strip().rstrip("%"), maximum=float("inf"))
    if value is None:
        raise argparse.ArgumentTypeError(f"'{text}': must be 0 or more (a finite percentage)")
    return value


def _add_compare(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "compare", help="compare two perf.csv files, folders of repeated runs, or two runs per result",
        description="Per result identity (model, metric, tag configs, executor, GPU, n_gpus, backend): every "
                    "sample on each side, a Mann-Whitney U test (alpha 0.05) and the ratio new/old with a 95%% CI; "
                    "with --old-run/--new-run, a result with fewer than 3 samples on a side is judged against its "
                    "history in the database (a prediction interval from its stable segment, 1%% false alarms). "
                    "Verdicts: faster, slower, unchanged, inconclusive (too few samples, or too noisy "
                    "to tell), new, missing. Metrics where lower is better (times, latencies) count in reverse. "
                    "See docs/statistics.md.")
    parser.add_argument("--perf-csv", dest="perf_csvs", action="append", default=[], metavar="CSV",
                        help="OLD, then NEW (instead of the positional OLD NEW)")
    parser.add_argument("files", nargs="*", metavar="OLD NEW",
                        help="two perf.csv files, or two folders of repeated runs (their perf.csv and samples.json)")
    parser.add_argument("--old-run", default=None, metavar="ID", help="run id of the old results in the database")
    parser.add_argument("--new-run", default=None, metavar="ID", help="run id of the new results in the database")
    parser.add_argument("--db-url", default=None, metavar="URL",
                        help="results database (default: MADENGINE_DB_URL, else the embedded SQLite file)")
    parser.add_argument("--threshold", type=_threshold, default=DEFAULT_THRESHOLD_PERCENT, metavar="PERCENT",
                        help="minimum effect size: a significant change smaller than this is not called faster or "
                             f"slower, and a CI inside 1 +/- this is unchanged (default {DEFAULT_THRESHOLD_PERCENT:g})")
    parser.add_argument("--across-environments", action="store_true",
                        help="also compare a result with its one counterpart that ran in another environment "
                             "(executor, GPU, n_gpus or backend differ); prints a warning for each")
    parser.add_argument("--json", action="store_true", help="print the comparison as JSON on stdout")
    parser.add_argument("--fail-on-regression", action="store_true",
                        help="exit 1 when any result is significantly slower")
    parser.set_defaults(handler=handle_compare)


def handle_compare(args: argparse.Namespace, env: Environment) -> ExitStatus:
    from madengine.reports.compare import compare_paths, compare_runs
    from madengine.stats.compare import ALPHA

    threshold = args.threshold / 100
    files = [*args.perf_csvs, *args.files]
    by_runs = args.old_run is not None or args.new_run is not None
    if by_runs and (files or not (args.old_run and args.new_run)):
        raise InputError("give either two perf.csv files or folders, or both --old-run and --new-run", path="compare")
    if by_runs:
        old, new = args.old_run, args.new_run
        result = compare_runs(args.db_url, old, new, threshold, environ=env.environ,
                              across_environments=args.across_environments)
    elif len(files) == 2:
        old, new = files
        result = compare_paths(Path(old), Path(new), threshold, across_environments=args.across_environments)
    else:
        raise InputError(f"expected two perf.csv files or folders (OLD NEW), got {len(files)}", path="compare",
                         hint="or use --old-run ID --new-run ID")
    tally = result.counts()
    for warning in result.warnings:
        env.message(f"madengine: warning: {warning}")
    if args.json:
        env.data(json.dumps({"old": old, "new": new, "threshold_percent": args.threshold, "alpha": ALPHA,
                             "counts": tally, "warnings": result.warnings,
                             "models": [c.to_json() for c in result.comparisons]}, indent=1))
    else:
        _print_comparison(env, result.comparisons)
    env.message("madengine: " + ", ".join(f"{n} {verdict}" for verdict, n in tally.items()))
    if args.fail_on_regression and result.regressed:
        return ExitStatus.FAILED
    return ExitStatus.OK


def _print_comparison(env: Environment, results) -> None:
    from madengine.cli.render import table
    from madengine.reports.metrics import format_change, format_number, format_ratio

    def interval(c) -> str:
        if c.ci_low is None or c.ci_high is None:
            return ""
        return f"{format_ratio(c.ci_low)}..{format_ratio(c.ci_high)}"

    def method(c) -> str:  # the Comparison's method, shortly: the U test, the history's prediction interval, n < 3
        return "history" if c.method.startswith("prediction") else ("U test" if c.method.startswith("Mann") else "n<3")

    rows = [(c.identity.label(), c.metric, "lower" if c.lower_is_better else "higher", format_number(c.old.median),
             format_number(c.new.median), f"{len(c.old.samples)}/{len(c.new.samples)}", format_ratio(c.ratio),
             interval(c), "" if c.change is None else format_change(c.change), c.verdict,
             method(c) if c.method else "") for c in results]
    env.data(table(("result", "metric", "better", "old", "new", "n", "ratio", "95% CI", "change", "verdict", "by"), rows))



# --- regressions -------------------------------------------------------------------------------

def _add_regressions(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "regressions", help="change points in the history of every result (database or perf.csv)",
        description="Per result identity, in time order, E-divisive means change-point detection (as Apache "
                    "Otava/hunter) over the runs of the results database (default) or of a perf.csv. Each change: "
                    "its size, confidence, and the runs either side. See docs/statistics.md.")
    parser.add_argument("csv", nargs="?", default=None, metavar="CSV",
                        help="a perf.csv holding many runs (default: the results database)")
    add_perf_csv_argument(parser, default=None, help="the same as the positional CSV")
    parser.add_argument("--db-url", default=None, metavar="URL",
                        help="results database (default: MADENGINE_DB_URL, TUNA_DB_*, else the embedded SQLite file)")
    parser.add_argument("--table", default=None, metavar="NAME", help="results table (default dlm_table)")
    parser.add_argument("--model", action="append", default=[], metavar="NAME",
                        help="only this model (repeat for several)")
    parser.add_argument("--json", action="store_true", help="print the changes as JSON on stdout")
    parser.add_argument("--fail-on-regression", action="store_true",
                        help="exit 1 when a result's latest change is a regression (still in effect)")
    parser.set_defaults(handler=handle_regressions)


def handle_regressions(args: argparse.Namespace, env: Environment) -> ExitStatus:
    from madengine.reports.regressions import regressions_in_csv, regressions_in_database

    args.perf_csv = args.perf_csv or args.csv
    if args.perf_csv and (args.db_url or args.table):
        raise InputError("give a perf.csv or --db-url/--table, not both", path="regressions")
    if args.perf_csv:
        report = regressions_in_csv(Path(args.perf_csv), args.model)
    else:
        report = regressions_in_database(args.db_url, env.environ, args.table, args.model)
    if args.json:
        env.data(json.dumps({"source": report.source, "series": report.series, "too_short": report.too_short,
                             "counts": report.counts(), "changes": [c.to_json() for c in report.changes]}, indent=1))
    elif report.changes:
        _print_changes(env, report.changes)
    tally = report.counts()
    env.message(f"madengine: {report.series} result(s) with enough runs, {report.too_short} with fewer than 6; "
                f"{tally['regression']} regression(s), {tally['improvement']} improvement(s)")
    for change in report.current_regressions:
        env.message(f"madengine: {change.identity.label()} regressed at run {change.after_run.run}; "
                    f"where to look next: {change.trace_diff()}")
    if args.fail_on_regression and report.current_regressions:
        return ExitStatus.FAILED
    return ExitStatus.OK


def _print_changes(env: Environment, changes) -> None:
    from madengine.cli.render import table
    from madengine.reports.metrics import format_change, format_number

    rows = [(c.identity.label(), c.identity.metric, c.kind,
             format_change(c.point.size), f"{c.point.confidence:.4f}",
             f"{c.before_run.run} {c.before_run.started_at}".strip(), f"{c.after_run.run} {c.after_run.started_at}".strip(),
             f"{format_number(c.point.before.mean)} -> {format_number(c.point.after.mean)}") for c in changes]
    env.data(table(("result", "metric", "change", "size", "confidence", "last run before", "first run after",
                    "mean before -> after"), rows))
