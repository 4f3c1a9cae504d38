"""A 2-layer KimiDeltaAttention stack trained under torch FSDP2, fla vs `kernel_fun.patch_fla()`.

    python -m torch.distributed.run --standalone --nproc_per_node 2 tools/fsdp2_kda.py \\
        --out out/fsdp2.json                                   (what `make fsdp2` runs)

Every process builds the same stack from the same seed (token embedding, 2 pre-norm residual
blocks of fla's KimiDeltaAttention, final norm, linear head: package/tests/
test_kda_layer_gpu.py's stack (`kernel_fun._testing.block_stack`) at that test's sizes: hidden 2048, 16 heads of 128,
expand_v 2, conv width 4, vocab 4096), shards each block and then the whole stack with
`torch.distributed.fsdp.fully_shard` over all ranks (one GPU per process, NCCL), and trains
it for --steps AdamW steps (lr 1e-3) on a fresh batch of learnable tokens per step (the
`kernel_fun._testing.learnable_tokens`): every rank generates the same global batch of
--batch x world-size sequences of --seq + 1 tokens and trains on its own --batch of them.
The loss is the next-token cross-entropy (fp32) of the rank's shard; FSDP2 averages the
gradients over the ranks, so a step follows the mean of the ranks' losses, which is what is
gathered per step as the global loss. This runs twice in one process group from the same
initial weights and the same batches: first fla unpatched, then under
`kernel_fun.patched_fla()` (both families: the short convolutions and chunk_kda).

Precision: fp32 parameters under bf16 autocast, with FSDP2's default MixedPrecisionPolicy
(no parameter cast; gradients reduced in fp32). A policy with param_dtype=bf16 would hand
every block bf16 parameters: A_log and dt_bias would then be bf16, outside kernel-fun's kda
box (fp32 only), so chunk_kda would go to fla, and the convolutions would see a bf16 weight
instead of the production call's fp32 one. Autocast keeps both families in their box and is
exactly the precision of the single-GPU training test, whose tolerance applies here.

Checked, on every rank:
  * the loss curves: |patched - unpatched| / |unpatched| <= LOSS_REL_TOL (the single-GPU
    layer test's) at every step, every loss finite, and the unpatched stack learned (the
    mean of its last 5 losses below that of its first 5);
  * both families engaged: kernel-fun's kda chain forward and backward ran once per layer
    and step while patched and never unpatched (counted at the chain's entry points, as the
    layer test does, with `kernel_fun._testing.kda_chain_calls`), and in one profiled step (the middle one) of each
    run kernel-fun's conv kernels (forward and backward, `kernel_fun._testing.conv_launches`) ran at least 3 times per layer
    and fla's ("causal_conv1d_fwd_kernel", "causal_conv1d_bwd_kernel") not at all while
    patched, and the reverse unpatched (the layer test's `_witness`).

On a cold machine most of the time goes to fla's autotuning of its kda chain at a new
shape; KERNEL_FUN_TEST_FLA_CONFIGS=N (as in the GPU tests) cuts each of fla's autotune lists
to N configs in every process first (the report's settings say so). Both runs then use the
same trimmed lists: which configuration fla picks moves rounding only.

Rank 0 prints one summary line (and one line per problem) and writes the JSON report
(--out): both runs' per-step global losses, each rank's own loss per step, the relative
difference per step, the worst one and its step, world size, each rank's device, versions
(`kernel_fun.versions()`), settings and each rank's witness counts.

`--backend gloo --stand-in` is the CPU plumbing check the CPU tests run, nothing more: each
KDA layer is replaced by a small torch-only stand-in block (no Triton, no fla), the stack is
small (hidden 64, vocab 256, 2 sequences of 64 tokens per rank), patching is a no-op (the
two runs are the same computation), and it runs on the CPU over gloo. It still shards with
fully_shard, trains, gathers the losses, writes the report and sets the exit status as the
real run does; it skips CUDA and NCCL, kernel-fun's kernels and fla's layer, and both
witnesses (the report's witness says `checked: false`).

Self-test (hidden option): `--perturb-patched F` multiplies the patched run's learning rate
by F, so that a check that works exits 1 (e.g. F = 30); the factor is in the report.

Exit status of each process: 0 every check passed; 1 a check failed (the problems are
printed and in the report); 2 usage error, e.g. not launched by torchrun, one process, no
CUDA GPU or fewer GPUs than processes on the node (the message says what to do). torchrun
itself exits 0 when every process did and 1 otherwise; its failure summary names each
process's own status. All processes compute the same verdict and exit with the same status.
"""

