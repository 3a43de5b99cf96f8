"""The model catalog: sources (models.json, scripts/*/models.json, scripts/*/get_models_json.py),
the validated model schema, and tag selection."""

from madengine.catalog.schema import Model, model_from_entry
from madengine.catalog.selection import TagSpec, list_catalog, parse_tag, select_models, split_tags
from madengine.catalog.sources import Catalog, load_catalog, model_root

__all__ = ["CustomModel", "Model", "model_from_entry", "TagSpec", "list_catalog", "parse_tag", "select_models",
           "split_tags", "Catalog", "load_catalog", "model_root"]


def __getattr__(name: str) -> object:
    if name == "CustomModel":  # imported on use: only get_models_json.py sources need it
        from madengine.catalog.custom import CustomModel

        return CustomModel
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
