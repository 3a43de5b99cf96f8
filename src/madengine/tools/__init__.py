"""Profiling tools and system monitors that wrap a model run (tools.json).

Also hosts ``madengine.tools.discover_models``, the import path older model repositories use.
"""
