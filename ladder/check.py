"""Correctness of an idea: candidate vs the family's fp64 oracle, against fla's own error.

Per output o (y, dx, dw): err_o = ||out_o - ref_o||_2 / ||ref_o||_2 with ref from the
family's float64 reference. A shape passes iff every output has err_o <= TOLERANCES[o] and,
when the baseline ran, err_o <= ERR_RATIO_MAX * baseline_err_o + 1e-6. A non-finite output
fails. Before each candidate call the caching allocator is fed NaN-filled blocks of the
output sizes, so an output the kernel leaves partly unwritten shows up as NaN, not as a
previous call's correct values; each direction is called once untimed first, so autotuning
(which writes the outputs with every configuration) is over before the checked call.

On Triton's CPU interpreter fla's autotuned kernels cannot run: the baseline is skipped and
only the absolute tolerances apply.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

__all__ = ["ShapeCheck", "check_shape", "rel_err"]

SLACK = 1e-6


def rel_err(out: Any, ref: Any) -> float:
    """||out - ref||_2 / ||ref||_2 in float64 (absolute when ||ref|| == 0); nan if out holds
    a non-finite value."""
    import torch

    o = out.to(torch.float64)
    r = ref.to(device=o.device, dtype=torch.float64)
    if not bool(torch.isfinite(o).all()):
        return math.nan
    num = float(torch.linalg.vector_norm(o - r))
    den = float(torch.linalg.vector_norm(r))
    return num / den if den > 0 else num


def _poison(specs: list[tuple[tuple[int, ...], Any]], device: Any) -> None:
    import torch

    if getattr(device, "type", str(device)) != "cuda":
        return
    bufs = [torch.full(shape, math.nan, dtype=dt, device=device) for shape, dt in specs]
    del bufs


def _sync(device: Any) -> None:
    import torch

    if getattr(device, "type", str(device)) == "cuda":
        torch.cuda.synchronize(device)


@dataclass
class ShapeCheck:
    """Result for one shape. Errors are {output: rel err}; baseline_err/err_ratio are None
    when the baseline did not run; problems lists shape/dtype/exception findings."""

    name: str
    candidate_err: dict[str, float]
    baseline_err: dict[str, float] | None
    err_ratio: dict[str, float] | None
    passed: bool
    problems: list[str] = field(default_factory=list)

    def record_entry(self) -> dict:
        """The ``correctness`` object of a bench record (non-finite numbers as null)."""

        def fin(d: dict[str, float] | None) -> dict[str, float | None] | None:
            if d is None:
                return None
            return {k: (v if math.isfinite(v) else None) for k, v in d.items()}

        out = {
            "candidate_err": fin(self.candidate_err),
            "baseline_err": fin(self.baseline_err),
            "err_ratio": fin(self.err_ratio),
            "passed": self.passed,
        }
        if self.problems:
            out["problems"] = list(self.problems)
        return out


def strided_inputs(x: Any, w: Any, dy: Any) -> tuple[Any, Any, Any]:
    """Copies of (x, w, dy) with the layouts models pass: x a channel slice of a wider
    [B, T, 3D] activation (row stride 3D; the rest NaN, so reading outside the slice shows),
    dy stored time-minor ([B, D, T] transposed)."""
    import torch

    B, T, D = x.shape
    wide = torch.full((B, T, 3 * D), math.nan, dtype=x.dtype, device=x.device)
    xs = wide[:, :, D : 2 * D]
    xs.copy_(x)
    dys = torch.empty((B, D, T), dtype=dy.dtype, device=dy.device).transpose(1, 2)
    dys.copy_(dy)
    return xs, w, dys


def _shape_problems(names: tuple[str, ...], outs: tuple, x: Any, w: Any) -> list[str]:
    """Contract checks: y and dx are [B, T, D] contiguous in x's dtype, dw is w's shape and
    dtype, all on x's device."""
    problems = []
    likes = (x, x, w)
    for name, out, like in zip(names, outs, likes, strict=True):
        if tuple(out.shape) != tuple(like.shape) or out.dtype != like.dtype:
            problems.append(
                f"{name}: got {tuple(out.shape)} {out.dtype}, want {tuple(like.shape)} {like.dtype}"
            )
        elif like is x and not out.is_contiguous():
            problems.append(f"{name}: not contiguous (strides {tuple(out.stride())})")
        if out.device != x.device:
            problems.append(f"{name}: on {out.device}, want {x.device}")
    return problems


def check_shape(
    family: ModuleType,
    idea: ModuleType,
    shape: Any,
    device: Any,
    seed: int,
    *,
    baseline: bool,
    strided: bool = False,
) -> ShapeCheck:
    """Check one shape: fresh inputs from ``seed``, the oracle, the candidate (warm-up call,
    then a checked call on poisoned memory) and, if ``baseline``, fla. ``strided`` uses
    :func:`strided_inputs`. Exceptions from the candidate or baseline propagate.
    Returns a :class:`ShapeCheck`; its name gets ``+strided`` for the strided layout."""
    import torch

    fwd_name, bwd_name = family.ENTRY_POINTS
    fwd, bwd = getattr(idea, fwd_name), getattr(idea, bwd_name)
    names = tuple(family.TOLERANCES)
    dev = torch.device(device)
    x, w, dy = family.make_inputs(shape, dev, seed)
    if strided:
        x, w, dy = strided_inputs(x, w, dy)
    refs = family.reference(x, w, dy)

    def run(f, b, poison: bool) -> tuple:
        f(x, w)
        b(x, w, dy)
        _sync(dev)
        if poison:
            _poison([(tuple(x.shape), x.dtype)], dev)
        y = f(x, w)
        _sync(dev)
        if poison:
            _poison([(tuple(x.shape), x.dtype), (tuple(w.shape), w.dtype)], dev)
        dx, dw = b(x, w, dy)
        _sync(dev)
        return (y, dx, dw)

    outs = run(fwd, bwd, poison=True)
    problems = _shape_problems(names, outs, x, w)
    cand = {n: rel_err(o, r) for n, o, r in zip(names, outs, refs, strict=True)}
    del outs
    base = ratio = None
    if baseline:
        bouts = run(family.baseline_fwd, family.baseline_bwd, poison=False)
        base = {n: rel_err(o, r) for n, o, r in zip(names, bouts, refs, strict=True)}
        del bouts
        ratio = {n: (cand[n] / base[n] if base[n] > 0 else math.inf) for n in names}
    del refs
    passed = not problems
    for n in names:
        ok = cand[n] <= family.TOLERANCES[n]
        if base is not None:
            ok = ok and cand[n] <= family.ERR_RATIO_MAX * base[n] + SLACK
        passed = passed and ok  # nan compares false: a non-finite output fails
    label = shape.name + ("+strided" if strided else "")
    return ShapeCheck(label, cand, base, ratio, bool(passed), problems)
