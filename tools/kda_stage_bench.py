"""Time one stage of kda ideas against fla's, stage alone (on the H200).

    python tools/kda_stage_bench.py 004 005 --launch 64,64,4,2 --launch 32,64,4,2,168 \
        --out out/kda-wy-bench.json
    python tools/kda_stage_bench.py 006 --stage dhu --launch 64,8,3 --launch 32,4,3 \
        --out out/kda-dhu-bench.json
    python tools/kda_stage_bench.py 008 --stage fwdho --launch 64,4,1 --launch 32,4,2 \
        --out out/kda-fwdho-bench.json
    python tools/kda_stage_bench.py 009 --stage gate --launch 32,2 --launch 64,4 \
        --out out/kda-gate-bench.json
    python tools/kda_stage_bench.py 011 --stage fwdintra --launch 16,2,2,0 --launch 16,2,4,1 \
        --out out/kda-fwdintra-bench.json
    python tools/kda_stage_bench.py 003 013 --stage intra --launch 32,2,2 --launch 32,4,2 \
        --out out/kda-intra-bench.json

A whole-op bench re-runs fla's autotuned chain for every launch tried; this tool times one
stage on random inputs of its shapes and dtypes at one problem size (default prod: B16
T8192 H16 K128 V256, dense):

- `--stage wy` (default): the fused WY / dq / dk / dg stage, the largest part of what
  separates the ideas' backward passes (ladder/kernels/kda/ideas/004-wy-split-k/NOTES.md).
  fla 0.6.0's ``chunk_kda_bwd_wy_dqkg_fused`` (state_v_first) against each idea's
  ``wy.kda_bwd_wy`` at each launch: BK, BV, warps, stages[, maxnreg].
- `--stage dhu`: the state-gradient stage, with an initial state and a final-state
  gradient. fla's ``chunk_gated_delta_rule_bwd_dhu`` (state_v_first) against each idea's
  ``dhu.bwd_dhu`` at each launch: BV, warps, stages.
- `--stage fwdh`: the backward's recompute of the chunk states (h and v_new), with an
  initial state. fla's autotuned ``chunk_gated_delta_rule_fwd_h`` (state_v_first) against
  each idea's fixed launch of the same kernel, ``fwdh.fwd_h`` (kda/020), at each launch: BV,
  warps, stages.
- `--stage fwdho`: the forward's state pass and output, with an initial and a final state
  (kda/019's walk reads qg = q * 2^g made before the timed calls: that cost is the w/u stage's).
  fla's two kernels, ``chunk_gated_delta_rule_fwd_h`` then ``chunk_gla_fwd_o_gk``
  (state_v_first), against each idea's fused ``fwd.fwd_h_o`` (kda/008) at each launch: BV,
  warps, stages.
- `--stage gate`: the backward's reverse chunk-local cumsum of dg and the gate's backward
  (softplus form). fla's two calls, ``chunk_local_cumsum(reverse=True)`` then
  ``kda_gate_bwd``, against each idea's one-pass ``gate.gate_tail`` (kda/009) at each
  launch: BK, warps.
- `--stage fwdintra`: the forward's intra-chunk stage (both score matrices, the triangular
  solve, w, u and kg) on the family's inputs of one named shape (`--shape`, default prod;
  the gate is the shape's, through fla's gate cumsum, so the share of diagonal-tile rows
  that take kda/011's exact loop is the layer's; the report gives it). fla's
  ``chunk_kda_fwd_intra`` against each idea's ``intra_fwd.fwd_intra`` at each launch: BK,
  warps, solve warps, w/u fused (0/1)[, stages] (kda/012 and later read only BK, warps and
  stages). fla leaves Aqk above
  the diagonal unwritten (and so does kda/012), so Aqk is compared, and checked for
  determinism, on the lower triangle of each chunk.
- `--stage intra`: the backward's intra-chunk stage on the same inputs as fwdintra's (the
  named shape's gate), with random score gradients as the WY stage leaves them. fla's
  ``chunk_kda_bwd_intra`` against each idea's ``intra.kda_bwd_intra`` (kda/003, kda/013,
  kda/014, kda/018) at each launch: BK, warps, stages, and a register cap for an idea with
  that knob (kda/014, kda/018).

fla's function is autotuned at that size in this process on its first call. The launch is
set through the idea module's knob globals for the call (the same values its knobs give at
import); a launch with a maxnreg, or fwdintra's stages, is skipped for an idea without that
knob. Without
`--launch` each idea runs at its own knob values (its defaults, or the KDA_* environment).

`--rounds N` then times fla and every launch that ran N more times, one call of each per
round in an order shuffled afresh each round (seeded, so a run repeats), so that neither
side always runs first, or right after the other, on a warming GPU; the report adds each
row's per-round times, their median and spread, and the median of the per-round ratios
fla / ours.

A launch that does not fit the SM (Triton's OutOfResources: shared memory or threads), or
that the kernel cannot be compiled at, is reported as such in its row and the sweep goes on;
launches no kernel here could take (BK or BV below 16, more than 32 warps, a maxnreg outside
32..255) are refused before anything runs. Per row: the median ms of
``triton.testing.do_bench``, whether two calls gave bitwise equal
outputs (a kernel with a race shows here, not in an error against the oracle), and the
largest relative L2 difference of any output from fla's on the same inputs. A launch is a
lead for a ladder bench, not a record. Exit status: 0 done; 1 an idea's outputs differ
from fla's by more than 1e-2 or are not deterministic; 2 usage error or no CUDA GPU.
"""

