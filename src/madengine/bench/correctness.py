"""Is a backend's answer right? Its outputs against a reference's, output by output, at the scale of
the reference.

An element passes when ``|candidate - reference| <= atol * rms + rtol * |reference|``, where ``rms``
is the root mean square of the reference output's finite elements: the absolute tolerance is a
fraction of the output's own scale, so an output of logits near 10 and one of values near 1e-22
are held to the same relative standard (a fixed atol of 1e-4 passes anything, an all-zero answer
included, for outputs far below 1e-4). NaN matches NaN and an infinity the same infinity. Defaults:
``atol = 1e-4`` and ``rtol = 1e-4`` (the Relax scorecard's), for float32 models compared with
onnxruntime on the CPU; a model can set its own (e.g. looser for float16, 0 for exact). A backend
that computed in a reduced precision is checked with that precision's own tolerance
(:data:`PRECISION_TOLERANCES`, or the model's where that is looser): :func:`tolerance_for`.
Integer and boolean outputs use the rule with atol itself (not scaled: exact with the defaults);
an output whose shape or dtype differs, or that is missing, is a
mismatch whatever the tolerances.

A check can only tell right from wrong when the reference says something. A float output of the
reference that holds NaN or an infinity, that is ~0 (its RMS below :data:`NEGLIGIBLE_RMS`: a signal
that vanished, such as a random-weight network without BatchNorm statistics), or that is constant
(every element the same, to the dtype's rounding: a network that ignores its input) is
**INCONCLUSIVE**: a wrong answer could match it. Such an output still fails the check when the
candidate differs from it (MISMATCH), but never passes it: :func:`degenerate`.

The verdict names the worst output (the one furthest past its tolerance) with its maximum absolute
error and maximum relative error (``|c - r| / |r|`` over elements where ``r != 0``), and the index
of its worst element. Only numpy is needed.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Mapping

DEFAULT_ATOL = 1e-4
DEFAULT_RTOL = 1e-4

PASS = "PASS"
MISMATCH = "MISMATCH"
INCONCLUSIVE = "INCONCLUSIVE"

#: a float output whose RMS is below this is ~0: nothing in it tells a right answer from a wrong
#: one (float32 carries 7 digits: a model whose inputs are O(1) and whose answer is 1e-12 or less has
#: lost its signal; MobileNetV2 with random weights and untouched BatchNorm statistics gives 1e-22)
NEGLIGIBLE_RMS = 1e-12


@dataclasses.dataclass(frozen=True)
class Tolerance:
    """Absolute and relative tolerance of a check (see the module doc for the rule)."""

    atol: float = DEFAULT_ATOL
    rtol: float = DEFAULT_RTOL

    def __post_init__(self) -> None:
        for name in ("atol", "rtol"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0 or math.isinf(value):
                raise ValueError(f"{name} must be a finite number of 0 or more, got {value!r}")


#: the tolerance each precision is checked with, against an f32 reference (docs/scorecard.md). Set
#: from the unit roundoff of each format (bf16 2^-8, fp16 and tf32 2^-11) times the growth of a few
#: dozen layers, with room over what ResNet-18 and a small BERT show (see the docs' measured figures)
PRECISION_TOLERANCES = {
    "f32": Tolerance(),
    "tf32": Tolerance(atol=5e-3, rtol=5e-3),
    "fp16": Tolerance(atol=1e-2, rtol=1e-2),
    "bf16": Tolerance(atol=2e-2, rtol=2e-2),
    "int8": Tolerance(atol=1e-1, rtol=1e-1),
}


def tolerance_for(precision: str, model: Tolerance | None = None) -> Tolerance:
    """The tolerance a result computed at ``precision`` is checked with: the model's own (default
    1e-4) at f32 or a precision without an entry; else the precision's, or the model's where looser."""
    model = model or Tolerance()
    own = PRECISION_TOLERANCES.get(precision)
    if own is None or precision == "f32":
        return model
    return Tolerance(atol=max(model.atol, own.atol), rtol=max(model.rtol, own.rtol))


@dataclasses.dataclass(frozen=True)
class OutputCheck:
    """One output compared: ``excess`` > 0 means past the tolerance (the largest
    ``|c - r| - (atol·rms + rtol |r|)``; inf for shape/dtype/NaN problems). ``problem`` says why it
    failed when that is not a value (shape, dtype, missing); ``degenerate`` why the reference output
    cannot tell a right answer from a wrong one (:func:`degenerate`), which makes a check that found
    no difference INCONCLUSIVE."""

    name: str
    status: str
    max_abs_error: float = 0.0
    max_rel_error: float = 0.0
    excess: float = 0.0
    worst_index: tuple[int, ...] | None = None
    problem: str = ""  # shape / dtype / missing output, when that is why it failed
    degenerate: str = ""

    def describe(self) -> str:
        if self.status == INCONCLUSIVE:
            return f"output '{self.name}': {self.degenerate}: a wrong answer could match it"
        if self.problem:
            return f"output '{self.name}': {self.problem}"
        where = f" at index {list(self.worst_index)}" if self.worst_index is not None else ""
        also = f" ({self.degenerate})" if self.degenerate else ""
        return (f"output '{self.name}': max abs error {self.max_abs_error:.3g}, "
                f"max rel error {self.max_rel_error:.3g}{where}{also}")


@dataclasses.dataclass(frozen=True)
class Verdict:
    """Every output compared; ``status`` PASS, MISMATCH (any output differs) or INCONCLUSIVE (none
    differs, but some output of the reference cannot tell: :func:`degenerate`); ``output`` the worst
    output's name."""

    status: str
    tolerance: Tolerance
    outputs: tuple[OutputCheck, ...]

    @property
    def ok(self) -> bool:
        return self.status == PASS

    @property
    def worst(self) -> OutputCheck | None:
        failing = [o for o in self.outputs if o.status == MISMATCH] or \
            [o for o in self.outputs if o.status != PASS]
        pool = failing or list(self.outputs)
        return max(pool, key=lambda o: (o.excess, o.max_abs_error)) if pool else None

    @property
    def output(self) -> str:
        worst = self.worst
        return worst.name if worst else ""

    @property
    def max_abs_error(self) -> float:
        return max((o.max_abs_error for o in self.outputs), default=0.0)

    @property
    def max_rel_error(self) -> float:
        return max((o.max_rel_error for o in self.outputs), default=0.0)

    def reason(self) -> str:
        """One line: what failed and by how much, or why the check cannot tell (empty for a PASS)."""
        if self.ok:
            return ""
        if self.status == INCONCLUSIVE:
            return "; ".join(o.describe() for o in self.outputs if o.status == INCONCLUSIVE)
        worst = self.worst
        failing = sum(1 for o in self.outputs if o.status == MISMATCH)
        more = f" ({failing} of {len(self.outputs)} outputs differ)" if failing > 1 else ""
        return (f"{worst.describe() if worst else 'no outputs'}; tolerance atol {self.tolerance.atol:g}×rms "
                f"rtol {self.tolerance.rtol:g}{more}")

    def to_json(self) -> dict[str, Any]:
        return {"status": self.status, "atol": self.tolerance.atol, "rtol": self.tolerance.rtol,
                "output": self.output, "max_abs_error": _finite(self.max_abs_error),
                "max_rel_error": _finite(self.max_rel_error), "reason": self.reason(),
                "outputs": [{"name": o.name, "status": o.status, "max_abs_error": _finite(o.max_abs_error),
                             "max_rel_error": _finite(o.max_rel_error), "problem": o.problem,
                             "degenerate": o.degenerate} for o in self.outputs]}


