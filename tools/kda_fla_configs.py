"""Which of fla's autotuned kda-chain kernels run faster with wider launches (more warps).

    python tools/kda_fla_configs.py --out out/kda-fla-configs.json     (on the H200)

fla's Hopper autotune lists for several kda-chain kernels stop at 4 warps; launching the
fused WY/dq/dk/dg backward kernel with 8 warps saved 3.3 ms per call at prod (ladder idea
kda/002-bwd-wide-ctas, NOTES.md). This tool asks the same question of every autotuned
kernel it is given: it adds an 8- and a 16-warp copy of each of fla's configs to the
kernel's autotune list (same block sizes and stages), runs fla's chunk_kda forward and
backward once at the given shape with KimiDeltaAttention's flags (fla autotunes every key
in this process: FLA_CACHE_MODE is forced to "disabled"), and reports per kernel and key
the best of fla's own configs and the best of the widened list, with Triton's autotune
timings (median ms of its benchmark). A gain here is a per-launch upper bound for an idea
that fixes that launch; it is a research lead, not a record.

On a cold machine fla's chain compiles every config of every key it meets: the widened
lists add about one third more. Exit status: 0 done; 2 usage error or no CUDA GPU.
"""

from __future__ import annotations

import importlib
import json
import math
import os
import sys
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import typer  # noqa: E402
from outpath import out_problem, write_report  # noqa: E402

FLA_MODULES = (
    "fla.ops.kda.chunk_bwd",
    "fla.ops.kda.chunk_fwd",
    "fla.ops.kda.wy_fast",
    "fla.ops.kda.gate",
    "fla.ops.kda.chunk_intra",
    "fla.ops.kda.chunk_intra_token_parallel",
    "fla.ops.common.chunk_delta_h",
    "fla.ops.common.chunk_o",
    "fla.ops.utils.cumsum",
    "fla.ops.utils.solve_tril",
)
# The chain's kernels that take the most time at prod (ideas/000-fla/NOTES.md's profile).
DEFAULT_KERNELS = (
    "chunk_kda_bwd_kernel_intra",
    "chunk_kda_bwd_kernel_wy_dqkg_fused",
    "chunk_gated_delta_rule_bwd_kernel_dhu_blockdim64",
    "chunk_gated_delta_rule_fwd_kernel_h_blockdim64",
    "chunk_kda_bwd_kernel_dAv",
    "chunk_kda_fwd_kernel_inter_solve_fused",
    "chunk_kda_fwd_kernel_intra_sub_chunk",
    "chunk_fwd_kernel_o",
    "recompute_w_u_fwd_kda_kernel",
)
WIDER_WARPS = (8, 16)


def autotuners(module_names: Iterable[str] = FLA_MODULES) -> dict[str, Any]:
    """{kernel name: its triton Autotuner} for the autotuned kernels the modules define."""
    from kernel_fun._testing import autotuners as found

    modules = [importlib.import_module(n) for n in module_names]
    return {name.rsplit(".", 1)[1]: t for name, t in found(modules).items()}


def config_key(c: Any) -> tuple:
    """What makes two triton.Configs the same launch."""
    return (tuple(sorted(c.kwargs.items())), c.num_warps, c.num_stages)


def wider(configs: Iterable[Any], warps: Iterable[int] = WIDER_WARPS) -> list[Any]:
    """Copies of `configs` at each of `warps` above their own count, new launches only."""
    import triton

    configs = list(configs)
    seen = {config_key(c) for c in configs}
    out = []
    for c in configs:
        for w in warps:
            if w <= c.num_warps:
                continue
            n = triton.Config(
                dict(c.kwargs),
                num_warps=w,
                num_stages=c.num_stages,
                num_ctas=getattr(c, "num_ctas", 1),
                maxnreg=getattr(c, "maxnreg", None),
                pre_hook=c.pre_hook,
            )
            if config_key(n) not in seen:
                seen.add(config_key(n))
                out.append(n)
    return out


def widen(tuner: Any) -> tuple[set, list[dict]]:
    """Add wider configs to `tuner` and record every benchmark it runs from now on.

    Returns (the keys of fla's own configs, the list each benchmark's timings are appended
    to: {config: timing})."""
    base = list(tuner.configs)
    tuner.configs = base + wider(base)
    tuner.cache.clear()
    log: list[dict] = []
    run = tuner.run

    def logged_run(*args: Any, **kwargs: Any) -> Any:
        before = getattr(tuner, "configs_timings", None)
        result = run(*args, **kwargs)
        after = getattr(tuner, "configs_timings", None)
        if after is not None and after is not before:
            log.append(dict(after))
        return result

    tuner.run = logged_run
    return {config_key(c) for c in base}, log


