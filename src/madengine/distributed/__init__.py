"""Beyond one machine: the build/run split (build manifests, registry and archive transport),
Slurm execution, and parallel scheduling of models on one host.

Public surface: :class:`Manifest`, :func:`load_manifest`, :class:`ManifestImages`,
:func:`run_on_slurm`, :func:`collect_by_job_id`, :func:`run_parallel`, and the option groups
:class:`TransportOptions`, :class:`ParallelOptions`, :class:`SlurmOptions`.
"""

from madengine.distributed.manifest import Manifest, ManifestImages, load_manifest
from madengine.distributed.options import ParallelOptions, SlurmOptions, TransportOptions
from madengine.distributed.parallel import run_parallel
from madengine.distributed.slurm import collect_by_job_id, run_on_slurm

__all__ = ["Manifest", "ManifestImages", "load_manifest", "ParallelOptions", "SlurmOptions", "TransportOptions",
           "run_on_slurm", "collect_by_job_id", "run_parallel"]
