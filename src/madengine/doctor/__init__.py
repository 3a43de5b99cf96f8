"""``madengine doctor``: whether this host can run the selected models, and what to fix
(docs/run.md, "Check a host"). One :class:`~madengine.doctor.checks.Check` per line: Python and
madengine, the Docker engine, the GPUs as a run detects them, their driver, device nodes and
container runtime, PyTorch and a collective, Slurm and Kubernetes when named, and each selected
model. Only the ``doctor`` command imports this package."""

from madengine.doctor.checks import FAIL, PASS, SKIP, WARN, Check
from madengine.doctor.diagnose import EXECUTORS, Diagnosis, DoctorRequest, prepare

__all__ = ["Check", "Diagnosis", "DoctorRequest", "EXECUTORS", "FAIL", "PASS", "SKIP", "WARN", "prepare"]