def compare_outputs(candidate: Mapping[str, Any], reference: Mapping[str, Any],
                    tolerance: Tolerance | None = None) -> Verdict:
    """Compare every reference output with the candidate's output of the same name."""
    tolerance = tolerance or Tolerance()
    checks = [compare_output(name, candidate.get(name), value, tolerance) for name, value in reference.items()]
    checks += [OutputCheck(name, MISMATCH, math.inf, math.inf, math.inf, problem="not an output of the reference")
               for name in candidate if name not in reference]
    statuses = {c.status for c in checks}
    status = MISMATCH if not checks or MISMATCH in statuses else INCONCLUSIVE if INCONCLUSIVE in statuses else PASS
    return Verdict(status, tolerance, tuple(checks))


def compare_output(name: str, candidate: Any, reference: Any, tolerance: Tolerance) -> OutputCheck:
    """One output: shape and dtype first, then the element-wise rule."""
    import numpy as np

    if candidate is None:
        return OutputCheck(name, MISMATCH, math.inf, math.inf, math.inf, problem="missing from the candidate's outputs")
    got, want = np.asarray(candidate), np.asarray(reference)
    if got.shape != want.shape:
        return OutputCheck(name, MISMATCH, math.inf, math.inf, math.inf,
                           problem=f"shape {list(got.shape)} differs from the reference's {list(want.shape)}")
    if got.dtype != want.dtype:
        return OutputCheck(name, MISMATCH, math.inf, math.inf, math.inf,
                           problem=f"dtype {got.dtype} differs from the reference's {want.dtype}")
    if got.size == 0:
        return OutputCheck(name, PASS)
    if got.dtype.kind not in "biufc":
        equal = bool(np.array_equal(got, want))
        return OutputCheck(name, PASS if equal else MISMATCH, 0.0 if equal else math.inf, 0.0 if equal else math.inf,
                           0.0 if equal else math.inf, problem="" if equal else "values differ")
    return _numeric(name, got, want, tolerance)


