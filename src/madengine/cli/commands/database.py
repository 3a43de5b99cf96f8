"""madengine database: store perf.csv results in SQLite (default), MySQL/MariaDB or MongoDB."""

from __future__ import annotations

import argparse
import json

from madengine.cli.env import CliReporter, Environment
from madengine.core.errors import ExitStatus
from madengine.cli.commands import SUMMARIES

DEFAULT_TABLE = "dlm_table"  # mirrors madengine.database.DEFAULT_TABLE without importing it for --help

DESCRIPTION = """Store perf.csv results in a database: an embedded SQLite file by default
(madengine.db in the current folder), MySQL/MariaDB or MongoDB by URL. perf.csv stays the
source of truth: an import can always be repeated and never duplicates rows."""

ENVIRONMENT_HELP = """database selection (first that applies):
  --db-url URL             sqlite:///FILE, sqlite:////ABS/FILE, mysql://USER:PASS@HOST:PORT/DB,
                           mongodb://[USER:PASS@]HOST:PORT[/DB]
  MADENGINE_DB_URL         the same, from the environment
  TUNA_DB_HOSTNAME, TUNA_DB_PORT, TUNA_DB_USER_NAME, TUNA_DB_USER_PASSWORD, TUNA_DB_NAME
                           MySQL, when TUNA_DB_HOSTNAME is set (the original tool's variables)
  sqlite:///madengine.db   otherwise
upload-mongodb: --db-url, a mongodb:// MADENGINE_DB_URL, else MONGO_HOST, MONGO_PORT, MONGO_USER,
  MONGO_PASSWORD (MONGO_AUTH_SOURCE, MONGO_TIMEOUT_MS). Passwords are never printed.
"""


def _common(json_help: str) -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--db-url", metavar="URL", default=None,
                        help="database URL (default: $MADENGINE_DB_URL, TUNA_DB_*, else sqlite:///madengine.db)")
    common.add_argument("--json", action="store_true", help=json_help)
    return common


