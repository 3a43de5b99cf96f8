"""madengine: run AI models reliably in containers, measure them, record the results.

The public surface is the command line (``madengine``); the packages below are its stages:
catalog → context → execution → results → reports/database. See docs/architecture.md.
"""

__version__ = "2.0.0"