from __future__ import annotations

import importlib
import json
import math
import platform
import random
import statistics
import sys
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import typer  # noqa: E402
from kda_wy_sass import knob_problem  # noqa: E402
from outpath import out_problem, write_report  # noqa: E402

from ladder.check import rel_err  # noqa: E402

OUTPUTS = {
    "wy": ("dq", "dk", "dv2", "db", "dg", "dA"),
    "dhu": ("dh", "dh0", "dv2"),
    "fwdh": ("h", "v_new"),
    "fwdho": ("o", "ht"),
    "gate": ("dg", "dA_log", "ddt_bias"),
    "fwdintra": ("w", "u", "kg", "Aqk", "Akk"),
    "intra": ("dq", "dk", "db", "dg"),
}
MAX_REL = 1e-2  # bf16 operands in both kernels' products: 1e-3 is typical (004's NOTES)
KNOBS = {
    "wy": ("BK", "BV", "NUM_WARPS", "NUM_STAGES", "MAXNREG"),
    "dhu": ("BV", "NUM_WARPS", "NUM_STAGES"),
    "fwdh": ("BV", "NUM_WARPS", "NUM_STAGES"),
    "fwdho": ("BV", "NUM_WARPS", "NUM_STAGES"),
    "gate": ("BK", "NUM_WARPS"),
    "fwdintra": ("BK", "NUM_WARPS", "SOLVE_WARPS", "FUSE_WU", "NUM_STAGES"),
    "intra": ("BK", "NUM_WARPS", "NUM_STAGES", "MAXNREG"),
}
MODULES = {"wy": "wy", "dhu": "dhu", "fwdh": "fwdh", "fwdho": "fwd", "gate": "gate", "fwdintra": "intra_fwd",
           "intra": "intra"}  # fmt: skip
FORMS = {"wy": "BK,BV,warps,stages[,maxnreg]", "dhu": "BV,warps,stages", "fwdh": "BV,warps,stages",
         "fwdho": "BV,warps,stages", "gate": "BK,warps",
         "fwdintra": "BK,warps,solve_warps,fuse_wu[,stages]", "intra": "BK,warps,stages[,maxnreg]"}  # fmt: skip


def launch_values(launch: dict[str, int], current: dict[str, int]) -> dict[str, int]:
    """The knob globals one idea runs a launch at: the launch's values over the module's
    ``current`` ones; a launch given without a maxnreg runs uncapped (MAXNREG 0), and the
    empty launch (no --launch) is the module's values as they are."""
    if not launch:
        return dict(current)
    return {n: launch.get(n, 0 if n == "MAXNREG" else v) for n, v in current.items()}


def interleaved_times(
    calls: dict[str, Callable[[], object]],
    rounds: int,
    timer: Callable[[Callable[[], object]], float],
    seed: int = 0,
) -> tuple[dict[str, list[float]], list[list[str]]]:
    """Each of ``calls`` timed once per round by ``timer`` (ms), the order of the calls
    shuffled afresh each round with ``random.Random(seed)``: ({name: ms per round}, the
    order of each round)."""
    rng = random.Random(seed)
    names = list(calls)
    times: dict[str, list[float]] = {n: [] for n in names}
    orders = []
    for _ in range(rounds):
        order = names[:]
        rng.shuffle(order)
        orders.append(order)
        for name in order:
            times[name].append(float(timer(calls[name])))
    return times, orders


def round_summary(ours: list[float], fla: list[float]) -> dict[str, float]:
    """Median and spread of one row's per-round times, and the median of the per-round
    ratios fla / ours (paired by round)."""
    return dict(
        ms_median=statistics.median(ours),
        ms_min=min(ours),
        ms_max=max(ours),
        ratio_median=statistics.median(f / o for f, o in zip(fla, ours, strict=True)),
    )


