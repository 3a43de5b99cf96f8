"""The image the distributed tests and benchmarks run torch in: the base image plus the CPU build of
PyTorch, built once per machine and kept (like the base image) under a name that says its content.

Containers cannot download, so the wheels go into the build context: torch from pip's find-links
(the CPU build), its dependencies at the versions installed on this host, and pip's own wheel, run
from the wheel itself (the base image has no pip). Nothing is pulled.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
import subprocess
import sys
import tempfile
from pathlib import Path

BASE_IMAGE = os.environ.get("MADENGINE_BASE_IMAGE", "madengine-base:bookworm")
TORCH = "2.13.0"
TORCH_IMAGE = f"madengine-test-torch:{TORCH}"
#: torch's run-time dependencies (numpy is the base image's)
DEPENDENCIES = ("filelock", "typing_extensions", "setuptools", "sympy", "mpmath", "networkx", "jinja2", "MarkupSafe",
                "fsspec", "pip")
DOCKERFILE = f"""FROM {BASE_IMAGE} AS install
COPY . /tmp/wheels/
RUN python3 /tmp/wheels/$(cd /tmp/wheels && ls pip-*.whl)/pip install --no-index --find-links /tmp/wheels \\
      --no-cache-dir --break-system-packages --root-user-action=ignore --disable-pip-version-check \\
      --progress-bar off torch=={TORCH} {' '.join(d for d in DEPENDENCIES if d != 'pip')}
FROM {BASE_IMAGE}
COPY --from=install /usr/local/ /usr/local/
ENV PYTHONUNBUFFERED=1
"""


def _pins() -> list[str]:
    return [f"torch=={TORCH}"] + [f"{name}=={importlib.metadata.version(name)}" for name in DEPENDENCIES]


def image_label() -> str:
    """What the image is made of (its label): the Dockerfile and the pinned wheels."""
    return hashlib.sha256((DOCKERFILE + "\n".join(_pins())).encode()).hexdigest()[:16]


def ensure_torch_image(client) -> str:
    """The torch image's name, built when missing or made of something else."""
    from docker.errors import ImageNotFound

    try:
        if client.images.get(TORCH_IMAGE).labels.get("madengine.test-torch") == image_label():
            return TORCH_IMAGE
    except ImageNotFound:
        pass
    with tempfile.TemporaryDirectory(prefix="madengine-torch-image-") as folder:
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
                        "--disable-pip-version-check", "-d", folder, *_pins()], check=True, stderr=subprocess.DEVNULL)
        Path(folder, "Dockerfile").write_text(DOCKERFILE)
        client.images.build(path=folder, tag=TORCH_IMAGE, pull=False, rm=True, forcerm=True,
                            labels={"madengine.test-torch": image_label()})
    return TORCH_IMAGE
