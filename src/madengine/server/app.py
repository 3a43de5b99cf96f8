"""The dashboard's web application (Starlette): pages, ``/api``, live updates, run files.

Pages are rendered on the server from jinja2 templates with autoescape on (a model named
``<script>`` is text), from the same data ``/api`` returns as JSON (:mod:`madengine.server.views`).
Every view's state is in its URL. The one script (``static/dashboard.js``, the project's own) keeps
an open page current: it listens to ``/api/events`` (server-sent events, one per new data version)
and swaps the page's ``#live`` part for a fresh copy. Content-Security-Policy allows only the
dashboard's own script and styles; nothing is loaded from elsewhere, so the pages work offline.

Access (the request's size, its Host header, the token and sessions) is :mod:`madengine.server.access`,
which wraps the application.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import json
import math
from pathlib import Path
from typing import Any, AsyncIterator, Callable
from urllib.parse import urlencode

import jinja2
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import FileResponse, HTMLResponse, JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

from madengine.core.errors import InputError, MadEngineError
from madengine.database.dashboard import Reader
from madengine.reports.metrics import format_change, format_number, format_ratio
from madengine.reports.render import format_figure
from madengine.server import files
from madengine.server.access import Guard
from madengine.server.charts import trend_chart
from madengine.server.config import ServerConfig
from madengine.server.filters import Filters, parse
from madengine.server.triage import endpoints as triage_endpoints
from madengine.server.views import Dashboard

STATIC = Path(__file__).parent / "static"
FRAGMENT_HEADER = "x-dashboard-fragment"
POLL_S = 0.5  #: how often the events stream looks for new rows
HEARTBEAT_S = 15.0
NAV = (("overview", "/", "Overview"), ("trend", "/trend", "Trends"), ("runs", "/runs", "Runs"),
       ("compare", "/compare", "Compare"), ("changes", "/changes", "Alerts"),
       ("summaries", "/summaries", "Summaries"))


class Json(JSONResponse):
    """JSON by orjson (a core dependency): several times faster than the standard library on big views."""

    def render(self, content: Any) -> bytes:
        import orjson

        return orjson.dumps(content, default=_plain)


def _plain(value: Any) -> Any:
    """What orjson leaves to us: subclasses of float (``results.parsing.Figure`` keeps a figure's text), int, str."""
    for kind in (float, int, str):
        if isinstance(value, kind):
            return kind(value)
    raise TypeError(f"not JSON: {type(value).__name__}")


# --- templates ---------------------------------------------------------------------------------

def _number(value: Any) -> str:
    if value is None or value == "":
        return ""
    if isinstance(value, str):
        return format_figure(value)
    return format_number(float(value))


def _percent(value: Any) -> str:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return ""
    return f"{number * 100:.1f} %" if math.isfinite(number) else ""


@functools.lru_cache(maxsize=1)
def templates() -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.PackageLoader("madengine.server", "templates"), autoescape=True,
                             trim_blocks=True, lstrip_blocks=True, undefined=jinja2.StrictUndefined)
    env.filters.update(number=_number, ratio=format_ratio, percent=_percent,
                       change=lambda v: "" if v is None else format_change(v / 100),
                       when=lambda text: (text or "").replace("T", " ")[:19])
    env.globals["query"] = lambda values: urlencode([(k, v) for k, v in values.items() if v not in ("", None)])
    env.globals["m"] = env.get_template("_macros.html.j2").module  # in whole pages and in their #live part alike
    return env


def render(request: Request, page: str, data: dict[str, Any], filters: Filters | None, status: int = 200,
           title: str = "") -> HTMLResponse:
    """The page, or only its ``#live`` part when the page's script asks for a fresh copy."""
    template = templates().get_template(f"{page}.html.j2")
    version = data.get("database", {}).get("token", data.get("database", {}).get("version", 0))
    context = {"data": data, "f": filters or Filters(), "page": page, "nav": NAV, "title": title or page,
               "version": version, "path": request.url.path}
    if request.headers.get(FRAGMENT_HEADER) == "1":
        ctx = template.new_context(context)
        return HTMLResponse("".join(template.blocks["live"](ctx)), status_code=status,
                            headers={"x-dashboard-version": str(version)})
    return HTMLResponse(template.render(context), status_code=status)


# --- the application ---------------------------------------------------------------------------

def _error(message: str, status: int, api: bool, request: Request, dashboard: Dashboard) -> Response:
    if api:
        return Json({"error": message}, status_code=status)
    data = {"database": {"url": dashboard.url_shown, "table": dashboard.table, "version": 0}, "error": message,
            "status": status}
    return render(request, "error", data, None, status, title=f"{status}")


def _view(dashboard: Dashboard, compute: Callable[[Filters], dict[str, Any]], *, api: bool,
          page: str = "", title: str = "", chart: bool = False,
          defaults: dict[str, str] | None = None) -> Callable[[Request], Response]:
    """A route: parse the URL's filters, compute the view, answer JSON or a page; bad input is a
    400, an unknown run or result a 404, an unreachable database a 503."""
    def endpoint(request: Request) -> Response:
        with dashboard.serving():
            return answer(request)

    def answer(request: Request) -> Response:
        try:
            filters = parse({**(defaults or {}), **request.query_params})
            data = compute(filters)
        except InputError as exc:
            return _error(str(exc), 400, api, request, dashboard)
        except LookupError as exc:
            return _error(str(exc.args[0] if exc.args else exc), 404, api, request, dashboard)
        except MadEngineError as exc:
            return _error(str(exc), 503, api, request, dashboard)
        if api:
            return Json(data)
        if chart:
            for series in data.get("series", []):
                series["chart"] = trend_chart(series["points"], series["changes"], series["identity"]["metric"])
        return render(request, page, data, filters, title=title)
    return endpoint