def _table_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--table", default=DEFAULT_TABLE, metavar="NAME",
                        help=f"results table (MongoDB: collection) name (default: {DEFAULT_TABLE})")


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("database", help=SUMMARIES["database"],
                                   description=DESCRIPTION, epilog=ENVIRONMENT_HELP,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.set_defaults(handler=lambda args, env: _usage(parser, env))
    actions = parser.add_subparsers(dest="database_command", metavar="{create-table,update-table,upload-mongodb,list-runs}",
                                    parser_class=type(parser))

    create = actions.add_parser("create-table", parents=[_common("print the outcome as JSON on stdout")],
                                help="create the results table (idempotent)",
                                description="Create the results table, or add columns a newer madengine defines. "
                                            "Running it again changes nothing.")
    _table_option(create)
    create.set_defaults(handler=handle_create_table)

    update = actions.add_parser("update-table", parents=[_common("print the import counts as JSON on stdout")],
                                help="import the rows of a perf.csv that the database does not have yet",
                                description="Import a perf.csv, streamed (never held whole): rows already stored are "
                                            "skipped (content key); new SUCCESS rows get relative_change against the "
                                            "latest 5 runs of the same result identity after its last change point; "
                                            "every result series the import touched gets its change points (alerts: "
                                            "'madengine report alerts') and its latest run's verdict before it "
                                            "returns. Long imports say how far they got on stderr.")
    update.add_argument("--perf-csv", "--csv-file-path", dest="csv_file_path", required=True, metavar="FILE",
                        help="the perf.csv to import")
    update.add_argument("--model-json-path", default=None, metavar="FILE",
                        help="models.json whose tags/args/n_gpus/training_precision fill empty cells")
    _table_option(update)
    update.set_defaults(handler=handle_update_table)

    upload = actions.add_parser("upload-mongodb", parents=[_common("print the upload counts as JSON on stdout")],
                                help="upsert job or run documents into MongoDB",
                                description="Upsert documents into MongoDB, keyed by run id: uploading again "
                                            "changes nothing, a later run never overwrites an earlier one. "
                                            "--type run: one document per result row; --type job: one per job "
                                            "(JSON object, or the rows of one run id of a CSV).")
    upload.add_argument("--type", dest="upload_type", required=True, choices=("job", "run"), help="document kind")
    upload.add_argument("--file-path", "--csv-file-path", dest="file_path", required=True, metavar="PATH",
                        help="a .csv/.json file, or a folder whose .csv/.json files are uploaded")
    upload.add_argument("--name", required=True, help="name stored in every document (the model or job name)")
    upload.add_argument("--database", "--database-name", dest="database", default=None, metavar="DB",
                        help="database (default: the URL's, else 'madengine')")
    upload.add_argument("--collection", "--collection-name", dest="collection", default=None, metavar="NAME",
                        help="collection (default: 'jobs' or 'runs' after --type)")
    upload.set_defaults(handler=handle_upload_mongodb)

    runs = actions.add_parser("list-runs", parents=[_common("print a JSON array of the runs on stdout")],
                              help="list the run ids stored in the database",
                              description="List the run ids of the results table with their row counts.")
    _table_option(runs)
    runs.set_defaults(handler=handle_list_runs)


def _usage(parser: argparse.ArgumentParser, env: Environment) -> ExitStatus:
    parser.print_help(env.stderr)
    return ExitStatus.BAD_INPUT


def handle_create_table(args: argparse.Namespace, env: Environment) -> ExitStatus:
    from madengine.database import create_table

    result = create_table(args.db_url, env.environ, table=args.table, reporter=CliReporter(env))
    if args.json:
        env.data(json.dumps(result.to_json(), indent=1))
    if result.created:
        env.message(f"madengine: created table '{result.table}' in {result.url}")
    else:
        added = f"; added columns: {', '.join(result.added_columns)}" if result.added_columns else ""
        env.message(f"madengine: table '{result.table}' already exists in {result.url}{added}")
    return ExitStatus.OK


def handle_update_table(args: argparse.Namespace, env: Environment) -> ExitStatus:
    from madengine.database import update_table

    result = update_table(args.csv_file_path, args.db_url, env.environ, model_json_path=args.model_json_path,
                          table=args.table, reporter=CliReporter(env))
    if args.json:
        env.data(json.dumps(result.to_json(), indent=1))
    unread = f", {result.unread} of them read by an earlier import" if result.unread else ""
    env.message(f"madengine: {result.csv_file}: {result.rows} row(s), {result.inserted} inserted, "
                f"{result.already_stored} already stored{unread} ({result.url}, table '{result.table}')"
                + (f"; {result.new_alerts} new alert(s) ('madengine report alerts list')" if result.new_alerts else ""))
    return ExitStatus.OK


def handle_upload_mongodb(args: argparse.Namespace, env: Environment) -> ExitStatus:
    from madengine.database import upload_mongodb

    result = upload_mongodb(args.upload_type, args.file_path, args.name, args.db_url, env.environ,
                            database=args.database, collection=args.collection)
    if args.json:
        env.data(json.dumps(result.to_json(), indent=1))
    env.message(f"madengine: {result.documents} {result.kind} document(s) from {len(result.files)} file(s) to "
                f"{result.database}.{result.collection} ({result.url}): {result.inserted} inserted, "
                f"{result.updated} updated, {result.unchanged} unchanged")
    return ExitStatus.OK


def handle_list_runs(args: argparse.Namespace, env: Environment) -> ExitStatus:
    from madengine.database import list_runs

    runs = list_runs(args.db_url, env.environ, table=args.table)
    if args.json:
        env.data(json.dumps([run.to_json() for run in runs], indent=1))
        return ExitStatus.OK
    from madengine.cli.render import table

    rows = [(r.run_id, r.started_at or "-", r.machine_name, r.models, r.rows, r.success, r.failure, r.skipped)
            for r in runs]
    env.data(table(("run_id", "started", "machine", "models", "rows", "success", "failure", "skipped"), rows))
    env.message(f"madengine: {len(runs)} run(s)")
    return ExitStatus.OK
