"""Holds only ``madengine.utils.discover_models``, the public import path of ``CustomModel`` that model
repositories' ``get_models_json.py`` use (docs/catalog-and-context.md)."""
