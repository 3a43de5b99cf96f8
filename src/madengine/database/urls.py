"""Where the results database is: URL parsing, the original tool's environment variables, and
masking of passwords.

SQL commands (``create-table``, ``update-table``, ``list-runs``, :func:`fetch_run`) look, in order,
at ``--db-url``, ``MADENGINE_DB_URL``, the MySQL variables ``TUNA_DB_*`` (only when
``TUNA_DB_HOSTNAME`` is set), and fall back to the SQLite file ``madengine.db`` in the current
folder. ``upload-mongodb`` looks at ``--db-url``, a ``mongodb://`` ``MADENGINE_DB_URL``, then the
``MONGO_*`` variables (defaults ``localhost:27017``, no authentication).

Every password met here is registered as a secret, so no log line or error message shows it.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Mapping
from urllib.parse import parse_qs, quote, unquote, urlsplit, urlunsplit

from madengine.core.errors import InputError
from madengine.core.redact import MASK, register_secret
from madengine.core.values import brief, port_number

DEFAULT_SQLITE_FILE = "madengine.db"
DEFAULT_MYSQL_DATABASE = "dlm_db"  # the original tool's TUNA_DB_NAME default
DEFAULT_MONGO_DATABASE = "madengine"
SCHEMES = ("sqlite", "mysql", "mongodb")
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")


@dataclasses.dataclass(frozen=True)
class DbUrl:
    """A parsed database URL. ``text`` is the URL as given (it may hold a password)."""

    scheme: str  # sqlite | mysql | mongodb
    text: str
    path: Path | None = None  # sqlite only
    host: str = ""
    port: int | None = None
    user: str = ""
    password: str = dataclasses.field(default="", repr=False)
    database: str = ""
    timeout: float | None = None  #: seconds; from ``?timeout=`` (SQLite busy wait, MySQL connect)

    @property
    def shown(self) -> str:
        """The URL with its password masked: the only form that may be printed."""
        return mask_url(self.text)

    def __str__(self) -> str:
        return self.shown


def mask_url(url: str) -> str:
    """``url`` with the password of its ``user:password@`` part replaced by a mask."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc
    userinfo, _, hosts = netloc.rpartition("@")
    user = userinfo.split(":", 1)[0]
    return urlunsplit((parts.scheme, f"{user}:{MASK}@{hosts}", parts.path, parts.query, parts.fragment))


def check_identifier(name: str, what: str) -> str:
    """SQL identifiers cannot be query parameters, so they are restricted to a safe alphabet."""
    if not _IDENTIFIER.match(name or ""):
        raise InputError(f"invalid {what} name {name!r}", path=f"--{what}",
                         hint="use letters, digits and '_' (at most 64, not starting with a digit)")
    return name


def parse_url(text: str, *, origin: str = "--db-url") -> DbUrl:
    """Parse ``sqlite:///file``, ``mysql://user:pass@host:port/db`` or ``mongodb://...``."""
    text = text.strip()
    scheme = text.split(":", 1)[0].lower() if ":" in text else ""
    if scheme in ("mongodb", "mongodb+srv"):
        return _parse_mongodb(text, origin)
    if scheme == "sqlite":
        return _parse_sqlite(text, origin)
    if scheme in ("mysql", "mysql+pymysql", "mariadb"):
        return _parse_mysql(text, origin)
    raise InputError(f"unsupported database URL {mask_url(text)!r}", path=origin,
                     hint="use sqlite:///FILE, mysql://USER:PASSWORD@HOST:PORT/DB or mongodb://HOST:PORT")


def _timeout(text: str, origin: str) -> float | None:
    values = parse_qs(urlsplit(text).query).get("timeout")
    if not values:
        return None
    try:
        seconds = float(values[-1])
    except ValueError:
        seconds = -1.0
    if not 0 < seconds <= 3600:
        raise InputError(f"timeout must be a number of seconds (0 < s <= 3600), got {values[-1]!r}", path=origin)
    return seconds


def _parse_sqlite(text: str, origin: str) -> DbUrl:
    # SQLAlchemy's convention: sqlite:///relative.db and sqlite:////absolute/path.db
    if not text.lower().startswith("sqlite:///"):
        raise InputError(f"malformed SQLite URL {text!r}", path=origin,
                         hint="sqlite:///relative/file.db or sqlite:////absolute/file.db")
    file = unquote(text[len("sqlite:///"):].split("?", 1)[0])
    if not file:
        raise InputError("SQLite URL names no file", path=origin, hint="sqlite:///madengine.db")
    return DbUrl("sqlite", text, path=Path(file), timeout=_timeout(text, origin))