def _files(dashboard: Dashboard) -> Callable[[Request], Response]:
    def endpoint(request: Request) -> Response:
        target = files.inside(dashboard.runs_dir, request.path_params["path"])
        if target is None:
            return PlainTextResponse("404: no such file in the runs folder\n", status_code=404)
        kind = files.media_type(target)
        headers = {"content-security-policy": "sandbox; default-src 'none'"}
        if kind is None:
            return FileResponse(target, media_type="application/octet-stream", filename=target.name, headers=headers)
        return FileResponse(target, media_type=f"{kind}; charset=utf-8", headers=headers)
    return endpoint


def _static(request: Request) -> Response:
    name = request.path_params["name"]
    target = files.inside(STATIC, name)
    if target is None:
        return PlainTextResponse("404\n", status_code=404)
    kind = {".js": "text/javascript", ".css": "text/css"}.get(target.suffix, "application/octet-stream")
    return FileResponse(target, media_type=f"{kind}; charset=utf-8", headers={"cache-control": "no-cache"})


class Versions:
    """One watcher of the table's newest row id for every open page (``/api/events``)."""

    def __init__(self, dashboard: Dashboard) -> None:
        self.dashboard = dashboard
        self.current: dict[str, Any] = {}
        self.changed = asyncio.Event()

    async def watch(self) -> None:
        while True:
            try:
                version = await run_in_threadpool(self.dashboard.version)
                now = {"exists": version.exists, "version": version.max_id, "triage": version.triage,
                       "token": version.token}
            except Exception as exc:  # noqa: BLE001 - the database went away (or worse): say so, keep watching
                now = {"error": str(exc) if isinstance(exc, MadEngineError) else f"{type(exc).__name__}: {exc}"}
            if now != self.current:
                self.current = now
                self.changed.set()
                self.changed = asyncio.Event()
            await asyncio.sleep(POLL_S)

    async def stream(self, request: Request) -> AsyncIterator[str]:
        sent: dict[str, Any] = {}
        yield "retry: 1000\n\n"
        while True:
            if self.current and self.current != sent:
                sent = self.current
                yield f"data: {json.dumps(sent)}\n\n"
            waiter = self.changed
            try:
                await asyncio.wait_for(waiter.wait(), HEARTBEAT_S)
            except asyncio.TimeoutError:
                yield ": heartbeat\n\n"
            if await request.is_disconnected():
                return


def _triage_routes(dashboard: Dashboard, config: ServerConfig) -> list[Route]:
    """The alert-setting posts (:mod:`madengine.server.triage`), behind the same access guard."""
    def error(message: str, status: int, api: bool, request: Request) -> Response:
        return _error(message, status, api, request, dashboard)

    form, api, bulk_form, bulk_api = triage_endpoints(dashboard, config.token, error)
    return [Route("/alerts/{alert_id}", form, methods=["POST"]), Route("/api/alerts/{alert_id}", api, methods=["POST"]),
            Route("/alerts", bulk_form, methods=["POST"]), Route("/api/alerts", bulk_api, methods=["POST"])]


def create_app(config: ServerConfig) -> Starlette:
    """The dashboard over ``config``'s database (opened read-only, per thread, when first asked)."""
    reader = Reader(config.url, config.table)
    dashboard = Dashboard(reader, config.runs_dir, config.url.shown, config.table)
    versions = Versions(dashboard)

    async def events(request: Request) -> Response:
        return StreamingResponse(versions.stream(request), media_type="text/event-stream",
                                 headers={"cache-control": "no-cache", "x-accel-buffering": "no"})

    async def version(request: Request) -> Response:
        return JSONResponse(versions.current or await run_in_threadpool(lambda: dataclasses.asdict(dashboard.version())))

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        watcher = asyncio.create_task(versions.watch())
        dashboard.changes.start()
        try:
            yield
        finally:
            watcher.cancel()
            dashboard.close()

    d = dashboard
    routes = [
        Route("/", _view(d, d.overview, api=False, page="overview", title="Overview")),
        Route("/trend", _view(d, d.trend, api=False, page="trend", title="Trends", chart=True)),
        Route("/runs", _view(d, d.runs, api=False, page="runs", title="Runs")),
        Route("/run", _view(d, d.run, api=False, page="run", title="Run")),
        # a page of 50 comparisons: the worst first, and quick to draw for runs of thousands of results
        Route("/compare", _view(d, d.compare, api=False, page="compare", title="Compare", defaults={"per_page": "50"})),
        Route("/changes", _view(d, d.changes_view, api=False, page="changes", title="Alerts")),
        Route("/summaries", _view(d, d.summaries_view, api=False, page="summaries", title="Alert summaries")),
        Route("/api/overview", _view(d, d.overview, api=True)),
        Route("/api/identities", _view(d, d.identities, api=True)),
        Route("/api/series", _view(d, d.one_series, api=True)),
        Route("/api/trend", _view(d, d.trend, api=True)),
        Route("/api/runs", _view(d, d.runs, api=True)),
        Route("/api/run", _view(d, d.run, api=True)),
        Route("/api/compare", _view(d, d.compare, api=True)),
        Route("/api/changes", _view(d, d.changes_view, api=True)),
        Route("/api/alerts", _view(d, d.alerts_view, api=True)),
        Route("/api/summaries", _view(d, d.summaries_view, api=True)),
        *_triage_routes(d, config),
        Route("/api/version", version),
        Route("/api/events", events),
        Route("/files/{path:path}", _files(d)),
        Route("/static/{name}", _static),
        Route("/favicon.ico", lambda request: Response(status_code=204)),
    ]
    app = Starlette(routes=routes, lifespan=lifespan)
    app.state.dashboard = dashboard
    return Guard(app, config)  # type: ignore[return-value]