def parse_launch(spec: str, stage: str = "wy") -> dict[str, int]:
    """The stage's knob globals from a launch string: wy "BK,BV,warps,stages[,maxnreg]" ->
    {"BK", "BV", "NUM_WARPS", "NUM_STAGES"[, "MAXNREG"]}; dhu, fwdh and fwdho "BV,warps,stages" ->
    {"BV", "NUM_WARPS", "NUM_STAGES"}; gate "BK,warps" -> {"BK", "NUM_WARPS"}; fwdintra
    "BK,warps,solve_warps,fuse_wu[,stages]" -> {"BK", "NUM_WARPS", "SOLVE_WARPS", "FUSE_WU"[,
    "NUM_STAGES"]} (fuse_wu 0 or 1, the others positive); intra "BK,warps,stages[,maxnreg]" -> {"BK", "NUM_WARPS",
    "NUM_STAGES"[, "MAXNREG"]}. ValueError naming what is wrong."""
    form = FORMS[stage]
    counts = {"wy": (4, 5), "gate": (2,), "fwdintra": (4, 5), "intra": (3, 4)}.get(stage, (3,))
    try:
        parts = [int(p) for p in spec.split(",")]
    except ValueError:
        raise ValueError(f"--launch {spec!r}: integers {form}") from None
    positive = parts[:3] + parts[4:] if stage == "fwdintra" else parts
    if len(parts) not in counts or min(positive) < 1:
        what = {"wy": "four or five", "gate": "two", "fwdintra": "four or five",
                "intra": "three or four"}  # fmt: skip
        what = what.get(stage, "three")
        raise ValueError(f"--launch {spec!r}: {what} positive ints, {form}")
    if stage == "fwdintra" and parts[3] not in (0, 1):
        raise ValueError(f"--launch {spec!r}: fuse_wu {parts[3]} is not 0 or 1")
    names = {
        "wy": ("BK", "BV", "warps"),
        "gate": ("BK", "warps"),
        "fwdintra": ("BK", "warps", "solve_warps"),
        "intra": ("BK", "warps"),
    }.get(stage, ("BV", "warps"))
    values = dict(zip(KNOBS[stage], parts))
    if "MAXNREG" in values:
        names = (*names, *[None] * (len(KNOBS[stage]) - 1 - len(names)), "maxnreg")
    for name, n in zip(names, parts):
        # the sass tool's rules (the gate tail's BK takes no tl.dot)
        problem = name and knob_problem(name, n, dot=stage != "gate")
        if problem:
            raise ValueError(f"--launch {spec!r}: {problem}")
    return values


def inputs(B: int, T: int, H: int, HV: int, K: int, V: int, device: str = "cuda") -> dict:
    """Random inputs of the stage at one size: L2-normalised q, k; a chunk-local cumulative
    gate in log2 units (about -0.05 per token); A unit lower-triangular per chunk."""
    import torch

    gen = torch.Generator(device=device).manual_seed(0)
    NT = T // 64

    def rn(*shape, s=1.0):
        return (torch.randn(*shape, device=device, generator=gen) * s).to(torch.bfloat16)

    q = torch.nn.functional.normalize(torch.randn(B, T, H, K, device=device, generator=gen), dim=-1)
    k = torch.nn.functional.normalize(torch.randn(B, T, H, K, device=device, generator=gen), dim=-1)
    g = -0.1 * torch.rand(B, NT, 64, HV, K, device=device, generator=gen)
    g = g.cumsum(2).view(B, T, HV, K)
    t = torch.arange(64, device=device)
    lower = (t[None, :] < t[:, None]).to(torch.float)  # strictly below the diagonal
    A = torch.randn(B, NT, HV, 64, 64, device=device, generator=gen) * 0.1 * lower + torch.eye(
        64, device=device
    )
    A = A.permute(0, 1, 3, 2, 4).reshape(B, T, HV, 64).to(torch.bfloat16).contiguous()
    return dict(
        q=q.to(torch.bfloat16), k=k.to(torch.bfloat16), v=rn(B, T, HV, V), v_new=rn(B, T, HV, V),
        g=g, beta=torch.rand(B, T, HV, device=device, generator=gen).to(torch.bfloat16), A=A,
        h=rn(B * NT, HV, V, K, s=0.5), do=rn(B, T, HV, V), dh=rn(B * NT, HV, V, K, s=0.5),
        dv=rn(B, T, HV, V), scale=K**-0.5,
    )  # fmt: skip


def judge(diffs: dict[str, float], deterministic: bool) -> tuple[str, bool]:
    """(the output furthest from fla's, whether the launch passes): it passes when two calls
    were bitwise equal and every output is within MAX_REL of fla's. A nan difference (a
    non-finite output, ladder.check.rel_err) is the furthest and fails."""
    worst = max(diffs, key=lambda n: math.inf if math.isnan(diffs[n]) else diffs[n])
    return worst, deterministic and all(d <= MAX_REL for d in diffs.values())


def _usage(message: str) -> None:
    typer.echo(f"kda_stage_bench: error: {message}", err=True)
    raise typer.Exit(2)


