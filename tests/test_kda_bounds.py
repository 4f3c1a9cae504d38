"""tools/kda_bounds.py: the tensor sizes against the family's own byte count, one kernel's
traffic by hand, the committed profile fully modelled, and its refusals."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))

import kda_bounds  # noqa: E402

from ladder.kernels.kda import family  # noqa: E402

PROFILE = ROOT / "docs/results/profile-kda-024-h100-20261206.json"
RECORD = ROOT / "ladder/kernels/kda/ideas/024-fixed-launch/records/20261207T101700Z-e2acc143.json"
ALL_SHAPES = [s for group in family.SHAPES.values() for s in group]


@pytest.mark.parametrize("shape", ALL_SHAPES, ids=lambda s: s.name)
def test_forward_inputs_and_output_are_the_familys_min_bytes(shape):
    t = kda_bounds.tensor_bytes(shape)
    io = t["q"] + t["k"] + t["v"] + t["g_in"] + t["beta"] + t["o"] + t["h0"] + t["ht"]
    assert io == family.min_bytes(shape, "fwd")


def test_dav_traffic_by_hand():
    shape = family.Shape("t", 2, 100, 2, 4, 32, 48)  # GVA, a ragged last chunk
    N, HV, V, es = 200, 4, 48, 2
    nc = 2 * math.ceil(100 / 64)
    reads = es * N * HV * V * 2 + es * N * HV * 64  # do, v_new; Aqk
    writes = 4 * N * HV * 64 + es * N * HV * V  # dAqk fp32; dv
    profile = {"directions": {"bwd": {"kernels": [
        {"kernel": "chunk_kda_bwd_kernel_dAv", "ms": 0.5, "launches": 1.0}]}}}  # fmt: skip
    row = kda_bounds.bounds(profile, shape, 2.0)["bwd"]["rows"][0]
    assert row["gb"] == pytest.approx((reads + writes) / 1e9)
    assert row["bound_ms"] == pytest.approx((reads + writes) / 1e9 / 2.0)
    # dA = do v_new^T and dv = A^T do: two 64 x 64 x V products per chunk and value head
    assert row["gflop"] == pytest.approx(2 * 2 * 64 * 64 * V * nc * HV / 1e9)


def test_committed_profile_is_fully_modelled():
    profile = json.loads(PROFILE.read_text())
    shape = next(s for s in ALL_SHAPES if s.name == profile["shape"])
    result = kda_bounds.bounds(profile, shape, 3.0)
    for direction, r in result.items():
        modelled = [row for row in r["rows"] if row["gb"] is not None]
        unmodelled = [row for row in r["rows"] if row["gb"] is None]
        assert all(row["kernel"].startswith(kda_bounds.TORCH_PREFIXES) for row in unmodelled)
        # torch's own kernels are a small part of the time
        assert sum(row["ms"] for row in unmodelled) < 0.02 * r["kernel_ms"]
        # intermediates only add to what the op itself must move
        assert r["chain_gb"] * 1e9 > family.min_bytes(shape, direction)
        assert r["kernel_ms"] == pytest.approx(
            sum(k["ms"] for k in profile["directions"][direction]["kernels"])
        )
        assert len(modelled) >= 6


def test_cli_report(tmp_path, capsys):
    out = tmp_path / "bounds.txt"
    assert kda_bounds.main([str(PROFILE), "--record", str(RECORD), "--out", str(out)]) == 0
    text = out.read_text()
    assert text == capsys.readouterr().out
    assert "kda_bwd_wy_kernel" in text and "fused bound" in text and "3x that is" in text


def test_unknown_kernel_is_refused(tmp_path):
    profile = json.loads(PROFILE.read_text())
    profile["directions"]["fwd"]["kernels"].append({"kernel": "new_kernel", "ms": 1.0})
    p = tmp_path / "p.json"
    p.write_text(json.dumps(profile))
    with pytest.raises(SystemExit) as e:
        kda_bounds.main([str(p), "--copy-TBps", "3"])
    assert e.value.code == 2


@pytest.mark.parametrize(
    "args",
    [
        ["missing.json", "--copy-TBps", "3"],
        [str(PROFILE)],  # no copy rate
        [str(PROFILE), "--copy-TBps", "3", "--shape", "nope"],
        [str(RECORD), "--copy-TBps", "3"],  # a record is not a profile
    ],
)
def test_bad_arguments_exit_2(args, capsys):
    with pytest.raises(SystemExit) as e:
        kda_bounds.main(args)
    assert e.value.code == 2
    assert "kda_bounds:" in capsys.readouterr().err


def test_the_walk_ideas_kernels_are_modelled():
    """kda/027's and kda/028's own kernels: the diagonal kernel's extra outputs, the walks
    that form w and u, and the backward's row-wise kernel, counted by hand at prod."""
    shape = next(s for s in ALL_SHAPES if s.name == "prod")
    N, H, HV, K, V = shape.B * shape.T, shape.H, shape.HV, shape.K, shape.V
    NC = N // 64
    bf, f32 = 2, 4
    names = {
        "fwd": ["kda_fwd_diag_kernel", "chunk_kda_fwd_kernel_walk_wu"],
        "bwd": ["kda_bwd_qkg_kernel", "kda_bwd_walk_kernel"],
    }
    profile = {
        "idea": "028-bwd-walk-wu",
        "directions": {
            d: {"kernels": [{"kernel": n, "ms": 1.0} for n in ns]} for d, ns in names.items()
        },
    }
    rows = {
        (d, r["kernel"]): r for d, r2 in kda_bounds.bounds(profile, shape, 1.0).items()
        for r in r2["rows"]
    }  # fmt: skip
    qk, gk, vs = N * H * K, N * HV * K, N * HV * V
    qkg = bf * 2 * qk + f32 * N * HV + f32 * gk + 3 * bf * gk  # q, k, beta, gc; qg, kb, kg
    assert rows["bwd", "kda_bwd_qkg_kernel"]["gb"] == pytest.approx(qkg / 1e9)
    walk = 2 * bf * gk + bf * vs + f32 * N * HV + bf * N * HV * 64 + f32 * NC * HV * K
    walk += bf * gk + bf * NC * HV * K * V + bf * vs  # w, h, v_new out
    assert rows["bwd", "kda_bwd_walk_kernel"]["gb"] == pytest.approx(walk / 1e9)
    diag = 2 * bf * qk + f32 * gk + f32 * N * HV  # q, k, gc, beta
    diag += bf * N * HV * 16 + f32 * N * HV * 16 + 3 * bf * gk  # Aqk diagonal, Akkd, qg, kb, kg
    assert rows["fwd", "kda_fwd_diag_kernel"]["gb"] == pytest.approx(diag / 1e9)
    fwd_walk = 3 * bf * gk + bf * vs + f32 * N * HV + 2 * bf * N * HV * 64 + f32 * NC * HV * K
    fwd_walk += bf * vs  # o out
    assert rows["fwd", "chunk_kda_fwd_kernel_walk_wu"]["gb"] == pytest.approx(fwd_walk / 1e9)
    # the same names under an idea without those kernels are refused, not guessed
    profile["idea"] = "025-saved-gate-cumsum"
    with pytest.raises(KeyError, match="chunk_kda_fwd_kernel_walk_wu. has no entry"):
        kda_bounds.bounds(profile, shape, 1.0)
