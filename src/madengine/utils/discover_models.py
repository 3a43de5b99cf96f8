"""A public entry point, kept on purpose: ``from madengine.utils.discover_models import CustomModel``.

Model repositories' ``scripts/<dir>/get_models_json.py`` files import ``CustomModel`` from here (the
path madengine v2 documented; MAD's repositories use it). It holds nothing but that name, which is
:class:`madengine.catalog.custom.CustomModel`; see docs/catalog-and-context.md.
"""

from madengine.catalog.custom import CustomModel

__all__ = ["CustomModel"]
