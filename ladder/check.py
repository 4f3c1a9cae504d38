"""Correctness of an idea: candidate vs the family's fp64 oracle, against fla's own error.

The family protocol (ladder.contract) supplies everything: inputs, the oracle, the call
(``run``: forward then backward, outputs in TOLERANCES order) and optional layout checks.
Per output o (cconv: y, dx, dw): err_o = ||out_o - ref_o||_2 / ||ref_o||_2 with ref from the
family's float64 reference. A shape passes iff every output has err_o <= TOLERANCES[o] and,
when the baseline ran, err_o <= ERR_RATIO_MAX * baseline_err_o + 1e-6. A non-finite output
fails.

An output whose reference has fewer than the family's RATIO_MIN_ELEMENTS values (kda's
dA_log: one per value head) is a sum over every token whose rounding error is a sample of
a few numbers, so one seed's ratio to fla's error says little either way (per-seed ratios
from 0.13 to 4.2 at one shape, pooled 0.93). Such an output's ratio test is therefore always
taken on errors pooled over RATIO_POOL_SEEDS seeds (the shape's seed and the next ones):
the relative error of all those seeds' outputs taken together, sqrt(sum_s ||out_s -
ref_s||^2 / sum_s ||ref_s||^2), i.e. the candidate's total squared error against fla's.
(Pooling the per-seed relative errors instead weights each seed by 1 / ||ref_s||^2: a seed
whose reference nearly cancels then makes up most of the pool, and the pooled ratio is that
one seed's ratio of two values again. Records whose pooled entry has no ``"pooling":
"stacked"`` pooled that way.)
Every one of those seeds must also meet the absolute tolerance, except
a seed where fla's own error is past it (a reference that nearly cancels: kda's dA_log at
one seed in eight on the H200, fla at 1.6x the tolerance): there the candidate must be
within ERR_RATIO_MAX of fla's error at that seed instead. The record keeps the shape seed's
numbers and adds the pooled ones. Before each direction of the checked candidate call (``run`` calls ``poison``) the
caching allocator is fed NaN-filled blocks of the output sizes, so an output the kernel
leaves partly unwritten shows up as NaN, not as a previous call's correct values; ``run`` is
called once unchecked first, so autotuning (which writes the outputs with every
configuration) is over before the checked call. Off CUDA, poisoning is a no-op.

On Triton's CPU interpreter fla's autotuned kernels cannot run: the baseline is skipped and
only the absolute tolerances apply.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from ladder.paths import LadderError

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
    pooled: dict[str, dict[str, float | str]] | None = None
    # {output: [(candidate, baseline) error per pooled seed]}: for printing, not recorded
    per_seed: dict[str, list[tuple[float, float]]] | None = None
    # the outputs that failed their tests, each with why (for printing, not recorded)
    failed: dict[str, str] = field(default_factory=dict)

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
        if self.pooled:
            out["pooled"] = {
                n: {
                    k: (v if isinstance(v, (int, str)) or math.isfinite(v) else None)
                    for k, v in p.items()
                }
                for n, p in self.pooled.items()
            }
        return out


def _noop(specs: list[tuple[tuple[int, ...], Any]]) -> None:
    return None


def check_shape(
    family: ModuleType,
    idea: Any,
    shape: Any,
    device: Any,
    seed: int,
    *,
    baseline: bool,
    strided: bool = False,
    pool_seeds: int | None = None,
) -> ShapeCheck:
    """Check one shape: fresh inputs from ``family.make_inputs(shape, device, seed)``, the
    oracle ``family.reference(*inputs)``, then ``family.run`` on the candidate (a warm-up
    call, then a checked call on poisoned memory) and, if ``baseline``, on
    ``family.BASELINE``. ``strided`` passes the inputs through ``family.strided`` first.
    ``idea`` is an idea module (or BASELINE). Exceptions from the candidate or baseline
    propagate; LadderError when ``strided`` is asked of a family without ``strided``.
    ``pool_seeds`` replaces family.RATIO_POOL_SEEDS for this check (a study of a noisy ratio;
    bench records always pool over the family's number).
    Returns a :class:`ShapeCheck`; its name gets ``+strided`` for the strided layout."""
    import torch

    names = tuple(family.TOLERANCES)
    dev = torch.device(device)
    inputs = tuple(family.make_inputs(shape, dev, seed))
    if strided:
        hook = getattr(family, "strided", None)
        if hook is None:
            raise LadderError(
                f"family {family.FAMILY} defines no strided(inputs); check without --strided"
            )
        inputs = tuple(hook(inputs))
    refs = tuple(family.reference(*inputs))
    if len(refs) != len(names):
        raise LadderError(
            f"family {family.FAMILY}: reference returned {len(refs)} outputs, TOLERANCES names "
            f"{len(names)} ({', '.join(names)}); make them agree in family.py"
        )

    def poison(specs: list[tuple[tuple[int, ...], Any]]) -> None:
        _sync(dev)
        _poison(specs, dev)

    def call(impl: Any, poisoned: bool) -> tuple:
        family.run(impl, inputs, _noop)  # compiles and autotunes: writes the outputs freely
        _sync(dev)
        outs = tuple(family.run(impl, inputs, poison if poisoned else _noop))
        _sync(dev)
        return outs

    outs = call(idea, poisoned=True)
    problems: list[str] = []
    if len(outs) != len(names):
        problems.append(f"run returned {len(outs)} outputs, want {len(names)} ({', '.join(names)})")
        cand = dict.fromkeys(names, math.nan)
    else:
        cand = {n: rel_err(o, r) for n, o, r in zip(names, outs, refs, strict=True)}
        hook = getattr(family, "contract_problems", None)
        if hook is not None:
            problems += list(hook(outs, inputs))
    del outs
    base = ratio = None
    if baseline:
        bouts = call(family.BASELINE, poisoned=False)
        base = {n: rel_err(o, r) for n, o, r in zip(names, bouts, refs, strict=True)}
        del bouts
        ratio = {n: (cand[n] / base[n] if base[n] > 0 else math.inf) for n in names}
    few_elements = getattr(family, "RATIO_MIN_ELEMENTS", 0)
    few = [n for n, r in zip(names, refs, strict=True) if 0 < r.numel() < few_elements]
    ref_norm = {n: _norm(r) for n, r in zip(names, refs, strict=True) if n in few}
    del refs

    def ratio_ok(c: float, b: float) -> bool:
        return c <= family.ERR_RATIO_MAX * b + SLACK

    pooled = per_seed = None
    if base is not None and few and not problems:
        first = {n: (cand[n], base[n], ref_norm[n]) for n in few}
        n_seeds = int(family.RATIO_POOL_SEEDS if pool_seeds is None else pool_seeds)
        pooled, per_seed = _pooled(family, idea, shape, dev, seed, strided, names, first, n_seeds)
    failed: dict[str, str] = {}
    for n in names:
        tol = family.TOLERANCES[n]
        # nan compares false throughout: a non-finite output fails, and so does one whose
        # baseline error is not finite (there is nothing to hold it to)
        if pooled is not None and per_seed is not None and n in pooled:
            p = pooled[n]
            for i, (c, b) in enumerate(per_seed[n]):
                if not (c <= tol or (b > tol and ratio_ok(c, b))):
                    failed[n] = (
                        f"error {c:.3e} at seed {seed + i} is past the tolerance {tol:g}"
                        + (
                            f" and {c / b:.2f}x fla's {b:.3e} there"
                            if b > tol and math.isfinite(b)
                            else ""
                        )
                    )
                    break
            if n in failed:
                continue
            if not math.isfinite(p["baseline_err"]):
                failed[n] = "fla's own error is not finite at a pooled seed: no ratio to judge by"
            elif not ratio_ok(p["candidate_err"], p["baseline_err"]):
                failed[n] = (
                    f"pooled error {p['err_ratio']:.3f}x fla's over {p['seeds']} seeds, past "
                    f"{family.ERR_RATIO_MAX}x"
                )
        elif not cand[n] <= tol:
            failed[n] = f"error {cand[n]:.3e} is past the tolerance {tol:g}"
        elif base is None or n in few:
            continue  # no baseline; or a few-element output, whose one-seed ratio says little
        elif not math.isfinite(base[n]):
            failed[n] = "fla's own error is not finite here: no ratio to judge by"
        elif not ratio_ok(cand[n], base[n]):
            failed[n] = (
                f"error {cand[n] / base[n]:.3f}x fla's, past {family.ERR_RATIO_MAX}x"
                if base[n] > 0
                else f"error {cand[n]:.3e} where fla's is 0"
            )
    passed = not problems and not failed
    label = shape.name + ("+strided" if strided else "")
    return ShapeCheck(label, cand, base, ratio, passed, problems, pooled, per_seed, failed)


def _pooled(
    family: ModuleType,
    idea: Any,
    shape: Any,
    dev: Any,
    seed: int,
    strided: bool,
    names: tuple[str, ...],
    first: dict[str, tuple[float, float, float]],
    n_seeds: int,
) -> tuple[dict[str, dict[str, float | str]], dict[str, list[tuple[float, float]]]]:
    """Errors of the outputs in ``first`` ({output: (candidate error, baseline error,
    reference norm) at ``seed``}) pooled with those at the next ``n_seeds - 1`` seeds:
    ({output: {"seeds", "candidate_err", "baseline_err", "err_ratio",
    "worst_candidate_err", "pooling"}}, {output: the per-seed (candidate, baseline) errors}).

    A pooled error is the relative error of every seed's output taken together:
    sqrt(sum_s ||out_s - ref_s||^2 / sum_s ||ref_s||^2). Each seed counts by its absolute
    error, not its relative one, so a seed whose reference nearly cancels (its relative
    errors 10x the others', both implementations') does not stand in for the whole pool."""
    per = {n: [(c, b)] for n, (c, b, _) in first.items()}
    norms = {n: [r] for n, (_, _, r) in first.items()}
    for s in range(seed + 1, seed + n_seeds):
        inputs = tuple(family.make_inputs(shape, dev, s))
        if strided:
            inputs = tuple(family.strided(inputs))
        refs = dict(zip(names, family.reference(*inputs), strict=True))
        got = dict(zip(names, family.run(idea, inputs, _noop), strict=True))
        want = dict(zip(names, family.run(family.BASELINE, inputs, _noop), strict=True))
        _sync(dev)
        for n in per:
            per[n].append((rel_err(got[n], refs[n]), rel_err(want[n], refs[n])))
            norms[n].append(_norm(refs[n]))
        del inputs, refs, got, want
    res: dict[str, dict[str, float | str]] = {}
    for n, pairs in per.items():
        c = stacked_error([a for a, _ in pairs], norms[n])
        b = stacked_error([x for _, x in pairs], norms[n])
        worst = max((a for a, _ in pairs), default=0.0)
        if any(not math.isfinite(a) for a, _ in pairs):
            c = worst = math.nan
        res[n] = {
            "seeds": n_seeds,
            "candidate_err": c,
            "baseline_err": b,
            "err_ratio": c / b if b > 0 else (math.inf if c > 0 else 1.0),
            "worst_candidate_err": worst,
            "pooling": "stacked",  # records without this key pooled per-seed relative errors
        }
    return res, per


def _norm(t: Any) -> float:
    import torch

    return float(torch.linalg.vector_norm(t.to(torch.float64)))


def stacked_error(rel: list[float], ref_norms: list[float]) -> float:
    """The relative error of several seeds' outputs taken together, from each seed's
    relative error (absolute where its reference is zero, as rel_err gives it) and
    reference norm."""
    abs_sq = sum((e * r if r > 0 else e) ** 2 for e, r in zip(rel, ref_norms, strict=True))
    ref_sq = sum(r * r for r in ref_norms)
    return math.sqrt(abs_sq / ref_sq) if ref_sq > 0 else math.sqrt(abs_sq)
