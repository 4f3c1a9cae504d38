"""CPU checks of tools/fsdp2_kda.py: its plumbing under torchrun with 2 processes over gloo
(--stand-in: FSDP2 sharding, the two training runs, loss gathering, the report, the exit
status, the self-test that must fail), its usage errors, and the pure checks it applies to a
GPU run (loss comparison, witnesses). The KDA run itself needs 2 GPUs
(package/tests/test_kda_fsdp_gpu.py, `make fsdp2`)."""

from __future__ import annotations

import ast
import importlib.util
import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "tools" / "fsdp2_kda.py"
LAYER_TEST = ROOT / "package" / "tests" / "test_kda_layer_gpu.py"
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--standalone"]
TORCHRUN_ENV = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
                "MASTER_PORT", "TORCHELASTIC_RUN_ID", "GROUP_RANK")  # fmt: skip


def _load():
    spec = importlib.util.spec_from_file_location("fsdp2_kda", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["fsdp2_kda"] = mod
    spec.loader.exec_module(mod)
    return mod


fk = _load()


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in TORCHRUN_ENV}
    path = f"{ROOT / 'package' / 'src'}{os.pathsep}{ROOT}"
    env["PYTHONPATH"] = path + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["CUDA_VISIBLE_DEVICES"] = ""  # the CPU path, even where GPUs are
    env.update(extra)
    return env


def _torchrun(out: Path, *args: str) -> subprocess.CompletedProcess:
    cmd = [*TORCHRUN, str(SCRIPT), "--backend", "gloo", "--stand-in", "--out", str(out), *args]
    return subprocess.run(
        cmd, cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=180, check=False
    )


@pytest.fixture(scope="module")
def stand_in_run(tmp_path_factory) -> tuple[subprocess.CompletedProcess, dict]:
    out = tmp_path_factory.mktemp("fsdp2") / "fsdp2.json"
    res = _torchrun(out)
    assert out.is_file(), res.stdout + res.stderr
    return res, json.loads(out.read_text())


# ------------------------------------------------------------------------------------------
# torchrun, 2 processes, gloo, stand-in
# ------------------------------------------------------------------------------------------


def test_stand_in_run_passes_and_reports_both_runs(stand_in_run) -> None:
    res, report = stand_in_run
    assert res.returncode == 0, res.stdout + res.stderr
    assert report["mode"] == "stand-in" and report["backend"] == "gloo"
    assert report["world_size"] == 2
    assert [d["rank"] for d in report["devices"]] == [0, 1]
    assert all(d["device"].startswith("cpu") for d in report["devices"])
    assert report["versions"]["kernel_fun"] and "torch" in report["versions"]
    s = report["settings"]
    assert (s["steps"], s["layers"], s["batch_per_rank"], s["global_batch"]) == (20, 2, 2, 4)
    assert s["perturb_patched"] == 1.0
    un, pa = report["losses"]["unpatched"], report["losses"]["patched"]
    assert len(un) == len(pa) == 20
    assert all(math.isfinite(v) for v in un + pa)
    # patching is a no-op for the stand-in: the two runs are the same computation
    assert un == pa
    assert report["rel_diff"] == [0.0] * 20
    assert report["worst"]["rel_diff"] == 0.0 and report["tolerance"] == fk.LOSS_REL_TOL
    assert sum(un[-5:]) < sum(un[:5]), f"the stand-in did not learn: {un}"
    assert report["passed"] is True and report["problems"] == []
    assert report["witness"]["checked"] is False
    assert [w["rank"] for w in report["witness"]["per_rank"]] == [0, 1]


def test_each_rank_trains_on_its_own_shard_and_the_global_loss_is_their_mean(
    stand_in_run,
) -> None:
    _, report = stand_in_run
    for run in ("unpatched", "patched"):
        per_rank = report["rank_losses"][run]
        assert len(per_rank) == 20 and all(len(row) == 2 for row in per_rank)
        # different shards of the batch give different losses on the two ranks
        assert sum(r0 != r1 for r0, r1 in per_rank) >= 19, per_rank
        for row, glob in zip(per_rank, report["losses"][run]):
            assert glob == pytest.approx(sum(row) / 2, rel=1e-12)


