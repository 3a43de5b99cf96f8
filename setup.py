"""The C part of madengine: ``madengine.database._fastrows`` (``src/madengine/database/_fastrows.c``),
two steps of reading a perf.csv into a database. It is optional: where it cannot be compiled (no C
compiler or Python headers) the package installs without it and reads perf.csv files in Python,
with the same results. ``MADENGINE_PURE_PYTHON=1`` leaves it out on purpose: a wheel for another
Python version or machine (``scripts/gpu-wheels.sh``) must be pure. Everything else is in
pyproject.toml."""

import os

from setuptools import Extension, setup

FASTROWS = Extension("madengine.database._fastrows", ["src/madengine/database/_fastrows.c"], optional=True)

setup(ext_modules=[] if os.environ.get("MADENGINE_PURE_PYTHON") == "1" else [FASTROWS])
