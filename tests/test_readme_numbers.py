"""README's real-layer numbers are the committed `make prodtime` report's, digit for digit."""

from __future__ import annotations

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REPORT = ROOT / "docs" / "results" / "prodtime-h200-20261129.json"


def test_readme_quotes_the_committed_prodtime_report() -> None:
    readme = (ROOT / "README.md").read_text()
    report = json.loads(REPORT.read_text())
    assert report["device"]["name"] == "NVIDIA H200" and report["device"]["capability"] == "sm90"
    assert report["settings"]["fla_autotune_in_process"] is True
    assert str(REPORT.relative_to(ROOT)) in readme
    for row in report["conv"]:
        assert row["agrees"]
        line = (
            f"| {row['op']} B{row['B']} T{row['T']} D{row['D']} W{row['W']} | "
            f"{row['fla_ms']['median']:.3f} | {row['kernel_fun_ms']['median']:.3f} | "
            f"{row['ratio']:.2f}x |"
        )
        assert line in readme, line
    layer = report["layer"]
    assert layer["kernel_fun"]["engaged"] and layer["kernel_fun"]["fla_conv_launches"] == 0
    for key, label in (("fla", "fla"), ("kernel_fun", "`kernel_fun.patched_fla()`")):
        side = layer[key]
        line = (
            f"| {label} | {side['step_ms']['median']:.2f} | {side['conv_ms']:.2f} | "
            f"{100 * side['conv_share']:.1f}% |"
        )
        assert line in readme, line
    assert f"{layer['ratio']:.2f}x faster" in readme
    assert layer["kernel_fun"]["conv_share"] < layer["fla"]["conv_share"]
