"""Beyond one machine: the build/run split (build manifests, registry and archive transport),
Slurm execution, and parallel scheduling of models on one host.

Public surface: :class:`Manifest`, :func:`load_manifest`, :class:`ManifestImages`,
:func:`run_on_slurm`, :func:`collect_by_job_id`, :func:`run_parallel`, and the option groups
:class:`TransportOptions`, :class:`ParallelOptions`, :class:`SlurmOptions`. Names are imported
on first use, so a run that needs only the option groups does not load Slurm or the registry code.
"""

from __future__ import annotations

from madengine.core.lazy import lazy_exports

_EXPORTS = {
    "Manifest": "madengine.distributed.manifest", "ManifestImages": "madengine.distributed.manifest",
    "load_manifest": "madengine.distributed.manifest", "ParallelOptions": "madengine.distributed.options",
    "SlurmOptions": "madengine.distributed.options", "TransportOptions": "madengine.distributed.options",
    "run_on_slurm": "madengine.distributed.slurm", "collect_by_job_id": "madengine.distributed.slurm",
    "run_parallel": "madengine.distributed.parallel",
}


__getattr__ = lazy_exports(__name__, _EXPORTS)


__all__ = sorted(_EXPORTS)
