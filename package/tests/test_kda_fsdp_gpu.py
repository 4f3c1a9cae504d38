"""A 2-layer KimiDeltaAttention stack trained under torch FSDP2 on 2 GPUs, fla vs patched.

Runs tools/fsdp2_kda.py with torchrun (2 processes, one GPU each, NCCL): 20 AdamW steps
(fp32 parameters, bf16 autocast, a fresh batch per step, each rank its own shard of it) of
the stack of test_kda_layer_gpu.py's training test, unpatched and then under
`kernel_fun.patched_fla()`, from the same weights. Passes when every step's global loss of
the patched run is within LOSS_REL_TOL (relative) of the unpatched one and both families
engaged on every rank (kda chain calls counted, kernel-fun's conv kernels launched and
fla's not). Skipped with fewer than 2 visible GPUs. On cold Triton caches most of the time
goes to compiling and autotuning fla's and kernel-fun's kernels in each process."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tools" / "fsdp2_kda.py"

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.slow,
    pytest.mark.skipif(
        torch.cuda.device_count() < 2,
        reason=f"{torch.cuda.device_count()} CUDA GPU(s) visible; the FSDP2 run needs 2",
    ),
]

STEPS, LAYERS = 20, 2


def test_fsdp2_training_on_2_gpus_follows_fla_loss_curve(tmp_path: Path, capsys) -> None:
    out = tmp_path / "fsdp2.json"
    env = dict(os.environ)
    src = f"{ROOT / 'package' / 'src'}{os.pathsep}{ROOT}"
    env["PYTHONPATH"] = src + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node",
           "2", str(SCRIPT), "--out", str(out), "--steps", str(STEPS)]  # fmt: skip
    res = subprocess.run(
        cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=3000, check=False
    )
    summary = [ln for ln in res.stdout.splitlines() if ln.startswith("FSDP2 ")]
    with capsys.disabled():
        print("\n" + "\n".join(summary or [res.stdout[-2000:], res.stderr[-4000:]]))
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-8000:]

    report = json.loads(out.read_text())
    assert report["mode"] == "kda" and report["backend"] == "nccl"
    assert report["world_size"] == 2 and len(report["devices"]) == 2
    assert len({(d["host"], d["local_rank"]) for d in report["devices"]}) == 2
    assert report["versions"]["kernel_fun"] and report["versions"]["fla"] != "not installed"
    assert report["settings"]["perturb_patched"] == 1.0
    assert report["settings"]["steps"] == STEPS and report["settings"]["layers"] == LAYERS
    trimmed = os.environ.get("KERNEL_FUN_TEST_FLA_CONFIGS", "").strip()
    assert report["settings"]["fla_autotune_configs"] == (int(trimmed) if trimmed else None)
    un, pa = report["losses"]["unpatched"], report["losses"]["patched"]
    assert len(un) == len(pa) == STEPS
    assert all(math.isfinite(v) for v in un + pa)
    assert sum(un[-5:]) < sum(un[:5]), f"the stack did not learn: {un}"
    rel = [abs(a - b) / abs(a) for a, b in zip(un, pa)]
    assert max(rel) <= report["tolerance"], rel
    assert report["worst"]["rel_diff"] == pytest.approx(max(rel))
    for run in ("unpatched", "patched"):  # each rank trained on its own shard
        assert all(r0 != r1 for r0, r1 in report["rank_losses"][run]), report["rank_losses"]

    wit = report["witness"]
    assert wit["checked"] is True and [w["rank"] for w in wit["per_rank"]] == [0, 1]
    for w in wit["per_rank"]:
        p, u = w["patched"], w["unpatched"]
        assert p["chain_fwd"] == p["chain_bwd"] == LAYERS * STEPS, w
        assert u["chain_fwd"] == u["chain_bwd"] == 0, w
        assert min(p["cconv_fwd"], p["cconv_bwd"]) >= 3 * LAYERS, w
        assert p["causal_conv1d_fwd_kernel"] == p["causal_conv1d_bwd_kernel"] == 0, w
        assert min(u["causal_conv1d_fwd_kernel"], u["causal_conv1d_bwd_kernel"]) >= 3 * LAYERS
        assert u["cconv_fwd"] == u["cconv_bwd"] == 0, w
    assert report["passed"] is True and report["problems"] == []
