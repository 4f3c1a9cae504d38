"""fla vs kernel-fun where it counts: the production conv call, and a whole KDA layer step.

    python tools/prodtime.py --out out/prodtime.json          (what `make prodtime` runs)

Times the INSTALLED package (`import kernel_fun`; the research ladder is never imported),
in one process on one GPU:

  conv    fla's causal_conv1d_fwd / causal_conv1d_bwd (called as fla's CausalConv1dFunction
          calls them: activation "silu", no bias, residual or state) against kernel-fun's
          cconv_fwd / cconv_bwd (kernel_fun.cconv._kernels), at B16 T8192 W4, bf16 x, fp32
          weight, D 2048 and 4096. fla's backward includes the forward it re-runs, because
          fla's backward always does. CUDA events around each call, fla and kernel-fun
          interleaved (order alternating) so drift cancels in the ratio, median with p20/p80
          of --iters calls after warm-up (autotuning happens there). Inputs are rotated
          through enough copies to exceed 3x the L2 cache when one call's bytes do not (never
          at these shapes). kernel-fun's results are compared with fla's first; a kernel
          that disagrees is not timed. fla's autotuning happens in this process at these
          shapes: its disk cache of picks (FLA_CACHE_RESULTS) is turned off.
  kda     fla's chunk_kda with KimiDeltaAttention's flags at the layer's size (B8 T8192, 16
          heads of K 128, V 256, bf16), forward + backward through autograd, against
          kernel_fun.kda.chunk_kda, interleaved the same way after an agreement check
          (output and the q, k, v, g, beta gradients against fla's, AGREE_TOL_KDA).
  layer   fla.layers.KimiDeltaAttention (B8 T8192, hidden 2048, 16 heads of 128, expand_v 2,
          conv_size 4), forward + backward, fla vs `kernel_fun.patched_fla("cconv")` (the
          conv alone) vs `kernel_fun.patched_fla()` (every family), interleaved the same way; and from one torch.profiler step of each, the GPU time spent in the
          short-conv kernels over all GPU kernel time (the dw reductions, plain torch sums
          in both, are not counted as conv). Precision "amp" (default): fp32 parameters
          under bf16 autocast, so the conv sees bf16 x and an fp32 weight as in production;
          "bf16": every parameter bf16.

Prints three tables and writes JSON (device, versions, date, command, commit, all numbers;
the commit is git's HEAD of the package's checkout, or PRODTIME_COMMIT when set). The
timed calls themselves take seconds; on a machine with cold Triton caches, compiling and
autotuning fla's and kernel-fun's kernels during warm-up dominates the run (progress is
logged as it goes, and `--skip-layer` leaves out the layer, the largest part of it).
Exit status: 0 done; 1 kernel-fun disagreed with fla or did not engage; 2 usage error or
no CUDA GPU.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import enum
import json
import math
import os
import shlex
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import typer  # noqa: E402
from outpath import out_problem  # noqa: E402
from outpath import write_report as _write  # noqa: E402
from rich.console import Console
from rich.table import Table

EXIT_DISAGREE = 1
EXIT_USAGE = 2

# The production call: B16 T8192 W4, bf16 x, fp32 weight, silu; q/k convs are D 2048, v 4096.
CONV_B, CONV_T, CONV_W = 16, 8192, 4
CONV_DS = (2048, 4096)
LAYER = {
    "B": 8,
    "T": 8192,
    "hidden_size": 2048,
    "num_heads": 16,
    "head_dim": 128,
    "expand_v": 2,
    "conv_size": 4,
}
FLA_CONV_KERNELS = ("causal_conv1d_fwd_kernel", "causal_conv1d_bwd_kernel")
# kernel-fun vs fla (not vs fp64): twice the family's fp64 tolerances, since both round.
AGREE_TOL = {"y": 1e-2, "dx": 1.6e-2, "dw": 4e-2}
# chunk_kda vs fla: the kda family's fp64 tolerances (2e-2 .. 5e-2; both sides round).
AGREE_TOL_KDA = {"o": 2e-2, "dq": 4e-2, "dk": 4e-2, "dv": 4e-2, "dg": 5e-2, "dbeta": 5e-2}
KDA_OP = {"B": 8, "T": 8192, "H": 16, "K": 128, "V": 256}
L2_MULTIPLE = 3  # rotated inputs span at least this many L2 caches
MAX_ROTATION = 8


class Precision(str, enum.Enum):
    amp = "amp"
    bf16 = "bf16"


# ------------------------------------------------------------------------------------------
# pure helpers (no GPU)
# ------------------------------------------------------------------------------------------


def quantile(sorted_values: Sequence[float], q: float) -> float:
    """Linear-interpolated quantile of an ascending sequence; q in [0, 1]."""
    if not sorted_values:
        raise ValueError("quantile of no values")
    pos = q * (len(sorted_values) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def summarize(samples_ms: Iterable[float]) -> dict[str, float]:
    """{median, p20, p80, n} of timings in milliseconds. ValueError when empty."""
    values = sorted(float(v) for v in samples_ms)
    return {
        "median": quantile(values, 0.5),
        "p20": quantile(values, 0.2),
        "p80": quantile(values, 0.8),
        "n": len(values),
    }


def rotation_sets(bytes_per_call: int, l2_bytes: int) -> int:
    """How many input copies to cycle through so consecutive calls never hit in L2."""
    if bytes_per_call <= 0:
        raise ValueError(f"bytes_per_call must be positive, got {bytes_per_call}")
    return max(1, min(MAX_ROTATION, math.ceil(L2_MULTIPLE * l2_bytes / bytes_per_call)))


def our_conv_kernels() -> tuple[str, ...]:
    """The installed build's own conv kernel names (forward, backward and state kernels, as
    `kernel_fun.cconv.ops.kernel_names()` finds them, whatever the vendored idea named
    them): the needles of `conv_share` for the patched steps."""
    from kernel_fun.cconv.ops import kernel_names

    names = kernel_names()
    return names["fwd"] + names["bwd"] + names["other"]


def conv_share(
    kernels: Iterable[tuple[str, float]], conv_kernels: Sequence[str]
) -> dict[str, float | int]:
    """Conv time among GPU kernels: `kernels` is (name, duration in us) per launch.

    Returns {conv_ms, kernel_ms, conv_share, conv_launches}: conv_ms sums the launches whose
    name is one of `conv_kernels` exactly (Triton kernels run under their function's name; a
    substring would take fla's compute_dh0_kernel for our dh0_kernel); kernel_ms sums all
    launches; conv_share = their ratio (0 when nothing ran).
    """
    wanted = set(conv_kernels)
    conv_us = total_us = 0.0
    launches = 0
    for name, us in kernels:
        total_us += us
        if name in wanted:
            conv_us += us
            launches += 1
    return {
        "conv_ms": conv_us / 1e3,
        "kernel_ms": total_us / 1e3,
        "conv_share": conv_us / total_us if total_us > 0 else 0.0,
        "conv_launches": launches,
    }


def rel_l2(a: Any, ref: Any) -> float:
    """||a - ref||_2 / ||ref||_2 of two tensors, in float64."""
    a64, r64 = a.double(), ref.double()
    return float((a64 - r64).norm() / r64.norm().clamp_min(1e-30))


def fmt_ms(stats: dict[str, float] | None) -> str:
    if not stats:
        return "-"
    return f"{stats['median']:.3f} [{stats['p20']:.3f}-{stats['p80']:.3f}]"


def fmt_ratio(ratio: float | None) -> str:
    return "-" if ratio is None else f"{ratio:.2f}x"


def conv_table(report: dict[str, Any]) -> Table:
    """The conv rows of a report as a rich Table (ms: median [p20-p80])."""
    table = Table(title="short conv at the production call (fla / kernel-fun = ratio)")
    for col in ("op", "shape", "fla ms", "kernel-fun ms", "ratio", "vs fla (rel-L2)"):
        table.add_column(col, justify="left" if col in ("op", "shape") else "right")
    for r in report.get("conv", []):
        shape = f"B{r['B']} T{r['T']} D{r['D']} W{r['W']} {r['x_dtype']}/{r['w_dtype']}"
        diff = ", ".join(f"{k} {v:.1e}" for k, v in r["rel_diff_vs_fla"].items())
        if not r["agrees"]:
            diff = f"[red]DISAGREES[/red] {diff}"
        table.add_row(
            r["op"],
            shape,
            fmt_ms(r["fla_ms"]),
            fmt_ms(r["kernel_fun_ms"]),
            fmt_ratio(r["ratio"]),
            diff,
        )
    return table


def layer_table(report: dict[str, Any]) -> Table | None:
    """The KDA layer step of a report as a rich Table; None when the layer was skipped."""
    layer = report.get("layer")
    if not layer:
        return None
    title = (
        f"KimiDeltaAttention fwd+bwd, B{layer['B']} T{layer['T']} hidden {layer['hidden_size']}"
        f" {layer['num_heads']}x{layer['head_dim']} expand_v {layer['expand_v']}"
        f" W{layer['conv_size']}, {layer['precision']}"
    )
    table = Table(title=title)
    for col in ("", "step ms", "conv ms", "all kernels ms", "conv share", "conv launches"):
        table.add_column(col, justify="left" if not col else "right")
    sides = [("fla", "fla"), ("cconv_only", "kernel-fun, conv only"),
             ("kernel_fun", "kernel-fun (patched)")]  # fmt: skip
    for key, label in sides:
        side = layer.get(key)
        if side is None:  # reports written before the conv-only side existed
            continue
        if not side.get("engaged", True):
            label = f"{label} [red]NOT ENGAGED[/red]"
        table.add_row(
            label,
            fmt_ms(side["step_ms"]),
            f"{side['conv_ms']:.3f}",
            f"{side['kernel_ms']:.3f}",
            f"{100 * side['conv_share']:.1f}%",
            str(side["conv_launches"]),
        )
    saved = layer["fla"]["step_ms"]["median"] - layer["kernel_fun"]["step_ms"]["median"]
    table.add_row("fla / kernel-fun", fmt_ratio(layer["ratio"]), "", "", "", "", end_section=True)
    if layer.get("cconv_only"):
        table.add_row("fla / conv only", fmt_ratio(layer["ratio_cconv_only"]), "", "", "", "")
        table.add_row(
            "conv only / kernel-fun", fmt_ratio(layer["ratio_vs_cconv_only"]), "", "", "", ""
        )
    table.caption = f"step time saved: {saved:.3f} ms"
    return table


def kda_table(report: dict[str, Any]) -> Table | None:
    """The chunk_kda op rows of a report as a rich Table; None when not measured."""
    kda = report.get("kda")
    if not kda:
        return None
    table = Table(
        title=f"chunk_kda fwd+bwd (autograd), B{kda['B']} T{kda['T']} {kda['H']}x{kda['K']}"
        f" V{kda['V']}, bf16, KimiDeltaAttention's flags"
    )
    for col in ("", "fla ms", "kernel-fun ms", "fla / kernel-fun", "max rel diff vs fla"):
        table.add_column(col, justify="left" if not col else "right")
    diff = max(kda["rel_diff_vs_fla"].values()) if kda["rel_diff_vs_fla"] else float("nan")
    label = "fwd+bwd" if kda["agrees"] else "fwd+bwd [red]DISAGREES[/red]"
    table.add_row(
        label,
        fmt_ms(kda.get("fla_ms")),
        fmt_ms(kda.get("kernel_fun_ms")),
        fmt_ratio(kda.get("ratio")),
        f"{diff:.2e}",
    )
    return table


def render(report: dict[str, Any], console: Console) -> None:
    """Print the report's tables and one summary line."""
    console.print(conv_table(report))
    kt = kda_table(report)
    if kt is not None:
        console.print(kt)
    lt = layer_table(report)
    if lt is not None:
        console.print(lt)
    dev = report.get("device", {})
    console.print(
        f"{dev.get('name', '?')} {dev.get('capability', '')}; kernel_fun "
        f"{report['versions'].get('kernel_fun', '?')} from {report.get('kernel_fun_path', '?')}; "
        f"fla {report['versions'].get('fla', '?')}; {report['created']}"
    )


def write_report(report: dict[str, Any], path: Path) -> Path:
    """Write the report as indented JSON through ``outpath.write_report`` (parent folders
    created, an earlier file at ``path`` kept beside it). Returns the path."""
    _write(path, json.dumps(report, indent=2, sort_keys=False) + "\n")
    return path


def failures(report: dict[str, Any]) -> list[str]:
    """One line per problem that makes the run exit 1 (disagreement, conv not engaged)."""
    out = [
        f"conv {r['op']} D{r['D']}: kernel-fun disagrees with fla {r['rel_diff_vs_fla']}"
        for r in report.get("conv", [])
        if not r["agrees"]
    ]
    kda = report.get("kda")
    if kda and not kda["agrees"]:
        out.append(f"chunk_kda: kernel-fun disagrees with fla {kda['rel_diff_vs_fla']}")
    if kda and not kda.get("engaged", True):
        out.append("chunk_kda: kernel-fun's chain did not run")
    layer = report.get("layer")
    if layer and not layer["kernel_fun"].get("engaged", True):
        out.append("layer: kernel-fun's conv kernels did not run while patched")
    return out


# ------------------------------------------------------------------------------------------
# GPU measurement
# ------------------------------------------------------------------------------------------


def _require_gpu() -> None:
    try:
        import torch
    except ImportError:
        _usage_error("torch is not installed; prodtime needs torch with CUDA")
    if not torch.cuda.is_available():
        _usage_error(
            "no CUDA GPU visible: prodtime times kernels on a GPU (run `make prodtime` on the H200)"
        )


def _check_out(out: Path) -> None:
    """Refuse an --out that cannot be written, before minutes of measuring."""
    problem = out_problem(out, "prodtime.json")
    if problem:
        _usage_error(problem)


def _usage_error(message: str) -> None:
    typer.echo(f"prodtime: error: {message}", err=True)
    raise typer.Exit(EXIT_USAGE)


def _git_head(where: Path) -> str | None:
    """HEAD of the git checkout holding `where` (None for an installed wheel or no git)."""
    import subprocess

    try:
        proc = subprocess.run(
            ["git", "-C", str(where), "rev-parse", "HEAD"], capture_output=True, text=True
        )
    except OSError:
        return None
    return proc.stdout.strip() or None if proc.returncode == 0 else None


def _device_info() -> dict[str, Any]:
    import torch

    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    return {
        "name": props.name,
        "capability": f"sm{props.major}{props.minor}",
        "sm_count": props.multi_processor_count,
        "l2_bytes": int(getattr(props, "L2_cache_size", 0)),
        "memory_bytes": int(props.total_memory),
    }


def time_interleaved(fns: dict[str, Callable[[], object]], iters: int) -> dict[str, list[float]]:
    """Milliseconds of each callable per call (CUDA events), interleaved, order alternating.

    No synchronization inside the loop, so the host runs ahead and the events time the GPU
    work, not the launch overhead. Warm-up is the caller's business.
    """
    import torch

    names = list(fns)
    starts = {n: [torch.cuda.Event(enable_timing=True) for _ in range(iters)] for n in names}
    ends = {n: [torch.cuda.Event(enable_timing=True) for _ in range(iters)] for n in names}
    torch.cuda.synchronize()
    for i in range(iters):
        for n in names if i % 2 == 0 else reversed(names):
            starts[n][i].record()
            fns[n]()
            ends[n][i].record()
    torch.cuda.synchronize()
    return {n: [s.elapsed_time(e) for s, e in zip(starts[n], ends[n])] for n in names}


def cuda_kernels(fn: Callable[[], object]) -> list[tuple[str, float]]:
    """(name, duration in us) of every GPU kernel `fn` launched, from torch.profiler."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    cuda = torch.autograd.DeviceType.CUDA
    return [
        (e.name, float(e.time_range.elapsed_us())) for e in prof.events() if e.device_type == cuda
    ]


def _rotating(sets: list[tuple[Any, ...]], fn: Callable[..., object]) -> Callable[[], object]:
    state = {"i": 0}

    def call() -> object:
        args = sets[state["i"] % len(sets)]
        state["i"] += 1
        return fn(*args)

    return call


def measure_conv(D: int, iters: int, warmup: int, console: Console) -> list[dict[str, Any]]:
    """fwd and bwd rows at B16 T8192 D W4: fla vs kernel-fun, after an agreement check."""
    import torch
    from fla.modules.causal_conv1d.ops import causal_conv1d_bwd, causal_conv1d_fwd
    from kernel_fun.cconv._kernels import cconv_bwd, cconv_fwd

    B, T, W = CONV_B, CONV_T, CONV_W
    dev = torch.device("cuda")
    gen = torch.Generator(device=dev).manual_seed(D)
    elem = B * T * D
    l2 = _device_info()["l2_bytes"] or 50 * 2**20
    # fwd moves x in + y out; bwd x, dy in + dx out (2 bytes each in bf16)
    n_sets = rotation_sets(2 * 2 * elem, l2)

    def make() -> tuple[Any, Any, Any]:
        x = torch.randn(B, T, D, device=dev, dtype=torch.bfloat16, generator=gen)
        w = torch.randn(D, W, device=dev, dtype=torch.float32, generator=gen) / math.sqrt(W)
        dy = torch.randn(B, T, D, device=dev, dtype=torch.bfloat16, generator=gen)
        return x, w, dy

    sets = [make() for _ in range(n_sets)]

    def fla_fwd(x, w, dy):
        return causal_conv1d_fwd(
            x=x,
            weight=w,
            bias=None,
            residual=None,
            initial_state=None,
            output_final_state=False,
            activation="silu",
        )[0]

    def fla_bwd(x, w, dy):
        dx, dw, *_ = causal_conv1d_bwd(
            x=x,
            dy=dy,
            dht=None,
            weight=w,
            bias=None,
            residual=None,
            initial_state=None,
            activation="silu",
        )
        return dx, dw

    def our_fwd(x, w, dy):
        return cconv_fwd(x, w)

    def our_bwd(x, w, dy):
        return cconv_bwd(x, w, dy)

    console.log(f"conv D{D}: checking kernel-fun against fla ({n_sets} input set(s))")
    x, w, dy = sets[0]
    with torch.no_grad():
        diffs_fwd = {"y": rel_l2(our_fwd(x, w, dy), fla_fwd(x, w, dy))}
        (dx_o, dw_o), (dx_f, dw_f) = our_bwd(x, w, dy), fla_bwd(x, w, dy)
        diffs_bwd = {"dx": rel_l2(dx_o, dx_f), "dw": rel_l2(dw_o, dw_f)}
    del dx_o, dw_o, dx_f, dw_f

    rows = []
    for op, fla_fn, our_fn, diffs in (
        ("fwd", fla_fwd, our_fwd, diffs_fwd),
        ("bwd", fla_bwd, our_bwd, diffs_bwd),
    ):
        agrees = all(v <= AGREE_TOL[k] for k, v in diffs.items())
        fns = {"fla": _rotating(sets, fla_fn)}
        if agrees:
            fns["kernel_fun"] = _rotating(sets, our_fn)
        else:
            console.print(f"[red]conv {op} D{D}: kernel-fun disagrees with fla {diffs}[/red]")
        console.log(f"conv {op} D{D}: warm-up (autotuning), then {iters} timed calls each")
        for fn in fns.values():
            for _ in range(warmup):
                fn()
        times = time_interleaved(fns, iters)
        fla_ms = summarize(times["fla"])
        our_ms = summarize(times["kernel_fun"]) if agrees else None
        rows.append(
            {
                "op": op,
                "B": B,
                "T": T,
                "D": D,
                "W": W,
                "x_dtype": "bfloat16",
                "w_dtype": "float32",
                "activation": "silu",
                "fla_ms": fla_ms,
                "kernel_fun_ms": our_ms,
                "ratio": fla_ms["median"] / our_ms["median"] if our_ms else None,
                "rel_diff_vs_fla": diffs,
                "agrees": agrees,
                "rotation_sets": n_sets,
            }
        )
    return rows


def measure_layer(
    precision: Precision, steps: int, warmup: int, console: Console
) -> dict[str, Any]:
    """KDA layer fwd+bwd step time, fla vs patched, and the conv share of GPU kernel time."""
    import kernel_fun
    import torch
    from fla.layers import KimiDeltaAttention

    cfg = LAYER
    dev = torch.device("cuda")
    torch.manual_seed(0)
    layer = KimiDeltaAttention(
        hidden_size=cfg["hidden_size"],
        expand_v=cfg["expand_v"],
        head_dim=cfg["head_dim"],
        num_heads=cfg["num_heads"],
        mode="chunk",
        use_short_conv=True,
        conv_size=cfg["conv_size"],
        layer_idx=0,
    ).to(dev)
    amp = precision is Precision.amp
    if not amp:
        layer = layer.to(torch.bfloat16)
    layer.train()
    gen = torch.Generator(device=dev).manual_seed(3)
    shape = (cfg["B"], cfg["T"], cfg["hidden_size"])
    x = torch.randn(shape, device=dev, dtype=torch.bfloat16, generator=gen).requires_grad_(True)
    do = torch.randn(shape, device=dev, dtype=torch.bfloat16, generator=gen)

    def step() -> None:
        layer.zero_grad(set_to_none=True)
        x.grad = None
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
            o = layer(x)[0]
        o.backward(do.to(o.dtype))

    def patched_step() -> None:
        with kernel_fun.patched_fla():
            step()

    def cconv_step() -> None:
        with kernel_fun.patched_fla("cconv"):
            step()

    fns = {"fla": step, "cconv_only": cconv_step, "kernel_fun": patched_step}
    console.log(f"layer: {warmup} warm-up steps each (cold Triton caches compile and tune here)")
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    console.log(f"layer: {steps} timed steps each, then one profiled step each")
    times = time_interleaved(fns, steps)

    out: dict[str, Any] = {**cfg, "precision": precision.value}
    ours = our_conv_kernels()
    for key, fn, needles in (
        ("fla", step, FLA_CONV_KERNELS),
        ("cconv_only", cconv_step, ours),
        ("kernel_fun", patched_step, ours),
    ):
        kernels = cuda_kernels(fn)
        side: dict[str, Any] = {"step_ms": summarize(times[key]), **conv_share(kernels, needles)}
        if key == "kernel_fun":
            fla_launches = conv_share(kernels, FLA_CONV_KERNELS)["conv_launches"]
            side["fla_conv_launches"] = fla_launches
            side["engaged"] = side["conv_launches"] > 0 and fla_launches == 0
        out[key] = side
    med = {k: out[k]["step_ms"]["median"] for k in fns}
    out["ratio"] = med["fla"] / med["kernel_fun"]
    out["ratio_cconv_only"] = med["fla"] / med["cconv_only"]
    out["ratio_vs_cconv_only"] = med["cconv_only"] / med["kernel_fun"]
    return out


def measure_kda(iters: int, warmup: int, console: Console) -> dict[str, Any]:
    """chunk_kda forward + backward through autograd at KDA_OP, fla vs kernel-fun."""
    import torch
    from fla.ops.kda import chunk_kda as fla_chunk_kda
    from kernel_fun._testing import kda_chain_calls, kda_op_inputs
    from kernel_fun.kda import chunk_kda as our_chunk_kda
    from kernel_fun.kda import ops as kda_ops

    cfg = KDA_OP
    B, T, H, K, V = cfg["B"], cfg["T"], cfg["H"], cfg["K"], cfg["V"]
    x = kda_op_inputs(B, T, H, K, V, torch.device("cuda"), seed=5)
    leaves = [x[n].requires_grad_(True) for n in ("q", "k", "v", "g", "beta")]
    do = x["do"]
    flags = dict(
        use_qk_l2norm_in_kernel=True, use_gate_in_kernel=True, use_beta_sigmoid_in_kernel=True,
        state_v_first=True, A_log=x["A_log"], dt_bias=x["dt_bias"],
    )  # fmt: skip

    def run(fn: Callable[..., Any]) -> list[Any]:
        o, _ = fn(*leaves, **flags)
        return [o, *torch.autograd.grad(o, leaves, do)]

    console.log(f"kda: {warmup} warm-up calls each (cold Triton caches compile and tune here)")
    counting = kda_chain_calls() if kda_ops._kernels() is not None else contextlib.nullcontext()
    with counting as calls:
        for _ in range(warmup):
            ref, ours = run(fla_chunk_kda), run(our_chunk_kda)
    names = ("o", "dq", "dk", "dv", "dg", "dbeta")
    diffs = {n: rel_l2(a, b) for n, a, b in zip(names, ours, ref)}
    out: dict[str, Any] = {
        **cfg,
        "rel_diff_vs_fla": diffs,
        "agrees": all(diffs[n] <= AGREE_TOL_KDA[n] for n in names),
        "engaged": calls is not None and calls["fwd"] >= warmup and calls["bwd"] >= warmup,
    }
    if out["agrees"]:
        times = time_interleaved(
            {"fla": lambda: run(fla_chunk_kda), "kernel_fun": lambda: run(our_chunk_kda)}, iters
        )
        out["fla_ms"], out["kernel_fun_ms"] = (
            summarize(times["fla"]),
            summarize(times["kernel_fun"]),
        )
        out["ratio"] = out["fla_ms"]["median"] / out["kernel_fun_ms"]["median"]
    return out


# ------------------------------------------------------------------------------------------
# CLI
# ------------------------------------------------------------------------------------------

app = typer.Typer(add_completion=False, help=__doc__.split("\n\n")[0])


@app.command()
def main(
    out: Path = typer.Option(Path("out/prodtime.json"), help="where to write the JSON report"),
    iters: int = typer.Option(100, min=5, help="timed calls per conv op and implementation"),
    layer_steps: int = typer.Option(10, min=3, help="timed layer steps per implementation"),
    warmup: int = typer.Option(3, min=1, help="untimed calls first (autotuning happens here)"),
    layer_precision: Precision = typer.Option(
        Precision.amp, help="amp: fp32 params + bf16 autocast; bf16: bf16 params"
    ),
    skip_layer: bool = typer.Option(False, "--skip-layer", help="time only the conv ops"),
    kda_iters: int = typer.Option(20, min=3, help="timed chunk_kda fwd+bwd calls per side"),
    skip_kda: bool = typer.Option(False, "--skip-kda", help="leave out the chunk_kda op"),
) -> None:
    """Time fla vs kernel-fun at the production conv call and in a KDA layer step."""
    _check_out(out)
    _require_gpu()
    # fla keys its conv autotuning on (D, W) only and, by default, reuses picks another
    # process left on disk (made at any shape, maybe under load): tune here, at these shapes.
    # (Read once, when fla is first imported: a fresh process, as `make prodtime` runs it.)
    fla_cache = os.environ.get("FLA_CACHE_RESULTS")
    tuned_here = "fla" not in sys.modules
    os.environ["FLA_CACHE_RESULTS"] = "0"
    import kernel_fun

    console = Console()
    t0 = time.perf_counter()
    report: dict[str, Any] = {
        "tool": "tools/prodtime.py",
        "created": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "command": shlex.join([Path(sys.executable).name, *sys.argv]),
        "device": _device_info(),
        "versions": kernel_fun.versions(),
        "kernel_fun_path": str(Path(kernel_fun.__file__).parent),
        # PRODTIME_COMMIT names the commit of a copy of the tree whose .git is absent or stale
        "commit": os.environ.get("PRODTIME_COMMIT") or _git_head(Path(kernel_fun.__file__).parent),
        "settings": {
            "iters": iters,
            "layer_steps": layer_steps,
            "warmup": warmup,
            "layer_precision": layer_precision.value,
            "kda_iters": kda_iters,
            "fla_autotune_in_process": tuned_here,
            "FLA_CACHE_RESULTS_before": fla_cache,
        },
        "conv": [],
        "layer": None,
    }
    for D in CONV_DS:
        report["conv"].extend(measure_conv(D, iters, warmup, console))
    report["kda"] = None if skip_kda else measure_kda(kda_iters, warmup, console)
    if not skip_layer:
        report["layer"] = measure_layer(layer_precision, layer_steps, warmup, console)
    report["wall_s"] = round(time.perf_counter() - t0, 1)
    render(report, console)
    path = write_report(report, out)
    console.print(f"wrote {path} ({report['wall_s']} s)")
    problems = failures(report)
    for line in problems:
        console.print(f"[red]prodtime: {line}[/red]")
    if problems:
        raise typer.Exit(EXIT_DISAGREE)


if __name__ == "__main__":
    app()
