"""Results databases: an embedded SQLite file by default, MySQL/MariaDB (pymysql) or MongoDB
(pymongo) by URL. perf.csv stays the source of truth; the database is an index of it that an
``update-table`` can always bring up to date. Database drivers are imported only when used.
"""

from madengine.core.lazy import lazy_exports

#: each public name and the module that defines it, imported on first use: ``run`` reaches
#: ``database.live`` for every command, and the drivers' modules cost ~80 ms to import
_HOMES = {
    **dict.fromkeys(("CreateResult", "ImportResult", "create_table", "fetch_history", "fetch_run", "list_runs",
                     "update_table", "upload_mongodb", "list_alerts", "set_alert", "show_alert", "fetch_references",
                     "list_summaries", "set_alerts", "TriageOutcome"), "api"),
    **dict.fromkeys(("Alert", "STATES", "Triage", "triage", "precision"), "alerts"),
    **dict.fromkeys(("UPLOAD_TYPES", "UploadResult"), "mongo"),
    "BASELINE_WINDOW": "rows",
    **dict.fromkeys(("DEFAULT_TABLE", "RunInfo"), "sql"),
    **dict.fromkeys(("DbUrl", "mask_url", "parse_url", "resolve_mongo_url", "resolve_sql_url"), "urls"),
}


__getattr__ = lazy_exports(__name__, {name: f"{__name__}.{home}" for name, home in _HOMES.items()})


__all__ = [
    "CreateResult", "ImportResult", "UploadResult", "RunInfo", "DbUrl", "BASELINE_WINDOW", "DEFAULT_TABLE",
    "UPLOAD_TYPES", "create_table", "update_table", "fetch_history", "fetch_run", "list_runs", "upload_mongodb", "mask_url",
    "parse_url", "resolve_sql_url", "resolve_mongo_url", "Alert", "STATES", "Triage", "triage", "precision",
    "list_alerts", "set_alert", "show_alert", "fetch_references", "list_summaries", "set_alerts", "TriageOutcome",
]
