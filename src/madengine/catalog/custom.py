"""``CustomModel``: what a ``scripts/<dir>/get_models_json.py`` returns from ``list_models()``.

Model repositories import it as ``madengine.utils.discover_models.CustomModel`` (newer) or
``madengine.tools.discover_models.CustomModel`` (older); both names are this class.
"""

from __future__ import annotations

import dataclasses
from typing import Any


@dataclasses.dataclass
class CustomModel:
    name: str
    dockerfile: str = ""
    dockercontext: str = ""
    scripts: str = ""
    url: str = ""
    cred: str = ""
    owner: str = ""
    data: str = ""
    n_gpus: str = "-1"
    timeout: int = 7200
    training_precision: str = ""
    tags: list = dataclasses.field(default_factory=list)
    args: str = ""
    multiple_results: str = ""
    skip_gpu_arch: str = ""

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def update_model(self) -> None:
        """Hook called when the model is selected; subclasses refresh fields here."""