def _numeric(name: str, got: Any, want: Any, tolerance: Tolerance) -> OutputCheck:
    import numpy as np

    c, r = got.astype(np.float64), want.astype(np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        same_special = (np.isnan(c) & np.isnan(r)) | (np.isinf(c) & (c == r))
        diff = np.where(same_special, 0.0, np.abs(c - r))
        diff = np.where(np.isnan(diff), np.inf, diff)  # NaN against a number: infinitely wrong
        magnitude = np.where(np.isfinite(r), np.abs(r), 0.0)
        excess = diff - (tolerance.atol * _atol_scale(want) + tolerance.rtol * magnitude)
        nonzero = magnitude > 0
        relative = np.divide(diff, magnitude, out=np.zeros_like(diff), where=nonzero)
    worst = np.unravel_index(int(np.argmax(excess)), excess.shape)
    worst_excess = float(excess[worst])
    why = degenerate(want)
    status = MISMATCH if worst_excess > 0 else INCONCLUSIVE if why else PASS
    return OutputCheck(name, status, float(diff.max()), float(relative.max()), max(worst_excess, 0.0),
                       tuple(int(i) for i in worst), degenerate=why)


def _atol_scale(reference: Any) -> float:
    """What atol is a fraction of: a float output's RMS; 1 for integer and boolean outputs, whose
    values are exact answers (an index is right or wrong whatever the other indices are)."""
    return rms(reference) if reference.dtype.kind in "fc" else 1.0


def rms(reference: Any) -> float:
    """The root mean square of an output's finite elements (0 for none): the scale of its atol."""
    import numpy as np

    values = np.asarray(reference, dtype=np.float64)
    finite = values[np.isfinite(values)]
    if finite.size == 0:
        return 0.0
    peak = float(np.abs(finite).max())
    if peak == 0.0:
        return 0.0
    return peak * float(np.sqrt(np.mean(np.square(finite / peak))))  # scaled: no overflow near 1e308


def degenerate(reference: Any) -> str:
    """Why a float output of the reference cannot tell a right answer from a wrong one ('' when it
    can): it holds NaN or an infinity, it is ~0 (RMS below :data:`NEGLIGIBLE_RMS`), or it is constant
    (more than one element, all the same to the dtype's rounding). Integer and boolean outputs are
    answers of their own (an argmax may be constant) and never degenerate."""
    import numpy as np

    values = np.asarray(reference)
    if values.dtype.kind not in "fc" or values.size == 0:
        return ""
    if not np.all(np.isfinite(values)):
        return "the reference holds NaN or infinity"
    scale = rms(values)
    if scale < NEGLIGIBLE_RMS:
        return f"the reference is ~0 (RMS {scale:.3g}, below {NEGLIGIBLE_RMS:g})"
    if values.size > 1:
        flat = np.abs(values).astype(np.float64)
        spread = float(np.ptp(values.astype(np.float64)))
        if spread <= 4 * float(np.finfo(values.dtype).eps) * float(flat.max()):
            return f"the reference is constant (every element {values.flat[0].item():.6g})"
    return ""


def _finite(value: float) -> float | None:
    """JSON has no infinity: None stands for 'not comparable' (a shape/dtype problem)."""
    return value if math.isfinite(value) else None
