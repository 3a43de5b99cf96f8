"""``madengine report serve``: the live results dashboard over the results database.

Registered by ``madengine report``; the work is :mod:`madengine.server` (Starlette and uvicorn, the
``serve`` extra, imported only here, when the command runs).
"""

from __future__ import annotations

import argparse
import importlib.util

from madengine.cli.env import CliReporter, Environment
from madengine.core.errors import ConfigError, ExitStatus, InputError

TOKEN_VARIABLE = "MADENGINE_DASHBOARD_TOKEN"


def _port(text: str) -> int:
    if not text.strip().isdigit() or not 0 <= int(text) <= 65535:
        raise argparse.ArgumentTypeError(f"'{text}' is not a port number (0-65535; 0: any free port)")
    return int(text)


def _allowed_host(text: str) -> str:
    from madengine.server.config import normalize_host

    try:
        return normalize_host(text)
    except InputError as exc:
        raise argparse.ArgumentTypeError(exc.message) from None


def add_subparser(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``serve`` subcommand to ``madengine report``'s subparsers."""
    parser = subparsers.add_parser(
        "serve", help="the live results dashboard (web pages and a JSON API) over the results database",
        description="Serve pages and a JSON API (/api/...) over the results database: the latest result of every "
                    "result identity, failures first with their reasons, trends with change points, run details with "
                    "their logs, comparisons of two runs, detected changes. Read-only. Pages update while runs record "
                    "rows (madengine run --db-url). See docs/dashboard.md.")
    parser.add_argument("--db-url", default=None, metavar="URL",
                        help="results database: sqlite:///FILE or mysql://USER:PASSWORD@HOST:PORT/DB (default: "
                             "MADENGINE_DB_URL, TUNA_DB_*, else the embedded SQLite file madengine.db)")
    parser.add_argument("--table", default=None, metavar="NAME", help="results table (default dlm_table)")
    parser.add_argument("--host", default="127.0.0.1",
                        help="address to listen on (default 127.0.0.1: this machine only; 0.0.0.0: every network)")
    parser.add_argument("--port", type=_port, default=8050, help="port (default 8050; 0: any free port)")
    parser.add_argument("--token", default=None,
                        help=f"access token every request must carry (default: {TOKEN_VARIABLE}); without it: 401. "
                             "Needed for any --host other machines can reach, unless --no-auth")
    parser.add_argument("--no-auth", action="store_true",
                        help="serve an address other machines can reach without a token: anyone on the network can "
                             "read the results")
    parser.add_argument("--allowed-host", action="append", default=[], type=_allowed_host, metavar="NAME",
                        help="a host name (or address) requests may use besides localhost, the --host address and, "
                             "when it is not loopback, this machine's name; repeatable (a proxy's name, say). Any "
                             "other Host header is 421 (no DNS rebinding)")
    parser.add_argument("--runs-dir", default="madengine_runs", metavar="DIR",
                        help="the runs folder whose logs, artifacts and trace.json the pages link to; no other file "
                             "is ever served (default: madengine_runs)")
    parser.add_argument("--perf-csv", action="append", default=[], metavar="CSV",
                        help="import this perf.csv into the database first (as 'database update-table': streamed, "
                             "rows already stored skipped, progress on long files); repeatable")
    parser.set_defaults(handler=handle)


def _import_first(args: argparse.Namespace, env: Environment, table: str) -> None:
    """``--perf-csv``: the files into the database before it is served (one line each)."""
    from pathlib import Path

    from madengine.database import update_table

    for path in args.perf_csv:
        result = update_table(Path(path), args.db_url, env.environ, table=table, reporter=CliReporter(env))
        env.message(f"madengine: {result.csv_file}: {result.rows} row(s), {result.inserted} imported, "
                    f"{result.already_stored} already stored, {result.new_alerts} new alert(s)")


def handle(args: argparse.Namespace, env: Environment) -> ExitStatus:
    from pathlib import Path

    from madengine.core.redact import register_secret
    from madengine.database import DEFAULT_TABLE, resolve_sql_url
    from madengine.database.urls import check_identifier

    url = resolve_sql_url(args.db_url, env.environ)
    if url.scheme == "mongodb":
        raise InputError("the dashboard reads SQL results databases (SQLite, MySQL/MariaDB)", path="--db-url",
                         hint="import the perf.csv files into SQLite or MySQL with 'madengine database update-table'")
    table = check_identifier(args.table or DEFAULT_TABLE, "table")
    missing = [name for name in ("starlette", "uvicorn") if importlib.util.find_spec(name) is None]
    if missing:
        raise ConfigError(f"the dashboard needs {' and '.join(missing)}", path="report serve",
                          hint="pip install 'madengine[serve]'")
    token = args.token if args.token is not None else (env.environ.get(TOKEN_VARIABLE) or "")
    token = token.strip()
    register_secret(token)
    if args.no_auth and token:
        raise InputError(f"a token is set ({'--token' if args.token is not None else TOKEN_VARIABLE})",
                         path="--no-auth", hint="drop one of them")
    _import_first(args, env, table)
    from madengine.server.config import ServerConfig
    from madengine.server.serve import serve

    config = ServerConfig(url=url, table=table, runs_dir=Path(args.runs_dir), host=args.host, port=args.port,
                          token=token, no_auth=args.no_auth, allowed_hosts=tuple(args.allowed_host))
    serve(config, CliReporter(env))
    return ExitStatus.OK