def _state_inputs(x: dict, B: int, H: int, HV: int, K: int, V: int, seed: int):
    """(the generator, kg, w, h0) of the state stages: kg = k * 2^g per value head, w random
    bf16, an fp32 initial state; the generator goes on for what else the stage draws."""
    import torch

    T = x["q"].shape[1]
    gen = torch.Generator(device="cuda").manual_seed(seed)
    kg = (x["k"].float().repeat_interleave(HV // H, 2) * torch.exp2(x["g"])).to(torch.bfloat16)
    w = (torch.randn(B, T, HV, K, device="cuda", generator=gen) * 0.1).to(torch.bfloat16)
    h0 = torch.randn(B, HV, V, K, device="cuda", generator=gen)
    return gen, kg, w, h0


def _stage_calls(stage: str, x: dict, B: int, H: int, HV: int, K: int, V: int):
    """(fla's call, ours(mod) -> outputs) for the stage on the inputs x."""
    import torch

    if stage == "fwdho":
        return _fwdho_calls(x, B, H, HV, K, V)
    if stage == "fwdh":
        return _fwdh_calls(x, B, H, HV, K, V)
    if stage == "gate":
        return _gate_calls(B, x["q"].shape[1], HV, K)
    if stage == "fwdintra":
        return _fwdintra_calls(x)
    if stage == "intra":
        return _intra_calls(x)
    if stage == "wy":
        from fla.ops.kda.chunk_bwd import chunk_kda_bwd_wy_dqkg_fused

        names = ("q", "k", "v", "v_new", "g", "beta", "A", "h", "do", "dh", "dv")
        args = [x[n] for n in names]

        def fla_call():
            return chunk_kda_bwd_wy_dqkg_fused(*args, scale=x["scale"], state_v_first=True)

        def ours(mod):
            return mod.kda_bwd_wy(*args, x["scale"])

        return fla_call, ours
    from fla.ops.common.chunk_delta_h import chunk_gated_delta_rule_bwd_dhu

    gen, kg, w, h0 = _state_inputs(x, B, H, HV, K, V, seed=1)
    qg = (x["q"].float().repeat_interleave(HV // H, 2) * torch.exp2(x["g"])).to(torch.bfloat16)
    dht = torch.randn(B, HV, V, K, device="cuda", generator=gen)

    def fla_call():
        return chunk_gated_delta_rule_bwd_dhu(
            q=qg, k=kg, w=w, gk=x["g"], h0=h0, dht=dht, do=x["do"], dv=x["dv"],
            scale=x["scale"], state_v_first=True,
        )  # fmt: skip

    def ours(mod):
        return mod.bwd_dhu(qg, kg, w, x["do"], x["dv"], x["g"], h0, dht, x["scale"])

    return fla_call, ours


def _fwdh_calls(x: dict, B: int, H: int, HV: int, K: int, V: int):
    """(fla's call, ours(mod)) for the backward's recompute of the chunk states (h, v_new):
    kg = k * 2^g, w random, u = v, an initial state; fla's autotuned wrapper against the
    idea's fixed launch of the same kernel (kda/020)."""
    from fla.ops.common.chunk_delta_h import chunk_gated_delta_rule_fwd_h

    _gen, kg, w, h0 = _state_inputs(x, B, H, HV, K, V, seed=4)
    u, g = x["v"], x["g"]

    def fla_call():
        h, v_new, _ = chunk_gated_delta_rule_fwd_h(
            k=kg, w=w, u=u, gk=g, initial_state=h0, output_final_state=False, state_v_first=True
        )
        return h, v_new

    def ours(mod):
        return mod.fwd_h(kg, w, u, g, h0)

    return fla_call, ours


def _fwdho_calls(x: dict, B: int, H: int, HV: int, K: int, V: int):
    """(fla's call, ours(mod)) for the forward's state pass and output: kg = k * 2^g, w
    random, u = v, Aqk = A, an initial state, the final state returned. An idea whose
    ``fwd_h_o`` reads qg (kda/019) gets qg = q * 2^g in bf16, made once outside the timed
    calls: its cost is the w/u stage's (one more read of q and write of qg), which this
    stage's time leaves out."""
    import inspect

    import torch
    from fla.ops.common.chunk_delta_h import chunk_gated_delta_rule_fwd_h
    from fla.ops.gla.chunk import chunk_gla_fwd_o_gk

    _gen, kg, w, h0 = _state_inputs(x, B, H, HV, K, V, seed=2)
    q, u, g, A, scale = x["q"], x["v"], x["g"], x["A"], x["scale"]
    qg = (q.float().repeat_interleave(HV // H, 2) * torch.exp2(g)).to(torch.bfloat16)

    def fla_call():
        h, v_new, ht = chunk_gated_delta_rule_fwd_h(
            k=kg, w=w, u=u, gk=g, initial_state=h0, output_final_state=True, state_v_first=True
        )
        o = chunk_gla_fwd_o_gk(q=q, v=v_new, g=g, A=A, h=h, scale=scale, state_v_first=True)
        return o, ht

    reads_qg: dict[object, bool] = {}  # per module, asked once, not in the timed calls

    def ours(mod):
        if mod not in reads_qg:
            reads_qg[mod] = next(iter(inspect.signature(mod.fwd_h_o).parameters)) == "qg"
        return mod.fwd_h_o(qg if reads_qg[mod] else q, kg, w, u, g, A, scale, h0, True)

    return fla_call, ours


def _gate_calls(B: int, T: int, HV: int, K: int):
    """(fla's two calls, ours(mod)) for the gate tail: dg of the gate cumsum fp32, the raw
    gate bf16 (about the layer's range), A_log and dt_bias as KimiDeltaAttention starts them."""
    import torch
    from fla.ops.kda.gate import kda_gate_bwd
    from fla.ops.utils import chunk_local_cumsum

    gen = torch.Generator(device="cuda").manual_seed(3)
    dgc = torch.randn(B, T, HV, K, device="cuda", generator=gen) * 1e-3
    g = (torch.randn(B, T, HV, K, device="cuda", generator=gen) * 2).to(torch.bfloat16)
    A_log = torch.log(torch.empty(HV, device="cuda").uniform_(1, 16, generator=gen))
    dt_bias = torch.full((HV * K,), -4.0, device="cuda")

    def fla_call():
        dyg = chunk_local_cumsum(dgc, chunk_size=64, reverse=True)
        return kda_gate_bwd(g=g, A_log=A_log, dt_bias=dt_bias, dyg=dyg)

    def ours(mod):
        return mod.gate_tail(dgc, g, A_log, dt_bias)

    return fla_call, ours


def fwdintra_inputs(shape_name: str) -> dict:
    """The family's inputs of the named shape, as kda_fwd turns them into the intra-chunk
    stage's: L2-normalised q, k, beta after the sigmoid, the gate cumsum in log2 units
    (fla's ``kda_gate_chunk_cumsum``), and fla's chunk_indices for a packed shape."""
    from fla.modules.norm.l2norm import l2norm_fwd
    from fla.ops.common.gate import fused_beta_sigmoid
    from fla.ops.kda.gate import kda_gate_chunk_cumsum
    from fla.ops.utils.index import prepare_chunk_indices
    from ladder.kernels.kda.ideas.i005 import chain

    from ladder.kernels.kda import family

    shapes = {s.name: s for group in family.SHAPES.values() for s in group}
    if shape_name not in shapes:
        raise ValueError(f"--shape {shape_name!r}: not a kda shape ({', '.join(shapes)})")
    shape = shapes[shape_name]
    q, k, v, g, beta, A_log, dt_bias, _h0, cu, _do, _dht, lb, neg = family.make_inputs(
        shape, "cuda", 0
    )
    chunk_indices = prepare_chunk_indices(cu, chain.CHUNK) if cu is not None else None
    gc = kda_gate_chunk_cumsum(
        g=g, A_log=A_log, dt_bias=dt_bias, scale=chain.RCP_LN2, chunk_size=chain.CHUNK,
        cu_seqlens=cu, chunk_indices=chunk_indices, lower_bound=lb,
    )  # fmt: skip
    return dict(
        q=l2norm_fwd(q)[0], k=l2norm_fwd(k)[0], v=v, g=gc,
        beta=fused_beta_sigmoid(x=beta, scale=2.0 if neg else 1.0), scale=q.shape[-1] ** -0.5,
        cu_seqlens=cu, chunk_indices=chunk_indices, shape=shape,
    )  # fmt: skip


def exact_row_share(g, limit: float) -> float:
    """The share of rows whose diagonal 16-token tile (kda/011's ``intra_fwd``) takes the
    exact loop: a row whose gate, or an earlier row's of the tile, lies more than ``limit``
    log2 units below the tile's first row in some column. Dense rows in whole tiles only: g
    [B, T, HV, K] with T a multiple of 16."""
    B, T, HV, K = g.shape
    x = g.view(B, T // 16, 16, HV, K)
    drop = (x[:, :, :1] - x).amax(dim=-1) > limit  # [B, tiles, 16, HV]
    return float((drop.int().cumsum(2) > 0).float().mean())


def segment_passes(g, limit: float, rise: float, bk: int = 0, whole: float = 0.0):
    """Anchored passes per diagonal 16-token tile under the segment rule of kda/017's forward
    diagonal kernel (bk 0: over all K columns) and kda/018's backward one (bk: per K slice
    of bk columns, and a tile whose range over the slice is at most ``whole`` one midpoint
    pass): the first segment's rows lie within +-limit of row 0, a later segment's within
    [-limit, rise] of its first row, each segment one pass; a segment whose earlier rows
    sit more than rise below its anchor ends the passes (the exact loop takes the rest).
    Returns (mean passes, share of tiles that reach the exact loop). Dense rows in whole
    tiles only: g [B, T, HV, K] with T a multiple of 16, bk dividing K; a NaN exponent is
    out of every range, as in the kernels. ValueError for other shapes, limit <= 0, rise or
    whole < 0."""
    import torch

    if g.dim() != 4 or g.numel() == 0:
        raise ValueError(f"segment_passes: g {tuple(g.shape)} is not a non-empty [B, T, HV, K]")
    B, T, HV, K = g.shape
    if T % 16:
        raise ValueError(f"segment_passes: T {T} is not a multiple of 16 (whole tiles only)")
    if bk < 0 or (bk and K % bk):
        raise ValueError(f"segment_passes: bk {bk} does not divide K {K} into slices")
    if not (limit > 0 and rise >= 0 and whole >= 0):
        raise ValueError(
            f"segment_passes: need limit > 0, rise >= 0, whole >= 0: {limit}, {rise}, {whole}"
        )
    x = g.view(B, T // 16, 16, HV, K).permute(0, 1, 3, 2, 4)  # [B, tiles, HV, 16, K]
    if bk:
        x = x.reshape(*x.shape[:4], -1, bk).movedim(-2, 3)  # [B, tiles, HV, slices, 16, bk]
    x = x.reshape(-1, 16, x.shape[-1]).float()
    n = x.shape[0]
    rows = torch.arange(16, device=x.device)
    a = torch.zeros(n, dtype=torch.long, device=x.device)
    passes = torch.zeros(n, dtype=torch.long, device=x.device)
    stopped = torch.zeros(n, dtype=torch.bool, device=x.device)
    mid = (x.amax(1) - x.amin(1)).amax(-1) <= whole if whole > 0 else torch.zeros_like(stopped)
    live = ~mid
    passes += mid.long()
    while bool(live.any()):
        passes += live.long()
        xa = x - x[torch.arange(n, device=x.device), a.clamp(max=15)][:, None, :]
        hi = torch.where(a == 0, limit, rise)
        nan = xa.isnan().any(-1)  # as the kernels: a NaN exponent is out of every range
        out = (xa.amin(-1) < -limit) | (xa.amax(-1) > hi[:, None]) | nan
        nxt = torch.where((rows >= a[:, None]) & out, rows, 16).amin(1)
        low = (xa.amin(-1) < -rise) | nan
        stop = (nxt == a) | (low & (rows < a[:, None])).any(1)
        stopped |= live & stop
        a = torch.where(live & ~stop, nxt, a)
        live = live & ~stop & (a < 16)
    return float(passes.float().mean()), float(stopped.float().mean())


def _chunk_positions(x: dict):
    """Each token's row within its 64-token chunk (of its sequence, for a packed batch)."""
    import torch

    T, cu = x["q"].shape[1], x["cu_seqlens"]
    if cu is None:
        return torch.arange(T, device="cuda") % 64
    starts = torch.repeat_interleave(cu[:-1], cu[1:] - cu[:-1])
    return (torch.arange(T, device="cuda") - starts) % 64


def _intra_calls(x: dict):
    """(fla's call, ours(mod)) for the backward's intra-chunk stage on the shape's q, k, beta
    and gate cumsum (so the share of diagonal tiles past the anchored products' range is the
    layer's), with random score gradients as the WY stage leaves them (dAqk lower-triangular
    per chunk, dAkk strictly lower, fp32, about 0.1) and random fp32 dq, dk, dg and db in."""
    import torch
    from fla.ops.kda.chunk_intra import chunk_kda_bwd_intra

    B, T, H, K = x["q"].shape
    HV = x["g"].shape[2]
    gen = torch.Generator(device="cuda").manual_seed(4)
    t = _chunk_positions(x)
    cols = torch.arange(64, device="cuda")[None, :]
    dAqk = torch.randn(B, T, HV, 64, device="cuda", generator=gen) * 0.1
    dAkk = torch.randn(B, T, HV, 64, device="cuda", generator=gen) * 0.1
    dAqk *= (cols <= t[:, None])[None, :, None, :]
    dAkk *= (cols < t[:, None])[None, :, None, :]
    dq, dk, dg = (torch.randn(B, T, HV, K, device="cuda", generator=gen) for _ in range(3))
    db = torch.randn(B, T, HV, device="cuda", generator=gen)
    args = (x["q"], x["k"], x["g"], x["beta"], dAqk, dAkk, dq, dk, db, dg)
    cu, ci = x["cu_seqlens"], x["chunk_indices"]

    def fla_call():
        return chunk_kda_bwd_intra(*args, cu_seqlens=cu, chunk_indices=ci, chunk_size=64)

    def ours(mod):
        return mod.kda_bwd_intra(*args, cu_seqlens=cu, chunk_indices=ci)

    return fla_call, ours


def _fwdintra_calls(x: dict):
    """(fla's call, ours(mod)) for the forward's intra-chunk stage; both Aqk are masked to
    the lower triangle of each chunk (fla leaves the rest unwritten, and so may an idea)."""
    import torch
    from fla.ops.kda.chunk_intra import chunk_kda_fwd_intra

    cu, ci = x["cu_seqlens"], x["chunk_indices"]
    t = _chunk_positions(x)
    lower = (torch.arange(64, device="cuda")[None, :] <= t[:, None])[None, :, None, :]
    args = (x["q"], x["k"], x["v"], x["g"], x["beta"], x["scale"])

    def fla_call():
        w, u, _qg, kg, Aqk, Akk = chunk_kda_fwd_intra(
            q=x["q"], k=x["k"], v=x["v"], gk=x["g"], beta=x["beta"], scale=x["scale"],
            cu_seqlens=cu, chunk_size=64, chunk_indices=ci,
        )  # fmt: skip
        return w, u, kg, torch.where(lower, Aqk, 0), Akk

    def ours(mod):
        w, u, _qg, kg, Aqk, Akk = mod.fwd_intra(*args, cu_seqlens=cu, chunk_indices=ci)
        # masked as fla's: an idea that leaves those entries unwritten as fla does (kda/012)
        # would otherwise compare whatever the allocator left there, call to call
        return w, u, kg, torch.where(lower, Aqk, 0), Akk

    return fla_call, ours


def _at_launch(ours_of, mod, values: dict[str, int]) -> Callable[[], object]:
    """A zero-argument call of ``mod``'s stage at the knob globals ``values``, the module's
    own values put back after each call."""

    def call():
        saved = {n: getattr(mod, n) for n in values}
        for n, val in values.items():
            setattr(mod, n, val)
        try:
            return ours_of(mod)
        finally:
            for n, val in saved.items():
                setattr(mod, n, val)

    return call


def main(
    ideas: list[str] = typer.Argument(..., help="kda idea numbers with the stage, e.g. 004 005"),
    stage: str = typer.Option(
        "wy",
        help="wy (the fused WY stage), dhu (the state gradient), fwdh (the backward's "
        "recompute of the chunk states), fwdho (the forward's "
        "state pass and output), gate (the backward's gate tail), fwdintra (the forward's "
        "intra-chunk stage) or intra (the backward's intra-chunk stage)",
    ),
    launch: list[str] = typer.Option(
        None,
        help="wy: BK,BV,warps,stages[,maxnreg]; dhu, fwdh, fwdho: BV,warps,stages; gate: BK,warps; "
        "fwdintra: BK,warps,solve_warps,fuse_wu[,stages]; intra: BK,warps,stages[,maxnreg] "
        "(repeatable)",
    ),
    shape: str = typer.Option(
        "prod",
        help="fwdintra, intra: the kda family shape whose inputs (and sizes: --B .. --V are not "
        "used) it runs on",
    ),
    rounds: int = typer.Option(
        0,
        min=0,
        help="after the sweep, time fla and every launch that ran in this many rounds, each "
        "once per round, in an order shuffled each round (0: no rounds)",
    ),
    out: Path = typer.Option(Path("out/kda-stage-bench.json"), help="the JSON report"),
    B: int = typer.Option(16, min=1),
    T: int = typer.Option(8192, min=64),
    H: int = typer.Option(16, min=1),
    HV: int = typer.Option(16, min=1),
    K: int = typer.Option(128, min=1, max=256),
    V: int = typer.Option(256, min=1, max=512),
) -> None:
    """Time each idea's stage at each launch against fla's, stage alone."""
    if stage not in KNOBS:
        _usage(f"--stage {stage!r}: wy, dhu, fwdh, fwdho, gate, fwdintra or intra")
    try:  # no --launch: one launch, each idea at its own knob values
        launches = [parse_launch(spec, stage) for spec in launch] if launch else [{}]
    except ValueError as exc:
        _usage(str(exc))
    if T % 64:
        _usage(f"T {T} is not a multiple of 64 (the stage's chunk)")
    if HV % H:
        _usage(f"HV {HV} is not a multiple of H {H}")
    if out.is_dir():  # the rest of the --out check creates folders: after the GPU check
        _usage(out_problem(out, "kda-stage-bench.json"))
    from ladder import paths

    mods = {}
    for idea in ideas:
        try:
            folder = paths.resolve_idea("kda", idea)
        except paths.UnknownIdea as exc:
            _usage(str(exc).splitlines()[0])
        stem = MODULES[stage]
        if not (paths.family_dir("kda") / "ideas" / folder / f"{stem}.py").is_file():
            owners = sorted(
                f.parent.name[:3] for f in (paths.family_dir("kda") / "ideas").glob(f"*/{stem}.py")
            )
            _usage(
                f"kda idea {folder} has no {stem}.py, the --stage {stage} module; ideas "
                f"with one: {', '.join(owners) or 'none'}"
            )
        mods[idea] = importlib.import_module(f"ladder.kernels.kda.ideas.i{folder[:3]}.{stem}")
        top = getattr(mods[idea], "MAX_K", None)
        if stage in ("fwdho", "fwdh", "dhu") and top is not None and K > top:
            # above it the idea's stage hands the call to fla's kernels (a row would time fla
            # against itself) or refuses it (kda/019)
            _usage(
                f"--K {K}: kda idea {folder}'s --stage {stage} runs K <= {top} only (above that "
                "it is fla's kernels or refused): nothing of its own to time"
            )
    import torch

    if stage in ("fwdintra", "intra"):  # a mistyped shape is refused on any machine
        from ladder.kernels.kda import family

        known = [sh.name for group in family.SHAPES.values() for sh in group]
        if shape not in known:
            _usage(f"--shape {shape!r}: not a kda shape ({', '.join(known)})")
    if not torch.cuda.is_available():
        _usage("no CUDA GPU (run it on the H200)")
    problem = out_problem(out, "kda-stage-bench.json")
    if problem:
        _usage(problem)
    import triton

    extra = {}
    if stage in ("fwdintra", "intra"):
        try:
            x = fwdintra_inputs(shape)
        except ValueError as exc:
            _usage(str(exc))
        sh = x["shape"]
        B, T, H, HV, K, V = sh.B, sh.T, sh.H, sh.HV, sh.K, sh.V
        if stage == "fwdintra" and x["cu_seqlens"] is None and T % 16 == 0:
            for idea, mod in mods.items():
                extra[f"exact_row_share_{idea}"] = exact_row_share(x["g"], mod.LIMIT)
                if hasattr(mod, "RISE"):  # kda/017's segments
                    extra[f"passes_{idea}"], extra[f"exact_tile_share_{idea}"] = segment_passes(
                        x["g"], mod.LIMIT, mod.RISE
                    )
        if stage == "intra" and x["cu_seqlens"] is None and T % 16 == 0:
            for idea, mod in mods.items():
                if not hasattr(mod, "SEG"):
                    continue
                for bk in sorted({lp.get("BK", mod.BK) for lp in launches}):
                    # kda/018's segments, per K slice of each launch's BK
                    passes, exact = segment_passes(x["g"], mod.SEG, mod.RISE, bk, mod.DIAG_RANGE)
                    extra[f"passes_{idea}_bk{bk}"] = passes
                    extra[f"exact_tile_share_{idea}_bk{bk}"] = exact
        extra["shape_name"] = shape
    else:
        x = inputs(B, T, H, HV, K, V)
    fla_call, ours_of = _stage_calls(stage, x, B, H, HV, K, V)
    ref = fla_call()  # autotunes here
    fla_ms = triton.testing.do_bench(fla_call)
    typer.echo(f"fla {stage} B{B} T{T} H{H} HV{HV} K{K} V{V}: {fla_ms:.3f} ms {extra or ''}")
    rows, bad = [], False
    timed_calls: dict[str, Callable[[], object]] = {"fla": fla_call}
    for lp in launches:
        for idea, mod in mods.items():
            if lp and not any(hasattr(mod, n) for n in KNOBS[stage]):
                # a stage with no launch knobs of its own (kda/019's intra stage runs kda/012's
                # kernels at kda/012's env knobs): a launch would change nothing it runs
                typer.echo(
                    f"{idea} {','.join(str(v) for v in lp.values())}: skipped (no launch knobs; "
                    "set the env knobs of the modules it imports)"
                )
                continue
            missing = [n for n in ("MAXNREG", "NUM_STAGES") if n in lp and not hasattr(mod, n)]
            if missing:  # a launch the idea cannot run as given
                what = {"MAXNREG": "maxnreg", "NUM_STAGES": "stages"}[missing[0]]
                typer.echo(
                    f"{idea} {','.join(str(v) for v in lp.values())}: skipped (no {what} knob)"
                )
                continue
            values = launch_values(
                lp, {n: getattr(mod, n) for n in KNOBS[stage] if hasattr(mod, n)}
            )
            ours = _at_launch(ours_of, mod, values)
            try:
                a, b = ours(), ours()
            except triton.runtime.errors.OutOfResources as exc:
                # a launch that does not fit the SM (shared memory, registers) is a
                # result of the sweep, not the end of it
                rows.append(dict(idea=idea, **values, error=f"out of resources: {exc}"))
                typer.echo(
                    f"{idea} {','.join(str(v) for v in values.values())}: does not fit ({exc})"
                )
                continue
            except triton.compiler.errors.CompilationError as exc:
                # so is a launch the kernel cannot be compiled at (its last line says why)
                why = str(exc).strip().splitlines()[-1]
                rows.append(dict(idea=idea, **values, error=f"does not compile: {why}"))
                typer.echo(
                    f"{idea} {','.join(str(v) for v in values.values())}: does not compile ({why})"
                )
                continue
            same = all((p is None and q is None) or torch.equal(p, q) for p, q in zip(a, b))
            diffs = {n: rel_err(p, r) for n, p, r in zip(OUTPUTS[stage], a, ref) if r is not None}
            del a, b
            ms = triton.testing.do_bench(ours)
            worst, ok = judge(diffs, same)
            bad |= not ok
            row = dict(
                idea=idea, **values, ms=ms, fla_ms=fla_ms, deterministic=same, rel_diff=diffs
            )
            rows.append(row)
            timed_calls[str(len(rows) - 1)] = ours
            typer.echo(
                f"{idea} {','.join(str(v) for v in values.values())}: {ms:.3f} ms ({fla_ms / ms:.2f}x "
                f"fla), deterministic {same}, largest difference from fla {diffs[worst]:.1e} "
                f"({worst}){'' if ok else '  <- FAILS'}"
            )
    if rounds:
        times, orders = interleaved_times(timed_calls, rounds, triton.testing.do_bench)
        extra["rounds"] = rounds
        extra["fla_ms_rounds"] = times["fla"]
        extra["round_orders"] = orders
        typer.echo(f"{rounds} shuffled rounds: fla median {statistics.median(times['fla']):.3f} ms")
        for key, ms_list in times.items():
            if key == "fla":
                continue
            row = rows[int(key)]
            row["ms_rounds"] = ms_list
            row.update(round_summary(ms_list, times["fla"]))
            launch_txt = ",".join(str(row[n]) for n in KNOBS[stage] if n in row)
            typer.echo(
                f"{row['idea']} {launch_txt}: median {row['ms_median']:.3f} ms "
                f"({row['ms_min']:.3f}-{row['ms_max']:.3f}), per-round fla/ours median "
                f"{row['ratio_median']:.3f}x"
            )
    report = dict(
        tool="kda_stage_bench", stage=stage, device=torch.cuda.get_device_name(),
        host=platform.node(),
        versions=dict(torch=torch.__version__, triton=triton.__version__,
                      fla=importlib.import_module("fla").__version__),
        shape=dict(B=B, T=T, H=H, HV=HV, K=K, V=V), fla_ms=fla_ms, rows=rows, **extra,
    )  # fmt: skip
    write_report(out, json.dumps(report, indent=1) + "\n")
    typer.echo(f"wrote {out}")
    if bad:
        raise typer.Exit(1)


if __name__ == "__main__":
    typer.run(main)
