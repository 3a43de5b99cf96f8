"""Triage from the dashboard: the one thing a page can change, alerts' state, note and links.

``POST /alerts/{id}`` (a page's form: ``application/x-www-form-urlencoded``, answered with a redirect
back to the page) and ``POST /api/alerts/{id}`` (JSON in, the alert as JSON out) set one alert;
``POST /alerts`` and ``POST /api/alerts`` set several at once (a summary's form: the ``alert`` ids
checked, else every alert of ``summary``; JSON: ``alerts`` and/or ``summary``), answered with a
redirect or with what changed. They go through :func:`madengine.database.alerts.triage` (a known
state, a note of at most 2000 characters, links that are commit hashes or http(s) URLs, who decided)
and :meth:`madengine.server.views.Dashboard.triage` / ``triage_many``, which write the alerts table
only, never the results; an alert that says what the decision says already is not written again.

Access: a dashboard started without a token reads only (403: anyone who reaches it could change
what the team decided); with one, the request carries it like every other (the access guard of
:mod:`madengine.server.app`). The session cookie is SameSite=Strict, so another site's page cannot
post with it; and a post whose ``Origin`` names another host is refused (pages send ``Origin: null``
under their ``Referrer-Policy: no-referrer``, so a form says where to return in its ``back`` field).
"""

from __future__ import annotations

import json
from typing import Any, Callable
from urllib.parse import parse_qsl, urlsplit

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, RedirectResponse, Response

from madengine.core.errors import InputError, MadEngineError
from madengine.database.alerts import triage
from madengine.server.views import Dashboard

MAX_BODY = 64 * 1024  #: a triage is a few lines of text and, in bulk, the ids of up to MAX_BULK alerts
MAX_BULK = 1000  #: alerts one post may name
NO_TOKEN = ("403: this dashboard runs without an access token, so it reads only: start it with --token "
            "(or MADENGINE_DASHBOARD_TOKEN) to triage alerts here, or use 'madengine report alerts set'")


def _same_origin(request: Request) -> bool:
    """The post does not come from another site's page (which would name its own origin)."""
    origin = request.headers.get("origin", "")
    return origin in ("", "null") or urlsplit(origin).netloc == request.headers.get("host", "")


async def _body(request: Request) -> bytes:
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > MAX_BODY:
        raise InputError(f"the request is larger than {MAX_BODY} bytes", path="body")
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_BODY:
            raise InputError(f"the request is larger than {MAX_BODY} bytes", path="body")
    return body


def _decision(fields: dict[str, Any]) -> Any:
    links = fields.get("links", fields.get("link", []))
    links = [links] if isinstance(links, str) else list(links or [])
    if not all(isinstance(v, str) for v in (fields.get("state", ""), fields.get("note", ""), fields.get("by", ""),
                                            *links)):
        raise InputError("state, note, by and links must be text", path="body")
    return triage(fields.get("state", ""), fields.get("note", ""), links, fields.get("by", ""))


def _back(target: str, anchor: str) -> str:
    """Where a form post returns: the page it came from (a path of this dashboard), else the alerts."""
    parts = urlsplit(target or "")
    if parts.scheme or parts.netloc or not parts.path.startswith("/") or parts.path.startswith("//") \
            or any(ord(c) < 32 for c in target):
        return f"/changes#{anchor}"
    return parts.path + (f"?{parts.query}" if parts.query else "") + f"#{anchor}"


def bulk_target(fields: dict[str, Any]) -> tuple[list[str], str | None]:
    """What a bulk post names: (alert ids, as given; the summary's run id or None). The ids are
    checked against the database later (:func:`madengine.database.api.find_alerts`)."""
    ids = fields.get("alerts", fields.get("alert", []))
    ids = [ids] if isinstance(ids, str) else ids
    if not isinstance(ids, list) or not all(isinstance(v, str) for v in ids) or len(ids) > MAX_BULK:
        raise InputError(f"alerts: a list of at most {MAX_BULK} alert ids", path="body")
    summary = fields.get("summary")
    if summary is not None and not isinstance(summary, str):
        raise InputError("summary must be text: a run id", path="body")
    return [v for v in ids if v.strip()], summary or None


async def _fields(request: Request, api: bool) -> dict[str, Any]:
    body = await _body(request)
    if api:
        fields = json.loads(body or b"{}")
        if not isinstance(fields, dict):
            raise InputError("expected a JSON object", path="body")
        return fields
    lists: dict[str, list[str]] = {}
    for name, value in parse_qsl(body.decode("utf-8"), keep_blank_values=True):
        lists.setdefault(name, []).append(value)
    return {k: (v if k in ("link", "links", "alert", "alerts") else v[-1]) for k, v in lists.items()}


def endpoints(dashboard: Dashboard, token: str, error: Callable[..., Response]) -> tuple[Any, Any, Any, Any]:
    """(form endpoint, JSON endpoint, bulk form endpoint, bulk JSON endpoint); ``error(message,
    status, api, request)`` renders a failure."""
    async def handle(request: Request, api: bool, bulk: bool) -> Response:
        if not token:
            return JSONResponse({"error": NO_TOKEN}, status_code=403) if api else \
                PlainTextResponse(NO_TOKEN + "\n", status_code=403)
        if not _same_origin(request):
            return error("403: a triage must come from this dashboard's own pages", 403, api, request)
        try:
            fields = await _fields(request, api)
            if bulk:
                ids, summary = bulk_target(fields)
                done = await run_in_threadpool(dashboard.triage_many, ids, summary, lambda: _decision(fields))
                anchor = f"summary-{summary}" if summary else f"alert-{ids[0] if ids else ''}"
            else:
                done = await run_in_threadpool(dashboard.triage, request.path_params["alert_id"], _decision(fields))
                anchor = f"alert-{done['alert_id']}"
        except (ValueError, UnicodeDecodeError):
            return error("400: the body is not valid JSON or form data", 400, api, request)
        except InputError as exc:
            status = 404 if exc.path in ("alert", "summary") else 400
            return error(str(exc), status, api, request)
        except LookupError as exc:
            return error(str(exc), 404, api, request)
        except MadEngineError as exc:
            return error(str(exc), 503, api, request)
        if api:
            return JSONResponse(done)
        return RedirectResponse(_back(fields.get("back", ""), anchor), status_code=303)

    async def form(request: Request) -> Response:
        return await handle(request, api=False, bulk=False)

    async def api(request: Request) -> Response:
        return await handle(request, api=True, bulk=False)

    async def bulk_form(request: Request) -> Response:
        return await handle(request, api=False, bulk=True)

    async def bulk_api(request: Request) -> Response:
        return await handle(request, api=True, bulk=True)

    return form, api, bulk_form, bulk_api
