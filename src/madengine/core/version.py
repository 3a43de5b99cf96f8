"""madengine's version: the one place it is written (pyproject.toml's ``version`` says the same)."""

__version__ = "2.0.0"