def test_rank_0_alone_prints_one_summary_line(stand_in_run) -> None:
    res, report = stand_in_run
    lines = [ln for ln in res.stdout.splitlines() if ln.startswith("FSDP2 ")]
    assert len(lines) == 1, res.stdout
    assert lines[0] == fk.summary_line(report)
    assert lines[0].endswith(": PASS") and "2 ranks" in lines[0]


def test_a_perturbed_patched_run_fails(tmp_path: Path) -> None:
    """The self-test: the patched run's learning rate x3 must break the tolerance, so every
    process exits 1 (torchrun then exits 1) and the report says why."""
    out = tmp_path / "fsdp2.json"
    res = _torchrun(out, "--perturb-patched", "3")
    assert res.returncode == 1, res.stdout + res.stderr
    assert "exitcode  : 1" in res.stderr  # the processes' own status, not a crash's
    report = json.loads(out.read_text())
    assert report["passed"] is False and report["settings"]["perturb_patched"] == 3.0
    assert report["worst"]["rel_diff"] > fk.LOSS_REL_TOL
    assert report["losses"]["unpatched"][0] == report["losses"]["patched"][0]  # same start
    assert any(p.startswith(f"step {report['worst']['step']}:") for p in report["problems"])
    assert "SELF-TEST" in res.stdout and res.stdout.rstrip().splitlines()[-2].endswith("FAIL")


# ------------------------------------------------------------------------------------------
# usage errors and the command line
# ------------------------------------------------------------------------------------------


