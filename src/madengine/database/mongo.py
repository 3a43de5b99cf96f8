"""MongoDB (pymongo): the results collection behind ``--db-url mongodb://...`` and the documents
of ``upload-mongodb``.

Results collection (``create-table``/``update-table``/``list-runs``/``fetch_run``): one document per
perf.csv row, ``_id`` = the row's content key, written with ``$setOnInsert`` upserts so a
re-import changes nothing; ``seq`` orders documents by insertion. Beside it, as beside a SQL table
(:mod:`madengine.database.history_tables`): ``<collection>_series`` (one document per result
identity: its series state) and ``<collection>_alerts`` / ``<collection>_alert_log`` (alerts and
their triage), kept by the same import (:mod:`madengine.database.importer`), and ``<collection>_files``
(what the latest import of each perf.csv read of it: :class:`~.rows.FileMark`).

``upload-mongodb`` documents (see docs/database.md for their shape):

* ``--type run``: one document per result row, ``_id = run:<name>:<run_id>:<content key>``,
  written with ``$setOnInsert``: a document, once stored, is never overwritten, and a later run
  (another run id) always makes new documents.
* ``--type job``: one document per job (a JSON object, or the rows of one run id of a CSV),
  ``_id = job:<name>:<run_id>`` (the content hash when there is no run id), written with ``$set``:
  uploading the same job again refreshes it, a later run makes a new document.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import hashlib
import json
import sys
import time
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

from madengine.core.errors import CredentialError, InputError, MadEngineError, ServiceError
from madengine.core.values import MAX_TIMEOUT, brief, whole_number
from madengine.database import alerts as alertlib
from madengine.database.alerts import Alert
from madengine.database.files import FIELDS as FILE_FIELDS
from madengine.database.files import file_hash
from madengine.database.rows import IDENTITY_COLUMN, FileMark, ImportRow, content_keys
from madengine.database.series import ROW_COLUMNS, SeriesState
from madengine.database.sql import EXTRA_COLUMN, HISTORY_COLUMNS, RunInfo, TableState
from madengine.database.summary import text_hash
from madengine.database.urls import DEFAULT_MONGO_DATABASE, DbUrl
from madengine.results.columns import ALL_COLUMNS, Status
from madengine.results.identity import ResultIdentity
from madengine.results.parsing import as_number
from madengine.results.perfcsv import read_header, read_rows

DEFAULT_TIMEOUT_MS = 5000
_BATCH = 1000
_NUMERIC_COLUMNS = ("performance", "build_duration", "test_duration", "data_download_duration")
_AUTH_CODES = (13, 18)  # Unauthorized, AuthenticationFailed
UPLOAD_TYPES = ("job", "run")


# --- driver errors -> typed errors -------------------------------------------------------------

def _short(text: str) -> str:
    # the driver appends its whole topology description; the first clause says what went wrong
    return text.split(", Timeout:")[0].split(" (configured timeouts")[0][:240]


def _mongo_error(exc: Exception, url: DbUrl, errors: Any) -> MadEngineError:
    if isinstance(exc, errors.ConfigurationError):
        return InputError(f"bad MongoDB URL or option ({_short(str(exc))})", path=url.shown)
    if isinstance(exc, errors.BulkWriteError):
        first = (exc.details.get("writeErrors") or [{}])[0]
        return ServiceError(f"MongoDB rejected a write: {first.get('errmsg', exc)}", path=url.shown)
    if isinstance(exc, errors.OperationFailure):
        if exc.code in _AUTH_CODES:
            return CredentialError("MongoDB refused the credentials", path=url.shown,
                                   hint="check the user and password (--db-url or MONGO_USER/MONGO_PASSWORD)")
        return ServiceError(f"MongoDB error {exc.code}: {_short(str(exc))}", path=url.shown)
    if isinstance(exc, (errors.ConnectionFailure, errors.ServerSelectionTimeoutError)):
        return ServiceError(f"cannot reach the MongoDB server ({_short(str(exc))})", path=url.shown,
                            hint="start it or fix --db-url / MONGO_HOST; nothing was written, upload again later")
    return ServiceError(f"MongoDB error: {_short(str(exc))}", path=url.shown)


@contextlib.contextmanager
def mongo_errors(url: DbUrl) -> Iterator[None]:
    try:
        yield
    except MadEngineError:
        raise
    except Exception as exc:
        pymongo = sys.modules.get("pymongo")
        if pymongo is not None and isinstance(exc, pymongo.errors.PyMongoError):
            raise _mongo_error(exc, url, pymongo.errors) from None
        raise


def _pymongo() -> Any:
    """The pymongo module; without it every MongoDB command is the same install hint (exit 2)."""
    try:
        import pymongo
    except ImportError:
        raise ServiceError("MongoDB support needs the 'pymongo' package", hint="pip install 'madengine[db]'") from None
    return pymongo


def connect(url: DbUrl, environ: Mapping[str, str]) -> Any:
    """A ``MongoClient`` for ``url``; nothing is sent until the first command."""
    pymongo = _pymongo()
    raw = (environ.get("MONGO_TIMEOUT_MS") or "").strip()
    timeout_ms = whole_number(raw) if raw else DEFAULT_TIMEOUT_MS
    if timeout_ms is None or not 0 < timeout_ms <= MAX_TIMEOUT:
        raise InputError(f"must be a positive number of milliseconds, got {brief(raw)}", path="MONGO_TIMEOUT_MS")
    options: dict[str, Any] = {"appname": "madengine"}
    lowered = url.text.lower()
    if "serverselectiontimeoutms" not in lowered:
        options["serverSelectionTimeoutMS"] = timeout_ms
    if "connecttimeoutms" not in lowered:
        options["connectTimeoutMS"] = timeout_ms
    with mongo_errors(url):
        return pymongo.MongoClient(url.text, **options)


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc)


# --- the results collection --------------------------------------------------------------------

class MongoStore:
    """The results collection: the same operations as :class:`madengine.database.sql.SqlStore`."""

    def __init__(self, url: DbUrl, table: str, environ: Mapping[str, str], *, create: bool = False) -> None:
        self.url = url
        self.client = connect(url, environ)
        self.database = self.client[url.database or DEFAULT_MONGO_DATABASE]
        self.table = table
        self.collection = self.database[table]
        self._next_seq = 0
        self._keys: dict[int, str] = {}  # seq -> _id of the rows read for an import's series pass

    def __enter__(self) -> "MongoStore":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.client.close()

    def table_exists(self) -> bool:
        return self.table in self.database.list_collection_names(filter={"name": self.table})

    def require_table(self) -> None:
        if not self.table_exists():
            raise InputError(f"no results collection '{self.table}' yet", path=self.url.shown,
                             hint="'madengine database update-table --csv-file-path perf.csv' creates and fills it")

    def create_table(self) -> TableState:
        existed = self.table_exists()
        self.collection.create_index([("model", 1), ("gpu_architecture", 1), ("base_docker", 1), ("status", 1),
                                      ("seq", -1)], name=f"{self.table}_group")
        self.collection.create_index([("run_id", 1), ("seq", 1)], name=f"{self.table}_run")
        self.collection.create_index([(IDENTITY_COLUMN, 1), ("status", 1), ("seq", -1)], name=f"{self.table}_identity")
        if existed:
            self._fill_identity_keys()
        return TableState(created=not existed, added_columns=())

    def _fill_identity_keys(self) -> None:
        """Migration in place: documents an earlier release stored get their ``identity_key``
        (``{field: None}`` matches documents without the field)."""
        from pymongo import UpdateOne

        requests = [UpdateOne({"_id": d["_id"]}, {"$set": {IDENTITY_COLUMN: ResultIdentity.from_row(d).key()}})
                    for d in self.collection.find({IDENTITY_COLUMN: None})]
        for start in range(0, len(requests), _BATCH):
            self.collection.bulk_write(requests[start:start + _BATCH], ordered=False)

    def existing_keys(self, keys: Sequence[str]) -> set[str]:
        found: set[str] = set()
        for start in range(0, len(keys), _BATCH):
            chunk = list(keys[start:start + _BATCH])
            found.update(d["_id"] for d in self.collection.find({"_id": {"$in": chunk}}, {"_id": 1}))
        return found

    def stored_through(self, keys: Sequence[str], last_id: int) -> bool:
        """Whether one of ``keys`` is stored with a ``seq`` up to ``last_id``."""
        return any(self.collection.find_one({"_id": {"$in": list(keys[start:start + _BATCH])}, "seq": {"$lte": last_id}},
                                            {"_id": 1}) for start in range(0, len(keys), _BATCH))

    def row_key(self, row_id: int) -> str:
        """The ``_id`` (content key) of the document of ``seq`` ``row_id`` ('' when there is none)."""
        found = self.collection.find_one({"seq": row_id}, {"_id": 1})
        return str(found["_id"]) if found else ""

    @property
    def _files(self) -> Any:
        return self.database[self.table + "_files"]

    def file_mark(self, host: str, path: str) -> FileMark | None:
        """What the latest import of the perf.csv at ``path`` on ``host`` read of it."""
        found = self._files.find_one({"_id": file_hash(host, path)})
        return None if found is None else FileMark(**{name: found[name] for name in FILE_FIELDS})

    def save_file_mark(self, mark: FileMark) -> None:
        self._files.update_one({"_id": file_hash(mark.host, mark.path)}, {"$set": dataclasses.asdict(mark)}, upsert=True)

    # --- what an import needs (madengine.database.importer) ---

    def begin_import(self, wait_s: float = 0.0) -> None:
        """Nothing to lock: documents are upserted by content key and ordered by ``seq``."""

    def rows_written(self) -> None:
        """Nothing to give back."""

    def mark(self) -> int:
        """The newest ``seq``: documents an import inserts come after it."""
        newest = list(self.collection.find({}, {"seq": 1, "_id": 0}).sort("seq", -1).limit(1))
        self._next_seq = max(time.time_ns(), int(newest[0].get("seq") or 0) + 1 if newest else 0)
        return int(newest[0].get("seq") or 0) if newest else 0

    def numbered(self, mark: int, count: int) -> bool:
        """No: ``seq`` numbers are clock readings, and the series pass reads the rows back (their
        ``_id`` is what ``update_relative_change`` writes to)."""
        return False

    def bulk(self) -> contextlib.AbstractContextManager[None]:
        return contextlib.nullcontext()

    def _rows(self, query: dict[str, Any]) -> list[dict[str, str]]:
        fields = {name: 1 for name in (*ROW_COLUMNS, IDENTITY_COLUMN, "seq") if name != "id"}
        rows = []
        for document in self.collection.find(query, fields).sort([(IDENTITY_COLUMN, 1), ("seq", 1)]):
            row = {name: "" if document.get(name) is None else str(document.get(name))
                   for name in (*ROW_COLUMNS, IDENTITY_COLUMN) if name != "id"}
            row["id"] = str(document.get("seq") or 0)
            self._keys[int(row["id"])] = document["_id"]
            rows.append(row)
        return rows

    def new_rows(self, mark: int, keys: Sequence[str]) -> dict[str, list[tuple[str, ...]]]:
        """As :meth:`madengine.database.sql.SqlStore.new_rows`: per identity, tuples of ``ROW_COLUMNS``."""
        found: dict[str, list[tuple[str, ...]]] = {}
        for row in self._rows({IDENTITY_COLUMN: {"$in": list(keys)}, "seq": {"$gt": mark}}):
            found.setdefault(row[IDENTITY_COLUMN], []).append(tuple(row[n] for n in ROW_COLUMNS))
        return found

    def has_rows_before(self, key: str, mark: int) -> bool:
        return bool(list(self.collection.find({IDENTITY_COLUMN: key, "seq": {"$lte": mark}}, {"_id": 1}).limit(1)))

    def identity_rows(self, key: str) -> list[dict[str, str]]:
        return self._rows({IDENTITY_COLUMN: key})

    def keeps_history(self) -> bool:
        return True

    def absorb(self, mark: int, tally: Any = None) -> None:
        """No summary collections: nothing to bring up to date."""

    @property
    def _series(self) -> Any:
        return self.database[self.table + "_series"]

    @property
    def _alerts(self) -> Any:
        return self.database[self.table + "_alerts"]

    def load_states(self, keys: Sequence[str]) -> dict[str, SeriesState]:
        found = {}
        for document in self._series.find({"_id": {"$in": [text_hash(k) for k in keys]}}):
            key = str(document[IDENTITY_COLUMN])
            found[key] = SeriesState.from_record(key, document["state"], str(document.get("statuses") or ""),
                                                 document.get("verdict") or None)
        return found

    def save_states(self, states: Sequence[SeriesState]) -> None:
        UpdateOne = _pymongo().UpdateOne  # noqa: N806 (the driver's class)
        requests = [UpdateOne({"_id": text_hash(s.key)}, {"$set": {
            IDENTITY_COLUMN: s.key, "covered": s.covered, "latest_run": s.tail[-1].run if s.tail else "",
            "statuses": s.statuses, "verdict": s.verdict, "state": s.to_record()}}, upsert=True) for s in states]
        for start in range(0, len(requests), _BATCH):
            self._series.bulk_write(requests[start:start + _BATCH], ordered=False)

    def load_alerts(self, keys: Sequence[str] | None = None, alert_ids: Sequence[str] = ()) -> list[Alert]:
        query: dict[str, Any] = {}
        if alert_ids:
            query = {"_id": {"$in": list(alert_ids)}}
        elif keys is not None:
            query = {"identity_hash": {"$in": [text_hash(k) for k in keys]}}
        return [alertlib.from_record(d) for d in self._alerts.find(query)]

    def save_alerts(self, alerts: Sequence[Alert]) -> None:
        UpdateOne = _pymongo().UpdateOne  # noqa: N806 (the driver's class)
        requests = [UpdateOne({"_id": a.alert_id}, {"$set": {**a.to_json(), "identity_hash": text_hash(a.identity_key)}},
                              upsert=True) for a in alerts]
        for start in range(0, len(requests), _BATCH):
            self._alerts.bulk_write(requests[start:start + _BATCH], ordered=False)

    def log_triage(self, alert: Alert) -> None:
        self.database[self.table + "_alert_log"].update_one(
            {"_id": f"{alert.alert_id}:{time.time_ns()}"},
            {"$set": {"alert_id": alert.alert_id, "state": alert.state, "note": alert.note, "links": alert.links,
                      "by_name": alert.updated_by, "at": alert.updated_at}}, upsert=True)

    def triage_log(self, alert_id: str) -> list[dict[str, Any]]:
        return [{"state": d.get("state", ""), "note": d.get("note", ""), "links": list(d.get("links") or []),
                 "by": d.get("by_name", ""), "at": d.get("at", "")}
                for d in self.database[self.table + "_alert_log"].find({"alert_id": alert_id}).sort("_id", 1)]

    def update_relative_change(self, updates: Sequence[tuple[int, str]]) -> None:
        UpdateOne = _pymongo().UpdateOne  # noqa: N806 (the driver's class)
        requests = [UpdateOne({"_id": self._keys[row_id]}, {"$set": {"relative_change": text}})
                    for row_id, text in updates]
        for start in range(0, len(requests), _BATCH):
            self.collection.bulk_write(requests[start:start + _BATCH], ordered=False)

    def series_behind(self) -> list[str]:
        newest: dict[str, int] = {}
        for document in self.collection.find({}, {IDENTITY_COLUMN: 1, "seq": 1, "_id": 0}):
            key = str(document.get(IDENTITY_COLUMN) or "")
            newest[key] = max(newest.get(key, 0), int(document.get("seq") or 0))
        covered = {str(d[IDENTITY_COLUMN]): int(d.get("covered") or 0)
                   for d in self._series.find({}, {IDENTITY_COLUMN: 1, "covered": 1})}
        return [key for key, seq in newest.items() if key and covered.get(key, -1) < seq]

    def fetch_history(self, models: Sequence[str] = ()) -> list[dict[str, str]]:
        query: dict[str, Any] = {"status": Status.SUCCESS}
        if models:
            query["model"] = {"$in": list(models)}
        fields = {name: 1 for name in HISTORY_COLUMNS if name != "id"}
        return [{name: "" if d.get(name) is None else str(d.get(name)) for name in HISTORY_COLUMNS if name != "id"}
                | {"id": str(d.get("seq", ""))} for d in self.collection.find(query, fields).sort("seq", 1)]

    def insert(self, rows: Sequence[ImportRow], created_date: str) -> int:
        UpdateOne = _pymongo().UpdateOne  # noqa: N806 (the driver's class)

        first_seq = max(time.time_ns(), self._next_seq)  # later imports and batches sort after earlier ones
        self._next_seq = first_seq + len(rows)
        inserted = 0
        for start in range(0, len(rows), _BATCH):
            requests = []
            for offset, row in enumerate(rows[start:start + _BATCH]):
                document = {**row.cells, EXTRA_COLUMN: dict(row.extra), "created_date": created_date,
                            "seq": first_seq + start + offset, IDENTITY_COLUMN: row.group}
                requests.append(UpdateOne({"_id": row.key}, {"$setOnInsert": document}, upsert=True))
            inserted += self.collection.bulk_write(requests, ordered=True).upserted_count
        return inserted

    @staticmethod
    def _perf_row(document: Mapping[str, Any]) -> dict[str, str]:
        row = {name: "" if document.get(name) is None else str(document.get(name)) for name in ALL_COLUMNS}
        extra = document.get(EXTRA_COLUMN) or {}
        if isinstance(extra, Mapping):
            row.update({str(k): "" if v is None else str(v) for k, v in extra.items() if k not in row})
        return row

    def fetch_run(self, run_id: str) -> list[dict[str, str]]:
        return [self._perf_row(d) for d in self.collection.find({"run_id": run_id}).sort("seq", 1)]

    def list_runs(self) -> list[RunInfo]:
        # grouped here rather than by an aggregation pipeline: one plain find, the same code on any server
        fields = {"run_id": 1, "created_date": 1, "started_at": 1, "status": 1, "model": 1, "machine_name": 1, "_id": 0}
        runs: dict[str, dict[str, Any]] = {}
        for document in self.collection.find({"run_id": {"$nin": ["", None]}}, fields).sort("seq", 1):
            run = runs.setdefault(str(document["run_id"]), {"created": [], "started": [], "statuses": [],
                                                            "models": set(), "machines": []})
            run["created"].append(str(document.get("created_date") or ""))
            run["started"].append(str(document.get("started_at") or ""))
            run["statuses"].append(document.get("status"))
            run["models"].add(document.get("model"))
            run["machines"].append(str(document.get("machine_name") or ""))
        return [RunInfo(run_id=run_id, created_date=min(r["created"]), started_at=min(r["started"]),
                        rows=len(r["statuses"]), success=r["statuses"].count(Status.SUCCESS),
                        failure=r["statuses"].count(Status.FAILURE), skipped=r["statuses"].count(Status.SKIPPED),
                        models=len(r["models"]), machine_name=max(r["machines"]))
                for run_id, r in runs.items()]

    def count(self) -> int:
        return int(self.collection.count_documents({}))


# --- upload-mongodb ----------------------------------------------------------------------------

@dataclasses.dataclass
class UploadResult:
    url: str
    database: str
    collection: str
    kind: str
    files: list[str]
    documents: int = 0
    inserted: int = 0
    updated: int = 0
    unchanged: int = 0

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def upload_files(path: Path) -> list[Path]:
    """The files ``--file-path`` names: the file itself, or the ``*.csv``/``*.json`` of a folder."""
    path = Path(path)
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.is_file() and p.suffix.lower() in (".csv", ".json"))
        if not files:
            raise InputError("no .csv or .json file in this folder", path=str(path))
        return files
    if not path.exists():
        raise InputError("file or folder not found", path=str(path))
    if path.suffix.lower() not in (".csv", ".json"):
        raise InputError("not a .csv or .json file", path=str(path))
    return [path]


def _read_json_objects(path: Path) -> Any:
    from madengine.core.jsonio import read_json_file

    data = read_json_file(path)
    items = data if isinstance(data, list) else [data]
    if not items or not all(isinstance(item, dict) for item in items):
        raise InputError("must hold a JSON object or a non-empty array of objects", path=str(path))
    return data


def _typed(value: Any) -> Any:
    """CSV cells as MongoDB values: JSON objects/arrays parsed, the rest kept."""
    if isinstance(value, str) and value[:1] in ("{", "["):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def _run_document(row: Mapping[str, Any]) -> dict[str, Any]:
    document = {str(k): _typed(v) for k, v in row.items()}
    for column in _NUMERIC_COLUMNS:
        if isinstance(document.get(column), str):
            number = as_number(document[column])
            if number is not None:
                document[column] = number
    return document


def _file_rows(path: Path) -> list[dict[str, Any]]:
    """Result rows of a file: CSV rows, the ``results`` of a run summary, or JSON objects."""
    if path.suffix.lower() == ".csv":
        rows: list[dict[str, Any]] = list(read_rows(path))
        if not rows and not read_header(path):
            raise InputError("empty file: no CSV header", path=str(path))
        return rows
    data = _read_json_objects(path)
    if isinstance(data, dict) and isinstance(data.get("results"), list):  # `madengine run --json`
        return [{"run_id": data.get("run_id", ""), **item} for item in data["results"] if isinstance(item, dict)]
    return data if isinstance(data, list) else [data]


def _hash(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, ensure_ascii=False, default=str, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _as_cells(row: Mapping[str, Any]) -> dict[str, str]:
    return {str(k): v if isinstance(v, str) else json.dumps(v, sort_keys=True, default=str) for k, v in row.items()}


def _job_documents(path: Path) -> list[dict[str, Any]]:
    if path.suffix.lower() == ".json":
        data = _read_json_objects(path)
        return [dict(item) for item in (data if isinstance(data, list) else [data])]
    groups: dict[str, list[dict[str, Any]]] = {}
    for row in _file_rows(path):
        groups.setdefault(str(row.get("run_id") or ""), []).append(row)
    documents = []
    for run_id, rows in groups.items():
        counts = {status: sum(1 for r in rows if r.get("status") == status) for status in Status.ALL}
        documents.append({"run_id": run_id, "counts": counts, "rows": [_run_document(r) for r in rows]})
    return documents


def build_upload_requests(kind: str, files: Sequence[Path], name: str) -> list[Any]:
    """The pymongo write requests for ``upload-mongodb`` (see the module docstring)."""
    UpdateOne = _pymongo().UpdateOne  # noqa: N806 (the driver's class)

    now = _now()
    created = now.strftime("%Y-%m-%d %H:%M:%S")
    requests = []
    for path in files:
        common = {"name": name, "type": kind, "source": path.name}
        if kind == "run":
            rows = _file_rows(path)
            for key, row in zip(content_keys([_as_cells(r) for r in rows]), rows):
                run_id = str(row.get("run_id") or "")
                document = {**_run_document(row), **common, "run_id": run_id, "uploaded_at": now}
                document.setdefault("created_date", created)
                requests.append(UpdateOne({"_id": f"run:{name}:{run_id}:{key}"}, {"$setOnInsert": document},
                                          upsert=True))
        else:
            for job in _job_documents(path):
                run_id = str(job.get("run_id") or "")
                document = {**job, **common, "run_id": run_id, "uploaded_at": now}
                document.setdefault("created_date", created)
                document.pop("_id", None)
                document.pop("first_uploaded_at", None)
                job_id = run_id or _hash(job)
                requests.append(UpdateOne({"_id": f"job:{name}:{job_id}"},
                                          {"$set": document, "$setOnInsert": {"first_uploaded_at": now}}, upsert=True))
    return requests


def upload(url: DbUrl, environ: Mapping[str, str], kind: str, file_path: Path, name: str,
           database: str | None = None, collection: str | None = None) -> UploadResult:
    if kind not in UPLOAD_TYPES:
        raise InputError(f"unknown upload type {kind!r}", path="--type", hint="job or run")
    if not name.strip():
        raise InputError("must not be empty", path="--name")
    files = upload_files(file_path)
    requests = build_upload_requests(kind, files, name.strip())
    database = database or url.database or DEFAULT_MONGO_DATABASE
    collection = collection or f"{kind}s"
    result = UploadResult(url=url.shown, database=database, collection=collection, kind=kind,
                          files=[str(f) for f in files], documents=len(requests))
    if not requests:
        return result
    client = connect(url, environ)
    try:
        with mongo_errors(url):
            target = client[database][collection]
            for start in range(0, len(requests), _BATCH):
                written = target.bulk_write(requests[start:start + _BATCH], ordered=False)
                result.inserted += written.upserted_count
                result.updated += written.modified_count
                result.unchanged += written.matched_count - written.modified_count
    finally:
        client.close()
    return result
