"""Kubernetes: ``madengine run --executor k8s``, ``madengine k8s render`` and ``madengine k8s rbac``
(docs/distributed.md, "Kubernetes").

Modules, from input to rows:

* :mod:`~madengine.k8s.settings` — the ``k8s`` block, every key checked (:class:`K8sSettings`);
  :mod:`~madengine.k8s.names` — names, labels and resource quantities as Kubernetes reads them;
  :mod:`~madengine.k8s.kubeconfig` — the cluster (kubeconfig file and context) checked before use;
* :mod:`~madengine.k8s.plan` — a model's job inputs (image, GPUs, files, environment, credentials);
  :mod:`~madengine.k8s.render` — its objects (ConfigMap, Secrets, headless Service, Job), pure;
  :mod:`~madengine.k8s.checks` — the rules the schema does not say; :mod:`~madengine.k8s.yamlio`;
  :mod:`~madengine.k8s.rbac` — the Role a namespace grants madengine;
* :mod:`~madengine.k8s.client` — the official ``kubernetes`` client (the ``k8s`` extra, imported by
  the commands that talk to a cluster only); :mod:`~madengine.k8s.session` — submit, watch, stream
  logs, clean up; :mod:`~madengine.k8s.pods` and :mod:`~madengine.k8s.collect` — pod states and the
  job's row (aggregated by :mod:`madengine.results.aggregate`);
* :mod:`~madengine.k8s.run` — the whole of a run or a render.

Public names are imported on first use.
"""

from __future__ import annotations

from madengine.core.lazy import lazy_exports

_EXPORTS = {
    "K8sSettings": "madengine.k8s.settings", "k8s_settings": "madengine.k8s.settings",
    "K8sRun": "madengine.k8s.run", "plan_k8s_run": "madengine.k8s.run", "render_to_folder": "madengine.k8s.run",
    "run_on_k8s": "madengine.k8s.run", "rbac_objects": "madengine.k8s.rbac", "JobPlan": "madengine.k8s.render",
    "render_job": "madengine.k8s.render", "problems": "madengine.k8s.checks",
}

__getattr__ = lazy_exports(__name__, _EXPORTS)

__all__ = sorted(_EXPORTS)