def test_without_torchrun_it_exits_2_and_says_how_to_launch(tmp_path: Path) -> None:
    res = subprocess.run(
        [sys.executable, str(SCRIPT), "--backend", "gloo", "--stand-in", "--out",
         str(tmp_path / "r.json")],
        cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert res.returncode == 2, res.stdout + res.stderr
    assert "not launched by torchrun" in res.stderr and "torch.distributed.run" in res.stderr
    assert not (tmp_path / "r.json").exists()


def test_a_process_without_a_gpu_exits_2_with_what_to_do(tmp_path: Path) -> None:
    """The GPU run where no CUDA device is visible: the process (started as torchrun would
    start it) refuses before any process group exists."""
    env = _env(RANK="0", WORLD_SIZE="2", LOCAL_RANK="0", LOCAL_WORLD_SIZE="2")
    res = subprocess.run(
        [sys.executable, str(SCRIPT), "--out", str(tmp_path / "r.json")],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert res.returncode == 2, res.stdout + res.stderr
    assert "no CUDA GPU visible" in res.stderr and "--stand-in" in res.stderr


def test_make_fsdp2_without_two_gpus_refuses_in_one_line_before_torchrun(tmp_path: Path) -> None:
    """`make fsdp2` where fewer than 2 GPUs are visible: one line that says what is missing
    and where the CPU check lives, from a check made before torchrun starts (so no
    ChildFailedError traceback follows it), and no report."""
    env = _env(CUDA_VISIBLE_DEVICES="")
    res = subprocess.run(
        ["make", "-s", "fsdp2", f"PY={sys.executable}", f"OUT={tmp_path}"], cwd=ROOT, env=env,
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert res.returncode != 0, res.stdout + res.stderr
    # make's own "make: ***" line (make[N]: under a make that runs the tests) aside
    lines = [ln for ln in res.stderr.splitlines() if not re.match(r"make(\[\d+\])?: ", ln)]
    assert lines == [
        "make fsdp2: 0 CUDA GPU(s) visible, 2 needed: run it on a machine with 2 GPUs; "
        "tests/test_fsdp2_kda.py checks the plumbing on the CPU (--backend gloo --stand-in)"
    ], res.stderr
    assert "Traceback" not in res.stdout + res.stderr
    assert not (tmp_path / "fsdp2.json").exists()


def test_help_explains_the_stand_in_and_hides_the_self_test() -> None:
    res = subprocess.run(
        [sys.executable, str(SCRIPT), "--help"], cwd=ROOT, env=_env(), capture_output=True,
        text=True, timeout=120, check=False,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    text = " ".join(res.stdout.replace("\u2502", " ").split())  # without rich's box lines
    assert "--stand-in" in text and "CPU plumbing check only" in text
    assert "--perturb-patched" not in text
    assert "perturb-patched" in (fk.__doc__ or "")  # documented in the module instead


ENV2 = {"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "2"}


@pytest.mark.parametrize(
    "env, backend, stand_in, gpus, expected",
    [
        ({}, "nccl", False, 2, "not launched by torchrun"),
        ({**ENV2, "WORLD_SIZE": "1", "LOCAL_WORLD_SIZE": "1"}, "nccl", False, 2, "1 process"),
        (ENV2, "nccl", True, None, "with --backend gloo"),
        (ENV2, "gloo", False, 2, "use --backend nccl"),
        (ENV2, "nccl", False, 0, "no CUDA GPU visible"),
        (ENV2, "nccl", False, 1, "2 processes on this node but 1 CUDA GPU(s)"),
        ({**ENV2, "WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "4"}, "nccl", False, 2, "--nproc_per_node 2"),
        (ENV2, "nccl", False, 2, None),
        ({**ENV2, "WORLD_SIZE": "4"}, "nccl", False, 2, None),  # 2 nodes of 2
        (ENV2, "gloo", True, None, None),
        ({**ENV2, "WORLD_SIZE": "abc"}, "nccl", False, 2, "WORLD_SIZE='abc': not a process"),
        ({**ENV2, "LOCAL_RANK": "-1"}, "nccl", False, 2, "LOCAL_RANK='-1'"),
    ],
)  # fmt: skip
def test_usage_problems(env, backend, stand_in, gpus, expected) -> None:
    problem = fk.usage_problem(env, fk.Backend(backend), stand_in, gpus)
    if expected is None:
        assert problem is None
    else:
        assert problem is not None and expected in problem, problem


# ------------------------------------------------------------------------------------------
# the checks a GPU run applies
# ------------------------------------------------------------------------------------------


def test_the_tolerance_is_the_single_gpu_training_tests() -> None:
    tree = ast.parse(LAYER_TEST.read_text())
    values = [
        ast.literal_eval(node.value)
        for node in tree.body
        if isinstance(node, ast.Assign)
        and any(isinstance(t, ast.Name) and t.id == "LOSS_REL_TOL" for t in node.targets)
    ]
    assert values == [fk.LOSS_REL_TOL]


def _curve(n: int = 20) -> list[float]:
    return [6.0 - 0.1 * i for i in range(n)]


def test_loss_problems() -> None:
    base = _curve()
    assert fk.loss_problems(base, base) == []
    close = [v * (1 + 0.9e-2) for v in base]
    assert fk.loss_problems(base, close) == []
    far = list(base)
    far[7] *= 1 + 1.1e-2
    (line,) = fk.loss_problems(base, far)
    assert line.startswith("step 7:") and "> 1e-02" in line
    nan = list(base)
    nan[3] = math.nan
    lines = fk.loss_problems(base, nan)
    assert any("patched run: loss not finite at steps [3]" in ln for ln in lines)
    assert any(ln.startswith("step 3:") for ln in lines)  # a nan is the worst difference
    flat = [6.0] * 20
    assert any("did not learn" in ln for ln in fk.loss_problems(flat, flat))
    with pytest.raises(ValueError):
        fk.rel_diffs(base, base[:-1])


def _counts(patched: bool, layers: int = 2, steps: int = 20) -> dict[str, int]:
    ours, fla = (6, 0) if patched else (0, 6)
    chain = layers * steps if patched else 0
    return {"chain_fwd": chain, "chain_bwd": chain, "cconv_fwd": ours, "cconv_bwd": ours,
            "causal_conv1d_fwd_kernel": fla, "causal_conv1d_bwd_kernel": fla}  # fmt: skip


@pytest.mark.parametrize("run", ["patched", "unpatched"])
def test_witnesses_that_hold(run: str) -> None:
    assert fk.witness_problems(1, run, _counts(run == "patched"), 2, 20) == []


@pytest.mark.parametrize(
    "run, change, needle",
    [
        ("patched", {"chain_fwd": 39}, "kda chain fwd ran 39 times, expected 40"),
        ("patched", {"chain_bwd": 0}, "kda chain bwd ran 0 times"),
        ("patched", {"cconv_bwd": 5}, "cconv_bwd launched 5 times"),
        ("patched", {"causal_conv1d_fwd_kernel": 1}, "causal_conv1d_fwd_kernel launched 1 times"),
        ("unpatched", {"chain_fwd": 1}, "kda chain fwd ran 1 times, expected 0"),
        ("unpatched", {"cconv_fwd": 2}, "cconv_fwd launched 2 times in the profiled step, expected 0"),
        ("unpatched", {"causal_conv1d_bwd_kernel": 0}, "causal_conv1d_bwd_kernel launched 0"),
    ],
)  # fmt: skip
def test_witnesses_that_fail(run: str, change: dict[str, int], needle: str) -> None:
    counts = {**_counts(run == "patched"), **change}
    lines = fk.witness_problems(1, run, counts, 2, 20)
    assert any(needle in ln and ln.startswith(f"rank 1 {run}:") for ln in lines), lines
    assert any("did not engage" in ln for ln in lines) == (run == "patched")


# ------------------------------------------------------------------------------------------
# fla's own layer under fully_shard, on the CPU
# ------------------------------------------------------------------------------------------

# Run by torchrun in each process: the script's stack with fla's KimiDeltaAttention (small
# sizes), its three Triton pieces replaced by torch (the layer test's fp32 chunk_kda and conv
# references, and a gated RMSNorm), sharded and trained by the script's own train_sharded.
_REAL_LAYER_WORKER = """
import importlib.util, json, sys
import torch, torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh

spec = importlib.util.spec_from_file_location("fsdp2_kda", sys.argv[1])
fk = importlib.util.module_from_spec(spec)
spec.loader.exec_module(fk)
spec = importlib.util.spec_from_file_location("layer_test", sys.argv[2])
lt = importlib.util.module_from_spec(spec)
spec.loader.exec_module(lt)
from fla.modules.norm.fused_norm_gate import FusedRMSNormGated
from kernel_fun._testing import learnable_tokens


def gated_rms_norm(self, x, g, residual=None, prenorm=False, residual_in_fp32=False):
    x = x.float()
    y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight.float()
    return y * g.float().sigmoid()


FusedRMSNormGated.forward = gated_rms_norm
fk.KDA_SIZES.update(hidden=128, heads=2, head_dim=32, vocab=256)
dist.init_process_group("gloo")
rank, dev = dist.get_rank(), torch.device("cpu")
mesh = init_device_mesh("cpu", (2,))
init = fk.build_stack(False, fk.N_LAYERS, 0)
tokens = learnable_tokens(256, (2, 4, 17), dev, 2)[:, 2 * rank : 2 * rank + 2]
with lt._fp32_reference_kda():
    losses, _ = fk.train_sharded(init, tokens, 1e-3, dev, mesh, None)
# one file per rank: lines two processes print to one pipe can interleave
with open(f"{sys.argv[3]}/rank{rank}.json", "w") as f:
    json.dump({"rank": rank, "losses": losses.tolist()}, f)
dist.destroy_process_group()
"""


def test_fla_kda_stack_shards_and_trains_under_fully_shard(tmp_path: Path) -> None:
    """The script's real stack (fla's KimiDeltaAttention blocks) under fully_shard over gloo:
    every parameter of fla's layer shards, forward and backward run through FSDP2's hooks,
    and AdamW steps the sharded weights. fla's Triton kernels cannot run on a CPU, so torch stands in
    for them here; kernel-fun and the witnesses need the GPU run."""
    pytest.importorskip("fla")
    worker = tmp_path / "worker.py"
    worker.write_text(_REAL_LAYER_WORKER)
    res = subprocess.run(
        [*TORCHRUN, str(worker), str(SCRIPT), str(LAYER_TEST), str(tmp_path)],
        cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=180, check=False,
    )  # fmt: skip
    assert res.returncode == 0, res.stdout + res.stderr[-4000:]
    rows = [json.loads(p.read_text()) for p in sorted(tmp_path.glob("rank*.json"))]
    assert sorted(r["rank"] for r in rows) == [0, 1], res.stdout
    for r in rows:
        assert len(r["losses"]) == 2 and all(math.isfinite(v) for v in r["losses"])
        assert abs(r["losses"][0] - math.log(256)) < 1.0  # a fresh model's loss
        assert r["losses"][1] != r["losses"][0]  # the optimizer stepped the sharded weights
    assert rows[0]["losses"] != rows[1]["losses"]  # each rank its own shard of the batch
