"""Compatibility package: ``madengine.utils.discover_models`` for model repositories."""
