"""The cconv family's cases beyond dense: shapes, inputs, the fp64 case oracle against an
autograd reference, bytes, old records' shape fields, and idea 002 through the ladder."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from ladder.check import rel_err
from ladder.kernels.cconv import family

REPO = Path(__file__).resolve().parents[1]
OLD_FIELDS = {"name", "B", "T", "D", "W", "x_dtype", "w_dtype"}


def _autograd_reference(x, w, dy, opts):
    """Per sequence: xp = [h0 rows; x rows], z = conv, y = act(z + b) + r; gradients of
    sum(y dy) + sum(final dht) by torch.autograd, folded as the family folds them."""
    leaf = {k: v.detach().double().requires_grad_() for k, v in
            {"x": x, "w": w, "b": opts["bias"], "r": opts["residual"],
             "h": opts["initial_state"]}.items() if v is not None}  # fmt: skip
    W = w.shape[1]
    cu = opts["cu_seqlens"]
    spans = (
        [(b, 0, x.shape[1]) for b in range(x.shape[0])]
        if cu is None
        else [(0, int(cu[i]), int(cu[i + 1])) for i in range(len(cu) - 1)]
    )
    ys, finals = [[] for _ in range(x.shape[0])], []
    for n, (b, s, e) in enumerate(spans):
        pre = leaf["h"][n].T if "h" in leaf else torch.zeros(W, x.shape[2], dtype=torch.float64)
        xp = torch.cat([pre, leaf["x"][b, s:e]])
        z = sum(leaf["w"][:, k] * xp[1 + k : 1 + k + e - s] for k in range(W))
        if "b" in leaf:
            z = z + leaf["b"]
        y = z if opts["activation"] is None else torch.nn.functional.silu(z)
        ys[b].append(y + leaf["r"][b, s:e] if "r" in leaf else y)
        finals.append(xp[e - s :].T)
    y = torch.stack([torch.cat(r) for r in ys])
    final = torch.stack(finals)
    loss = (y * dy.double()).sum()
    if opts["dht"] is not None:
        loss = loss + (final * opts["dht"].double()).sum()
    grads = dict(zip(leaf, torch.autograd.grad(loss, list(leaf.values())), strict=True))
    y_out = torch.cat([y.flatten(), final.flatten()]) if opts["output_final_state"] else y
    dx_out = torch.cat([grads["x"].flatten(), grads["h"].flatten()]) if "h" in grads else grads["x"]
    dw_out = torch.cat([grads["w"].flatten(), grads["b"]]) if "b" in grads else grads["w"]
    return y_out.detach(), dx_out, dw_out


SMALL_CASES = [s for s in family.SHAPES["small"] if isinstance(s, family.CaseShape)]


@pytest.mark.parametrize("shape", SMALL_CASES, ids=lambda s: s.name)
def test_case_reference_matches_autograd(shape) -> None:
    inputs = family.make_inputs(
        dataclasses.replace(shape, x_dtype="float64", w_dtype="float64"), "cpu", 7
    )  # noqa: E501
    assert len(inputs) == 4 and set(inputs[3]) == {
        "bias", "residual", "initial_state", "output_final_state", "activation", "cu_seqlens",
        "dht",
    }  # fmt: skip
    got = family.reference(*inputs)
    want = _autograd_reference(*inputs)
    for g, r in zip(got, want, strict=True):
        assert g.shape == r.shape
        assert rel_err(g, r) < 1e-12


def test_every_case_shape_names_a_family_case_and_sets_are_unique() -> None:
    names = [s.name for shapes in family.SHAPES.values() for s in shapes]
    assert len(names) == len(set(names))
    for shapes in family.SHAPES.values():
        for s in shapes:
            assert getattr(s, "case", "dense") in family.CASES
    sweep_cases = {getattr(s, "case", "dense") for s in family.SHAPES["sweep"]}
    assert sweep_cases == set(family.CASES)  # every case is benched at a GPU size


def test_dense_shapes_keep_the_fields_old_records_have() -> None:
    for shapes in family.SHAPES.values():
        for s in shapes:
            if isinstance(s, family.Shape):
                assert set(dataclasses.asdict(s)) == OLD_FIELDS


def test_packed_lengths_are_deterministic_mixed_and_fill_the_stream() -> None:
    (packed,) = [s for s in family.SHAPES["sweep"] if getattr(s, "case", "") == "varlen"]
    lengths = family.case_lengths(packed)
    assert lengths == family.case_lengths(packed)
    assert sum(lengths) == packed.T == 131072 and packed.D == 2048 and packed.B == 1
    assert min(lengths) >= 1 and max(lengths) <= 8192 and len(set(lengths)) > len(lengths) // 2


def test_case_inputs_zero_dhts_slot_0_and_never_zero_elsewhere() -> None:
    shape = next(s for s in SMALL_CASES if s.state)
    x, w, dy, opts = family.make_inputs(shape, "cpu", 3)
    assert (opts["dht"][..., 0] == 0).all() and (opts["dht"][..., 1:] != 0).all()
    assert (opts["initial_state"] != 0).all() and (x != 0).all() and (dy != 0).all()


def test_case_bytes_count_each_optional_tensor() -> None:
    br = next(s for s in family.SHAPES["sweep"] if s.name == "prod-bias-residual")
    dense = family.SHAPES["prod"][0]
    assert (
        family.min_bytes(br, "fwd") - family.min_bytes(dense, "fwd")
        == 16 * 8192 * 2048 * 2 + 2048 * 4
    )  # noqa: E501
    assert family.min_bytes(br, "bwd") - family.min_bytes(dense, "bwd") == 2 * 2048 * 4
    fp32 = next(s for s in family.SHAPES["sweep"] if getattr(s, "case", "") == "fp32")
    assert family.min_bytes(fp32, "fwd") == 2 * 8 * 8192 * 2048 * 4 + 2048 * 4 * 4


def test_baseline_implements_every_case() -> None:
    for name in (*family.ENTRY_POINTS, *family.CASE_ENTRY_POINTS):
        assert callable(getattr(family.BASELINE, name))


@pytest.mark.slow
def test_check_idea_002_on_the_interpreter() -> None:
    """Every small shape, the cases included, through the real harness (run, the folded
    outputs, strided layouts)."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = str(REPO)
    proc = subprocess.run(
        [sys.executable, "-m", "ladder", "check", "cconv", "002", "--interpret"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert "case not in the idea's CASES" not in proc.stdout
    n = len(family.SHAPES["small"])
    assert f"passed: {2 * n} checks" in proc.stdout and "FAILED" not in proc.stdout
