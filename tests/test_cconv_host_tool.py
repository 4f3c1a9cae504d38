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


def test_warmup_records_a_stopped_process_and_saves_after_each(monkeypatch):
    import subprocess
    import types

    def fake_run(cmd, **kw):
        if cmd[3] == "fla":  # [python, -c, source, which, calls]
            raise subprocess.TimeoutExpired(cmd, kw["timeout"])
        return types.SimpleNamespace(returncode=0, stdout='{"first": 1.5}\n', stderr="")

    monkeypatch.setattr(subprocess, "run", fake_run)
    saved = []
    out = cconv_host._warmup(["011"], lambda part: saved.append(dict(part)), timeout_s=5)
    assert out["kernel_fun"] == {"first": 1.5} and out["idea:011"] == {"first": 1.5}
    assert out["fla"] == {"error": "stopped after 5 s"}
    assert [list(p) for p in saved] == [
        ["kernel_fun"],
        ["kernel_fun", "idea:011"],
        ["kernel_fun", "idea:011", "fla"],
    ]