def _split_netloc(text: str, origin: str, *, strict_port: bool = True):
    parts = urlsplit(text)
    try:
        port = parts.port
    except ValueError:
        if strict_port:
            raise InputError(f"invalid port in {mask_url(text)!r}", path=origin) from None
        port = None  # a MongoDB seed list (host1:port1,host2:port2) is the driver's to parse
    password = unquote(parts.password) if parts.password is not None else ""
    register_secret(password)
    return parts, port, unquote(parts.username or ""), password


def _parse_mysql(text: str, origin: str) -> DbUrl:
    parts, port, user, password = _split_netloc(text, origin)
    if not parts.hostname:
        raise InputError(f"MySQL URL names no host: {mask_url(text)!r}", path=origin,
                         hint="mysql://USER:PASSWORD@HOST:PORT/DB")
    database = unquote(parts.path.lstrip("/")) or DEFAULT_MYSQL_DATABASE
    check_identifier(database, "database")
    return DbUrl("mysql", text, host=parts.hostname, port=port or 3306, user=user, password=password,
                 database=database, timeout=_timeout(text, origin))


def _parse_mongodb(text: str, origin: str) -> DbUrl:
    parts, port, user, password = _split_netloc(text, origin, strict_port=False)
    database = unquote(parts.path.lstrip("/")) or ""
    return DbUrl("mongodb", text, host=parts.hostname or "", port=port, user=user, password=password,
                 database=database)


def _from_env(environ: Mapping[str, str], name: str) -> str:
    return (environ.get(name) or "").strip()


def mysql_url_from_tuna(environ: Mapping[str, str]) -> DbUrl:
    """The MySQL URL of the original tool's ``TUNA_DB_*`` variables."""
    user = _from_env(environ, "TUNA_DB_USER_NAME")
    password = environ.get("TUNA_DB_USER_PASSWORD") or ""
    host = _from_env(environ, "TUNA_DB_HOSTNAME") or "localhost"
    port = _from_env(environ, "TUNA_DB_PORT") or "3306"
    database = _from_env(environ, "TUNA_DB_NAME") or DEFAULT_MYSQL_DATABASE
    if port_number(port) is None:
        raise InputError(f"must be a port number (1-65535), got {brief(port)}", path="TUNA_DB_PORT")
    userinfo = quote(user, safe="") + (":" + quote(password, safe="") if password else "")
    register_secret(password)
    return parse_url(f"mysql://{userinfo}@{host}:{port}/{database}", origin="TUNA_DB_*")


def resolve_sql_url(db_url: str | None, environ: Mapping[str, str]) -> DbUrl:
    """The results database of the SQL commands (see the module docstring for the order)."""
    if db_url:
        return parse_url(db_url)
    if _from_env(environ, "MADENGINE_DB_URL"):
        return parse_url(environ["MADENGINE_DB_URL"], origin="MADENGINE_DB_URL")
    if _from_env(environ, "TUNA_DB_HOSTNAME"):
        return mysql_url_from_tuna(environ)
    return parse_url(f"sqlite:///{DEFAULT_SQLITE_FILE}", origin="default")


def mongo_url_from_env(environ: Mapping[str, str]) -> DbUrl:
    """The MongoDB URL of the ``MONGO_*`` variables, credentials URL-escaped."""
    host = _from_env(environ, "MONGO_HOST") or "localhost"
    port = _from_env(environ, "MONGO_PORT") or "27017"
    user = _from_env(environ, "MONGO_USER")
    password = environ.get("MONGO_PASSWORD") or ""
    if port_number(port) is None:
        raise InputError(f"must be a port number (1-65535), got {brief(port)}", path="MONGO_PORT")
    register_secret(password)
    userinfo = ""
    if user:
        userinfo = quote(user, safe="") + (":" + quote(password, safe="") if password else "") + "@"
    query = ""
    if user:
        query = "?authSource=" + quote(_from_env(environ, "MONGO_AUTH_SOURCE") or "admin", safe="")
    return parse_url(f"mongodb://{userinfo}{host}:{port}/{query}", origin="MONGO_*")


def resolve_mongo_url(db_url: str | None, environ: Mapping[str, str]) -> DbUrl:
    """The MongoDB server of ``upload-mongodb`` (see the module docstring for the order)."""
    if db_url:
        url = parse_url(db_url)
        if url.scheme != "mongodb":
            raise InputError(f"upload-mongodb needs a mongodb:// URL, got {url.shown!r}", path="--db-url")
        return url
    env_url = _from_env(environ, "MADENGINE_DB_URL")
    if env_url.lower().startswith("mongodb"):
        return parse_url(env_url, origin="MADENGINE_DB_URL")
    return mongo_url_from_env(environ)