from __future__ import annotations

import contextlib
import copy
import datetime as dt
import enum
import json
import math
import os
import platform
import shlex
import socket
import sys
import time
import warnings
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import typer  # noqa: E402
from outpath import out_problem  # noqa: E402
from outpath import write_report as _write  # noqa: E402

EXIT_FAIL = 1
EXIT_USAGE = 2

LOSS_REL_TOL = 1e-2  # package/tests/test_kda_layer_gpu.py's, relative, on every step's loss
LAUNCH = "python -m torch.distributed.run --standalone --nproc_per_node 2 tools/fsdp2_kda.py"

# The layer test's model and batch (per rank); the stand-in's are small enough for a CPU.
KDA_SIZES = {"hidden": 2048, "heads": 16, "head_dim": 128, "expand_v": 2, "conv_size": 4,
             "vocab": 4096, "batch": 2, "seq": 2048}  # fmt: skip
STAND_IN_SIZES = {"hidden": 64, "conv_size": 4, "vocab": 256, "batch": 2, "seq": 64}
N_LAYERS = 2
TRAINED_WINDOW = 5  # the stack learned: mean of the last 5 losses below the first 5's

OUR_CONV = ("cconv_fwd", "cconv_bwd")
FLA_CONV = ("causal_conv1d_fwd_kernel", "causal_conv1d_bwd_kernel")
CONVS_PER_LAYER = 3  # q, k and v each have a short convolution


class Backend(str, enum.Enum):
    nccl = "nccl"
    gloo = "gloo"


# ------------------------------------------------------------------------------------------
# pure helpers (no torch): usage, comparison, witness, verdict
# ------------------------------------------------------------------------------------------


