"""Results databases: an embedded SQLite file by default, MySQL/MariaDB (pymysql) or MongoDB
(pymongo) by URL. perf.csv stays the source of truth; the database is an index of it that an
``update-table`` can always bring up to date. Database drivers are imported only when used.
"""

from madengine.database.api import (CreateResult, ImportResult, create_table, fetch_history, fetch_run, list_runs,
                                    update_table, upload_mongodb)
from madengine.database.mongo import UPLOAD_TYPES, UploadResult
from madengine.database.rows import BASELINE_WINDOW
from madengine.database.sql import DEFAULT_TABLE, RunInfo
from madengine.database.urls import DbUrl, mask_url, parse_url, resolve_mongo_url, resolve_sql_url

__all__ = [
    "CreateResult", "ImportResult", "UploadResult", "RunInfo", "DbUrl", "BASELINE_WINDOW", "DEFAULT_TABLE",
    "UPLOAD_TYPES", "create_table", "update_table", "fetch_history", "fetch_run", "list_runs", "upload_mongodb", "mask_url",
    "parse_url", "resolve_sql_url", "resolve_mongo_url",
]
