"""A public entry point, kept on purpose: ``from madengine.tools.discover_models import CustomModel``.

The path madengine v1 documented for ``scripts/<dir>/get_models_json.py``; older model repositories
still import it. It holds nothing but that name, which is :class:`madengine.catalog.custom.CustomModel`
(the same class as ``madengine.utils.discover_models.CustomModel``); see docs/catalog-and-context.md.
"""

from madengine.catalog.custom import CustomModel

__all__ = ["CustomModel"]