def _ms(timing: Any) -> float:
    """Triton's benchmark gives [median, p20, p80] or one number."""
    return float(timing[0] if isinstance(timing, (list, tuple)) else timing)


def best_rows(fla_keys: set, benchmarks: Iterable[dict]) -> Iterator[dict[str, Any]]:
    """Per benchmark (one autotuned key): fla's best config and the best widened one."""
    for timings in benchmarks:
        ms = {c: _ms(t) for c, t in timings.items() if math.isfinite(_ms(t))}
        own = {c: t for c, t in ms.items() if config_key(c) in fla_keys}
        if not own:
            continue
        fla_best = min(own, key=own.get)
        best = min(ms, key=ms.get)
        yield {
            "fla_config": str(fla_best),
            "fla_ms": own[fla_best],
            "best_config": str(best),
            "best_ms": ms[best],
            "gain_ms": own[fla_best] - ms[best],
            "configs": len(timings),
        }


def _run_chain(B: int, T: int, H: int, K: int, V: int) -> float:
    import torch
    from fla.ops.kda import chunk_kda
    from kernel_fun._testing import kda_op_inputs

    x = kda_op_inputs(B, T, H, K, V, torch.device("cuda"), seed=0)
    leaves = [x[n].requires_grad_(True) for n in ("q", "k", "v", "g", "beta")]
    A_log, dt_bias, do = x["A_log"], x["dt_bias"], x["do"]
    t0 = time.perf_counter()
    o, _ = chunk_kda(
        *leaves, A_log=A_log, dt_bias=dt_bias, use_qk_l2norm_in_kernel=True,
        use_gate_in_kernel=True, use_beta_sigmoid_in_kernel=True, state_v_first=True,
    )  # fmt: skip
    torch.autograd.grad(o, leaves, do)
    torch.cuda.synchronize()
    return time.perf_counter() - t0


def _usage(message: str) -> None:
    typer.echo(f"kda_fla_configs: error: {message}", err=True)
    raise typer.Exit(2)


def _check_args(out: Path, kernels: str, K: int) -> None:
    """Refuse what would fail only after minutes of compiling: an --out that cannot be
    written, no kernel named, a K fla's chain does not take."""
    problem = out_problem(out, "kda-fla-configs.json")
    if problem:
        _usage(problem)
    if not [n for n in kernels.split(",") if n.strip()]:
        _usage("--kernels names no kernel; give comma-separated fla kernel names")
    if K > 256:
        _usage(f"--K {K}: fla's kda chain takes K <= 256")


app = typer.Typer(add_completion=False, help=__doc__.split("\n\n")[0])


@app.command()
def main(
    out: Path = typer.Option(Path("out/kda-fla-configs.json"), help="the JSON report"),
    kernels: str = typer.Option(",".join(DEFAULT_KERNELS), help="comma-separated fla kernels"),
    B: int = typer.Option(16, min=1),
    T: int = typer.Option(8192, min=1),
    H: int = typer.Option(16, min=1),
    K: int = typer.Option(128, min=1),
    V: int = typer.Option(256, min=1),
) -> None:
    """Widen the named kernels' autotune lists, run chunk_kda once, report the gains."""
    os.environ["FLA_CACHE_MODE"] = "disabled"  # read when fla is first imported
    _check_args(out, kernels, K)
    import torch

    if not torch.cuda.is_available():
        typer.echo("kda_fla_configs: error: no CUDA GPU (run it on the H200)", err=True)
        raise typer.Exit(2)
    tuners = autotuners()
    names = [n.strip() for n in kernels.split(",") if n.strip()]
    unknown = sorted(set(names) - set(tuners))
    if unknown:
        typer.echo(
            f"kda_fla_configs: error: not autotuned fla kernels: {unknown}; known: "
            f"{sorted(tuners)}",
            err=True,
        )
        raise typer.Exit(2)
    logs = {n: widen(tuners[n]) for n in names}
    secs = _run_chain(B, T, H, K, V)
    report: dict[str, Any] = {
        "tool": "tools/kda_fla_configs.py",
        "shape": {"B": B, "T": T, "H": H, "K": K, "V": V},
        "device": torch.cuda.get_device_name(),
        "first_call_s": round(secs, 1),
        "kernels": {},
    }
    for n in names:
        rows = list(best_rows(*logs[n]))
        report["kernels"][n] = rows
        for r in rows:
            typer.echo(
                f"{n}: fla {r['fla_ms']:.3f} ms {r['fla_config']} -> {r['best_ms']:.3f} ms "
                f"{r['best_config']} (gain {r['gain_ms']:.3f} ms, {r['configs']} configs)"
            )
    write_report(out, json.dumps(report, indent=1) + "\n")
    typer.echo(f"wrote {out} (first call {secs:.0f} s, autotuning included)")


if __name__ == "__main__":
    app()
