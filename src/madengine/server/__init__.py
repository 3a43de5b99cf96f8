"""The live results dashboard, ``madengine report serve``: pages and a JSON API over the results
database, read-only, kept current while runs record rows (docs/dashboard.md).

Starlette and uvicorn (the ``serve`` extra) are imported by :mod:`madengine.server.app`,
:mod:`madengine.server.access` and :mod:`madengine.server.serve` only, when the command runs.
"""
