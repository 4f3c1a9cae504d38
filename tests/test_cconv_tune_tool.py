"""tools/cconv_tune.py's refusals on the CPU: a report path that cannot be written, and no GPU;
and its wide space holds what the idea table was read from."""

from __future__ import annotations

import torch

from tools import cconv_tune


def test_a_folder_as_out_is_refused_before_any_gpu_work(tmp_path, capsys):
    assert cconv_tune.main(["--out", str(tmp_path)]) == 2
    assert "is a folder" in capsys.readouterr().err


def test_no_gpu_exits_2_and_writes_nothing(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    out = tmp_path / "sub" / "r.json"
    assert cconv_tune.main(["--out", str(out)]) == 2
    assert "needs a CUDA GPU" in capsys.readouterr().err and not out.exists()


def test_wide_space_replaces_every_tuners_configurations():
    tuners = cconv_tune._tuners("010")
    assert set(tuners) == {"dense_fwd", "dense_bwd", "case_fwd", "case_bwd", "case_bwd_fp32"}
    saved = {k: t.configs for k, t in tuners.items()}
    try:
        cconv_tune._wide(tuners)
        for t in tuners.values():
            got = {(c.num_warps, c.kwargs["G"], c.maxnreg) for c in t.configs}
            assert got == set(cconv_tune.WIDE)
            assert all(c.kwargs["BD"] == 128 * c.num_warps for c in t.configs)
    finally:
        for k, t in tuners.items():
            t.configs = saved[k]
