"""Import path used by model repositories' ``get_models_json.py`` (newer madengine releases)."""

from madengine.catalog.custom import CustomModel

__all__ = ["CustomModel"]
