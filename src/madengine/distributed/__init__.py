"""Beyond one machine: the build/run split (build manifests, registry and archive transport),
Slurm execution, and parallel scheduling of models on one host.

Public surface: :func:`build_models`, :func:`load_manifest`, :class:`Manifest`,
:func:`run_on_slurm`, :func:`collect_by_job_id`, :func:`run_parallel`.
"""

from madengine.distributed.manifest import Manifest, build_models, load_manifest
from madengine.distributed.parallel import run_parallel
from madengine.distributed.slurm import collect_by_job_id, run_on_slurm

__all__ = ["Manifest", "build_models", "load_manifest", "run_on_slurm", "collect_by_job_id", "run_parallel"]