def usage_problem(
    env: Mapping[str, str], backend: Backend, stand_in: bool, cuda_devices: int | None
) -> str | None:
    """Why this process cannot run as asked (None when it can).

    env: the process environment (torchrun sets RANK, WORLD_SIZE, LOCAL_RANK and
    LOCAL_WORLD_SIZE); cuda_devices: CUDA devices visible to the process (None when not
    probed, i.e. for --stand-in)."""
    if not all(k in env for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK")):
        return f"not launched by torchrun (RANK, WORLD_SIZE, LOCAL_RANK unset); run: {LAUNCH}"
    bad = [k for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE")
           if k in env and not str(env[k]).isdigit()]  # fmt: skip
    if bad:
        return f"{', '.join(f'{k}={env[k]!r}' for k in bad)}: not a process count or index; run: {LAUNCH}"
    world = int(env["WORLD_SIZE"])
    if world < 2:
        return (
            f"{world} process: FSDP2 sharding needs at least 2 (--nproc_per_node 2); run: {LAUNCH}"
        )
    if stand_in:
        if backend is not Backend.gloo:
            return "--stand-in is the CPU plumbing check: use it with --backend gloo"
        return None
    if backend is not Backend.nccl:
        return (
            "fla's KimiDeltaAttention runs only on CUDA GPUs: use --backend nccl "
            "(--backend gloo is for --stand-in, the CPU plumbing check)"
        )
    local = int(env.get("LOCAL_WORLD_SIZE", world))
    if not cuda_devices:
        return (
            "no CUDA GPU visible: run this on a machine with 2 GPUs (`make fsdp2`, or "
            "STAGES=fsdp2 bash tools/device.sh), or add --backend gloo --stand-in to check "
            "only the plumbing on the CPU"
        )
    if cuda_devices < local:
        return (
            f"{local} processes on this node but {cuda_devices} CUDA GPU(s) visible: one GPU "
            f"per process; use --nproc_per_node {cuda_devices} if that is at least 2, or a "
            "machine with more GPUs"
        )
    return None


def rel_diffs(reference: Sequence[float], other: Sequence[float]) -> list[float]:
    """|other - reference| / |reference| per step (inf where the reference is 0 and they
    differ, nan where either is not finite). ValueError when the lengths differ."""
    if len(reference) != len(other):
        raise ValueError(f"{len(reference)} reference losses but {len(other)} others")
    out = []
    for a, b in zip(reference, other):
        if not (math.isfinite(a) and math.isfinite(b)):
            out.append(math.nan)
        elif a == b:
            out.append(0.0)
        else:
            out.append(abs(a - b) / abs(a) if a != 0 else math.inf)
    return out


def worst_step(diffs: Sequence[float]) -> int:
    """Index of the largest difference (a nan counts as the largest). ValueError if empty."""
    if not diffs:
        raise ValueError("no steps")
    return max(range(len(diffs)), key=lambda i: math.inf if math.isnan(diffs[i]) else diffs[i])


def loss_problems(
    unpatched: Sequence[float], patched: Sequence[float], tol: float = LOSS_REL_TOL
) -> list[str]:
    """One line per problem with the two loss curves (global loss per step)."""
    out = []
    for name, losses in (("unpatched", unpatched), ("patched", patched)):
        bad = [i for i, v in enumerate(losses) if not math.isfinite(v)]
        if bad:
            out.append(f"{name} run: loss not finite at steps {bad}")
    k = max(1, min(TRAINED_WINDOW, len(unpatched) // 2))
    if not sum(unpatched[-k:]) / k < sum(unpatched[:k]) / k:
        out.append(
            f"the unpatched stack did not learn (mean loss of the last {k} steps not below the "
            f"first {k}'s): {list(unpatched)}"
        )
    diffs = rel_diffs(unpatched, patched)
    i = worst_step(diffs)
    if not diffs[i] <= tol:
        out.append(
            f"step {i}: patched loss {patched[i]:.6f} vs unpatched {unpatched[i]:.6f}, "
            f"|dloss|/loss {diffs[i]:.2e} > {tol:.0e}"
        )
    return out


def witness_problems(
    rank: int, run: str, counts: Mapping[str, int], n_layers: int, steps: int
) -> list[str]:
    """One line per witness that fails for one rank's run ("patched" or "unpatched").

    counts: chain_fwd / chain_bwd (kda chain entry-point calls over the whole run) and, from
    one profiled step, the launches of each name in OUR_CONV and FLA_CONV."""
    patched = run == "patched"
    want_chain = n_layers * steps if patched else 0
    out = [
        f"rank {rank} {run}: kda chain {d} ran {counts[f'chain_{d}']} times, expected "
        f"{want_chain} ({n_layers} layers x {steps} steps)"
        for d in ("fwd", "bwd")
        if counts[f"chain_{d}"] != want_chain
    ]
    ran, absent = (OUR_CONV, FLA_CONV) if patched else (FLA_CONV, OUR_CONV)
    least = CONVS_PER_LAYER * n_layers
    out += [
        f"rank {rank} {run}: {k} launched {counts[k]} times in the profiled step, expected "
        f">= {least}"
        for k in ran
        if counts[k] < least
    ]
    out += [
        f"rank {rank} {run}: {k} launched {counts[k]} times in the profiled step, expected 0"
        for k in absent
        if counts[k] != 0
    ]
    if patched and out:
        out.append(
            f"rank {rank}: kernel-fun did not engage; its kernels run only on the GPU "
            "architectures they were tested on (kernel_fun.versions()['device'] names this "
            "one; KERNEL_FUN_ALLOW_ARCH=1 runs them anyway)"
        )
    return out


def summary_line(report: Mapping[str, Any]) -> str:
    """The one line rank 0 prints for a report."""
    s = report["settings"]
    un, pa = report["losses"]["unpatched"], report["losses"]["patched"]
    worst = report["worst"]
    what = "KDA" if report["mode"] == "kda" else "stand-in"
    devices = sorted({d["device"] for d in report["devices"]})
    line = (
        f"FSDP2 {what} x{s['layers']}, {report['world_size']} ranks ({', '.join(devices)}; "
        f"{report['backend']}), {s['steps']} AdamW steps (global B{s['global_batch']} "
        f"T{s['seq']}, fp32 params + bf16 autocast): loss {un[0]:.4f} -> unpatched "
        f"{un[-1]:.4f} / patched {pa[-1]:.4f}; max |dloss|/loss {worst['rel_diff']:.1e} "
        f"(step {worst['step']}, tol {report['tolerance']:.0e})"
    )
    wit = report["witness"]
    if wit["checked"]:
        per_rank = "; ".join(
            f"rank {w['rank']} chain fwd/bwd {w['patched']['chain_fwd']}/"
            f"{w['patched']['chain_bwd']}, cconv fwd/bwd {w['patched']['cconv_fwd']}/"
            f"{w['patched']['cconv_bwd']}, fla conv "
            f"{w['patched'][FLA_CONV[0]] + w['patched'][FLA_CONV[1]]}"
            for w in wit["per_rank"]
        )
        line += f"; patched: {per_rank}"
    else:
        line += "; witnesses not checked (stand-in)"
    if s["perturb_patched"] != 1.0:
        line += f"; SELF-TEST: patched lr x{s['perturb_patched']:g}"
    return line + (": PASS" if report["passed"] else ": FAIL")


def write_report(report: Mapping[str, Any], path: Path) -> Path:
    """Write the report as indented JSON through ``outpath.write_report`` (parent folders
    created, an earlier file at ``path`` kept beside it). Returns the path."""
    _write(path, json.dumps(report, indent=2) + "\n")
    return path


# ------------------------------------------------------------------------------------------
# the model, the data and the witnesses (torch)
# ------------------------------------------------------------------------------------------


def _stand_in_block(hidden: int, conv_size: int) -> Any:
    import torch.nn as nn
    import torch.nn.functional as F

    class StandInBlock(nn.Module):
        """Torch-only stand-in for KimiDeltaAttention in the CPU plumbing check: a causal
        depthwise convolution (width conv_size) gated by a sigmoid, between two linear maps.
        x [B, T, hidden] float -> (o [B, T, hidden], None, None), the layer's return shape."""

        def __init__(self) -> None:
            super().__init__()
            self.in_proj = nn.Linear(hidden, 2 * hidden, bias=False)
            self.conv = nn.Conv1d(
                hidden, hidden, conv_size, groups=hidden, padding=conv_size - 1, bias=False
            )
            self.out_proj = nn.Linear(hidden, hidden, bias=False)

        def forward(self, x: Any) -> tuple[Any, None, None]:
            u, gate = self.in_proj(x).chunk(2, dim=-1)
            c = self.conv(u.transpose(1, 2))[..., : x.shape[1]].transpose(1, 2)
            return self.out_proj(F.silu(c) * gate.sigmoid()), None, None

    return StandInBlock()


def _kda_block(layer_idx: int) -> Any:
    from fla.layers import KimiDeltaAttention

    z = KDA_SIZES
    return KimiDeltaAttention(
        hidden_size=z["hidden"],
        expand_v=z["expand_v"],
        head_dim=z["head_dim"],
        num_heads=z["heads"],
        mode="chunk",
        use_short_conv=True,
        conv_size=z["conv_size"],
        layer_idx=layer_idx,
    )


def build_stack(stand_in: bool, n_layers: int, seed: int) -> Any:
    """The stack on the CPU, fp32, initialized from `seed` (the same weights on every rank):
    tokens [B, T] int64 -> logits [B, T, vocab]."""
    import torch
    from kernel_fun._testing import block_stack

    z = STAND_IN_SIZES if stand_in else KDA_SIZES
    hidden, vocab = z["hidden"], z["vocab"]

    def make_block(i: int) -> Any:
        return _stand_in_block(hidden, z["conv_size"]) if stand_in else _kda_block(i)

    torch.manual_seed(seed)
    return block_stack(vocab, hidden, n_layers, make_block)


@contextlib.contextmanager
def kda_chain_calls(active: bool) -> Iterator[dict[str, int]]:
    """Calls of kernel-fun's vendored kda chain forward and backward while the block runs
    (kernel_fun._testing.kda_chain_calls): {"chain_fwd", "chain_bwd"}, filled when the block
    ends; with active False, nothing is counted (zeros)."""
    counts = {"chain_fwd": 0, "chain_bwd": 0}
    if not active:
        yield counts
        return
    from kernel_fun._testing import kda_chain_calls as chain_calls

    with chain_calls() as live:
        try:
            yield counts
        finally:
            counts["chain_fwd"], counts["chain_bwd"] = live["fwd"], live["bwd"]


def train_sharded(
    init: Any,
    tokens: Any,
    lr: float,
    device: Any,
    mesh: Any,
    profile_step: int | None,
) -> tuple[Any, list[str]]:
    """Shard a copy of `init` with fully_shard (each block, then the stack) and train it,
    one AdamW step per row of `tokens` ([steps, batch, seq + 1], this rank's shard).
    Returns this rank's loss per step (fp32 tensor [steps] on `device`) and the CUDA kernel
    names of step `profile_step` (none when it is None)."""
    import torch
    import torch.nn.functional as F
    from kernel_fun._testing import cuda_kernel_names
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    model = copy.deepcopy(init).to(device)
    policy = MixedPrecisionPolicy()  # fp32 parameters, fp32 gradient reduction (see above)
    for block in model.blocks:
        fully_shard(block, mesh=mesh, mp_policy=policy)
    fully_shard(model, mesh=mesh, mp_policy=policy)
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    losses = torch.empty(tokens.shape[0], dtype=torch.float32, device=device)
    kernels: list[str] = []

    def one_step(step: int) -> None:
        inputs, targets = tokens[step, :, :-1], tokens[step, :, 1:]
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device.type, dtype=torch.bfloat16):
            logits = model(inputs)
        loss = F.cross_entropy(logits.float().flatten(0, 1), targets.flatten())
        loss.backward()
        opt.step()
        losses[step] = loss.detach()

    for step in range(tokens.shape[0]):
        if step == profile_step:
            kernels = cuda_kernel_names(lambda s=step: one_step(s))
        else:
            one_step(step)
    return losses, kernels


# ------------------------------------------------------------------------------------------
# CLI
# ------------------------------------------------------------------------------------------

app = typer.Typer(add_completion=False, help=__doc__.split("\n\n")[0])


def _fail_usage(message: str, rank: int) -> None:
    if rank == 0:
        typer.echo(f"fsdp2_kda: error: {message}", err=True)
    raise typer.Exit(EXIT_USAGE)


@app.command()
def main(
    out: Path = typer.Option(Path("out/fsdp2.json"), help="where rank 0 writes the JSON report"),
    steps: int = typer.Option(20, min=2, help="AdamW steps per run, a fresh batch each"),
    batch: int | None = typer.Option(None, min=1, help="sequences per rank per step (default 2)"),
    seq: int | None = typer.Option(
        None, min=2, help="tokens per sequence (default 2048; 64 with --stand-in)"
    ),
    lr: float = typer.Option(1e-3, min=0.0, help="AdamW learning rate"),
    seed: int = typer.Option(0, help="seed of the initial weights (the tokens use seed + 2)"),
    backend: Backend = typer.Option(
        Backend.nccl, help="process group backend: nccl (GPUs), gloo (with --stand-in, CPU)"
    ),
    stand_in: bool = typer.Option(
        False,
        "--stand-in",
        help="CPU plumbing check only, for the CPU tests (with --backend gloo): a small "
        "torch-only block replaces the KDA layer and patching is a no-op. It runs the FSDP2 "
        "sharding and training loop, the loss gathering, the report and the exit status; it "
        "skips CUDA and NCCL, fla's layer, kernel-fun's kernels and both witnesses",
    ),
    perturb_patched: float = typer.Option(
        1.0, hidden=True, help="self-test: multiply the patched run's learning rate by this"
    ),
) -> None:
    """Train a 2-layer KDA stack under FSDP2 twice, fla then kernel_fun.patch_fla(), from the
    same weights and batches, and compare every step's global loss (exit 0 within
    LOSS_REL_TOL, 1 not, 2 usage). Launch with torch.distributed.run (torchrun)."""
    rank = int(os.environ.get("RANK", "0"))
    import torch

    cuda_devices = None if stand_in else torch.cuda.device_count()
    problem = usage_problem(os.environ, backend, stand_in, cuda_devices)
    if problem:
        _fail_usage(problem, rank)
    if rank == 0:  # refuse an --out rank 0 cannot write before minutes of training
        problem = out_problem(out, "fsdp2.json")
        if problem:
            _fail_usage(problem, 0)

    import kernel_fun
    import torch.distributed as dist
    from kernel_fun._testing import (
        FLA_CONFIGS_ENV,
        conv_launches,
        learnable_tokens,
        trim_fla_autotune,
    )

    fla_configs = os.environ.get(FLA_CONFIGS_ENV, "").strip() or None
    if fla_configs is not None and not stand_in:
        # a correctness run: which of its configs fla picks moves rounding only
        if not fla_configs.isdigit() or int(fla_configs) < 1:
            _fail_usage(f"{FLA_CONFIGS_ENV}={fla_configs!r}: give a positive number", rank)
        trim_fla_autotune(int(fla_configs))
    from torch.distributed.device_mesh import init_device_mesh

    # The stack adds each block's output out of place, so FSDP2's note about blocks that
    # return views (in-place updates of such a view would skip a hook) does not apply.
    warnings.filterwarnings("ignore", message=r"FSDP2-wrapped module .* returned a view")
    t0 = time.perf_counter()
    world, local_rank = int(os.environ["WORLD_SIZE"]), int(os.environ["LOCAL_RANK"])
    if stand_in:
        device = torch.device("cpu")
        dist.init_process_group("gloo")
        device_name = f"cpu ({platform.machine()})"
        sizes = STAND_IN_SIZES
    else:
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
        dist.init_process_group("nccl", device_id=device)
        major, minor = torch.cuda.get_device_capability(device)
        device_name = f"{torch.cuda.get_device_name(device)} sm{major}{minor}"
        sizes = KDA_SIZES
    batch = batch or sizes["batch"]
    seq = seq or sizes["seq"]
    mesh = init_device_mesh(device.type, (world,))

    init = build_stack(stand_in, N_LAYERS, seed)
    tokens = learnable_tokens(sizes["vocab"], (steps, batch * world, seq + 1), device, seed + 2)
    mine = tokens[:, rank * batch : (rank + 1) * batch]  # this rank's shard of every batch
    profile_step = None if stand_in else steps // 2

    runs: dict[str, dict[str, Any]] = {}
    for run in ("unpatched", "patched"):
        patching = (
            kernel_fun.patched_fla()
            if run == "patched" and not stand_in
            else contextlib.nullcontext()
        )
        run_lr = lr * (perturb_patched if run == "patched" else 1.0)
        with patching, kda_chain_calls(not stand_in) as chain:
            local, kernels = train_sharded(init, mine, run_lr, device, mesh, profile_step)
        gathered = [torch.empty_like(local) for _ in range(world)]
        dist.all_gather(gathered, local)
        per_rank = torch.stack(gathered, dim=1).double().cpu()  # [steps, world]
        counts = {**chain, **conv_launches(kernels)}
        runs[run] = {
            "global": per_rank.mean(dim=1).tolist(),
            "per_rank": per_rank.tolist(),
            "witness": None if stand_in else counts,
        }

    mine_info = {
        "rank": rank,
        "local_rank": local_rank,
        "host": socket.gethostname(),
        "device": device_name,
        "witness": {r: runs[r]["witness"] for r in runs},
    }
    infos: list[Any] = [None] * world
    dist.all_gather_object(infos, mine_info)

    unpatched, patched = runs["unpatched"]["global"], runs["patched"]["global"]
    diffs = rel_diffs(unpatched, patched)
    worst = worst_step(diffs)
    problems = loss_problems(unpatched, patched, LOSS_REL_TOL)
    if not stand_in:
        for info in infos:
            for run in ("unpatched", "patched"):
                problems += witness_problems(
                    info["rank"], run, info["witness"][run], N_LAYERS, steps
                )
    report: dict[str, Any] = {
        "tool": "tools/fsdp2_kda.py",
        "created": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "command": shlex.join([Path(sys.executable).name, *sys.argv]),
        "mode": "stand-in" if stand_in else "kda",
        "backend": backend.value,
        "world_size": world,
        "devices": [{k: i[k] for k in ("rank", "local_rank", "host", "device")} for i in infos],
        "versions": kernel_fun.versions(),
        "settings": {
            "layers": N_LAYERS,
            **{k: v for k, v in sizes.items() if k not in ("batch", "seq")},
            "steps": steps,
            "batch_per_rank": batch,
            "global_batch": batch * world,
            "seq": seq,
            "lr": lr,
            "seed": seed,
            "precision": "fp32 params, bf16 autocast, FSDP2 default MixedPrecisionPolicy",
            "perturb_patched": perturb_patched,
            "fla_autotune_configs": None if stand_in or fla_configs is None else int(fla_configs),
        },
        "tolerance": LOSS_REL_TOL,
        "losses": {"unpatched": unpatched, "patched": patched},
        "rank_losses": {r: runs[r]["per_rank"] for r in runs},
        "rel_diff": diffs,
        "worst": {"step": worst, "rel_diff": diffs[worst]},
        "witness": {
            "checked": not stand_in,
            "profiled_step": profile_step,
            "per_rank": [{"rank": i["rank"], **i["witness"]} for i in infos],
        },
        "problems": problems,
        "passed": not problems,
        "wall_s": round(time.perf_counter() - t0, 1),
    }
    if rank == 0:
        from rich.console import Console
        from rich.markup import escape

        console = Console(highlight=False, soft_wrap=True)  # each line whole, never wrapped
        for line in problems:
            console.print(f"[red]fsdp2_kda: {escape(line)}[/red]")
        path = write_report(report, out)
        console.print(summary_line(report))
        console.print(f"wrote {path} ({report['wall_s']} s)")
    dist.barrier()  # no process exits before rank 0 wrote the report
    dist.destroy_process_group()
    if problems:
        raise typer.Exit(EXIT_FAIL)


if __name__ == "__main__":
    app()
