"""tools/cconv_host.py's refusals on the CPU: a report path that cannot be written, and no GPU."""

from __future__ import annotations

import torch

from tools import cconv_host


def test_a_folder_as_out_is_refused_before_any_gpu_work(tmp_path, capsys):
    assert cconv_host.main(["--out", str(tmp_path)]) == 2
    assert "is a folder" in capsys.readouterr().err


def test_a_folder_as_profile_is_refused(tmp_path, capsys):
    out = tmp_path / "r.json"
    assert cconv_host.main(["--out", str(out), "--profile", str(tmp_path)]) == 2
    assert "is a folder" in capsys.readouterr().err and not out.exists()


def test_no_gpu_exits_2_and_writes_nothing(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    out = tmp_path / "sub" / "r.json"
    assert cconv_host.main(["--out", str(out)]) == 2
    assert "needs a CUDA GPU" in capsys.readouterr().err and not out.exists()
