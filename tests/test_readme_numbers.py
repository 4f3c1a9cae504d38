"""README's real-layer numbers are the committed `make prodtime` report's, digit for digit."""

from __future__ import annotations

import itertools
import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REPORT = ROOT / "docs" / "results" / "prodtime-h200-20261204.json"


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
    kda = report["kda"]
    assert kda["agrees"] and kda["engaged"]
    line = (
        f"| `kernel_fun.kda.chunk_kda` | {kda['fla_ms']['median']:.2f} | "
        f"{kda['kernel_fun_ms']['median']:.2f} | {kda['ratio']:.2f}x |"
    )
    assert line in readme, line
    assert f"on {max(kda['rel_diff_vs_fla'], key=kda['rel_diff_vs_fla'].get)})" in readme
    layer = report["layer"]
    assert layer["kernel_fun"]["engaged"] and layer["kernel_fun"]["fla_conv_launches"] == 0
    sides = (
        ("fla", "fla"),
        ("cconv_only", '`kernel_fun.patched_fla("cconv")`'),
        ("kernel_fun", "`kernel_fun.patched_fla()`"),
    )
    for key, label in sides:
        side = layer[key]
        line = (
            f"| {label} | {side['step_ms']['median']:.2f} | {side['conv_ms']:.2f} | "
            f"{100 * side['conv_share']:.1f}% |"
        )
        assert line in readme, line
    assert f"{layer['ratio']:.2f}x faster" in readme
    assert f"the conv alone gives {layer['ratio_cconv_only']:.2f}x" in readme
    assert f"the kda chain adds {layer['ratio_vs_cconv_only']:.2f}x" in readme
    assert layer["kernel_fun"]["conv_share"] < layer["fla"]["conv_share"]
    # both families patched beat the conv alone
    assert layer["ratio_vs_cconv_only"] > 1


def _shape(rec_path: str, name: str) -> dict:
    rec = json.loads((ROOT / rec_path).read_text())
    assert rec["status"] == "passed" and not rec["dirty"]
    (entry,) = [s for s in rec["shapes"] if s["name"] == name]
    return entry


def test_readme_research_numbers_are_the_committed_records() -> None:
    readme = (ROOT / "README.md").read_text()
    kda = "ladder/kernels/kda/ideas/001-intra-diag-parallel/records/"
    kda2 = "ladder/kernels/kda/ideas/002-bwd-wide-ctas/records/"
    kda3 = "ladder/kernels/kda/ideas/003-intra-anchored-diag/records/"
    kda4 = "ladder/kernels/kda/ideas/004-wy-split-k/records/"
    kda8 = "ladder/kernels/kda/ideas/008-fwd-state-out/records/"
    kda9 = "ladder/kernels/kda/ideas/009-bwd-gate-tail/records/"
    kda12 = "ladder/kernels/kda/ideas/012-fwd-diag-anchored/records/"
    kda14 = "ladder/kernels/kda/ideas/014-intra-reg-cap/records/"
    kda15 = "ladder/kernels/kda/ideas/015-diag-exact-tile/records/"
    kda16 = "ladder/kernels/kda/ideas/016-diag-exact-launch/records/"
    kda22 = "ladder/kernels/kda/ideas/022-diag-qg/records/"
    rows = [
        (kda14 + "20261204T194602Z-5d0fda72.json", "t2048", "| 014 at t2048 B16 T2048 |", 3, 3),
        (kda14 + "20261204T194602Z-5d0fda72.json", "neg-eigval", "| 014 at neg-eigval B4 T4000", 3, 3),
        (kda14 + "20261204T194602Z-5d0fda72.json", "deep-gate", "| 014 at deep-gate B4 T4000", 3, 3),
        (kda15 + "20261204T195932Z-2bf91e9f.json", "deep-gate", "| 015 at deep-gate B4 T4000", 3, 3),
        (kda15 + "20261204T195932Z-2bf91e9f.json", "neg-eigval", "| 015 at neg-eigval B4 T4000", 3, 3),
        (kda16 + "20261204T204041Z-b7f42b87.json", "deep-gate", "| 016 at deep-gate B4 T4000", 3, 3),
        (kda16 + "20261204T204041Z-b7f42b87.json", "neg-eigval", "| 016 at neg-eigval B4 T4000", 3, 3),
        (kda22 + "20261205T051110Z-dd4482b7.json", "prod", "| 022 at prod B16 T8192 H16 K128 V256 (2026-12-05)", 3, 2),
        (kda14 + "20261204T151500Z-5d0fda72.json", "prod", "| 014 at prod B16 T8192 H16 K128 V256 (2026-12-04)", 3, 2),
        (kda12 + "20261203T114202Z-e5db58d3.json", "prod", "| 012 at prod B16 T8192 H16 K128 V256 |", 3, 2),
        (kda12 + "20261204T062921Z-e5db58d3.json", "t2048", "| 012 at t2048 B16 T2048 |", 3, 3),
        (kda9 + "20261202T223615Z-da4b2fd8.json", "prod", "| 009 at prod B16 T8192 H16 K128 V256, forward state stage at BV 128", 3, 2),
        (kda9 + "20261202T020457Z-da4b2fd8.json", "prod", "| 009 at prod B16 T8192 H16 K128 V256, at 008's launch", 3, 2),
        (kda8 + "20261201T223626Z-16c84f64.json", "prod", "| 008 at prod B16 T8192 H16 K128 V256 |", 3, 2),
        (kda4 + "20261201T022516Z-7ae59cc0.json", "prod", "| 004 at prod B16 T8192 H16 K128 V256 |", 3, 2),
        (kda4 + "20261201T022556Z-7ae59cc0.json", "deep-gate", "| 004 at deep-gate B4 T4000", 3, 3),
        (kda4 + "20261201T022556Z-7ae59cc0.json", "neg-eigval", "| 004 at neg-eigval B4 T4000", 3, 3),
        (kda4 + "20261201T022556Z-7ae59cc0.json", "t2048", "| 004 at t2048 B16 T2048 |", 3, 3),
        (kda4 + "20261201T024536Z-7ae59cc0.json", "lower-bound", "| 004 at lower-bound B16 T8192", 3, 2),
        (kda4 + "20261201T024632Z-7ae59cc0.json", "varlen", "| 004 at varlen B1, 131072 tokens", 3, 2),
        (kda3 + "20261201T002748Z-5a2e2452.json", "prod", "| 003 at prod B16 T8192 H16 K128 V256 |", 3, 2),
        (kda3 + "20261201T002829Z-5a2e2452.json", "deep-gate", "| 003 at deep-gate B4 T4000", 3, 3),
        (kda3 + "20261201T002829Z-5a2e2452.json", "neg-eigval", "| 003 at neg-eigval B4 T4000", 3, 3),
        (kda3 + "20261201T002829Z-5a2e2452.json", "t2048", "| 003 at t2048 B16 T2048 |", 3, 3),
        (kda + "20261130T174535Z-f56964fc.json", "prod", "| 001 at prod B16 T8192 H16 K128 V256 |", 3, 2),
        (kda + "20261130T174611Z-f56964fc.json", "deep-gate", "| 001 at deep-gate B4 T4000", 3, 3),
        (kda2 + "20261130T190316Z-67918ee4.json", "prod", "| 002 at prod B16 T8192 H16 K128 V256 |", 3, 2),
        (kda2 + "20261130T190358Z-67918ee4.json", "deep-gate", "| 002 at deep-gate B4 T4000", 3, 3),
        (kda2 + "20261130T190358Z-67918ee4.json", "neg-eigval", "| 002 at neg-eigval B4 T4000", 3, 3),
        (kda2 + "20261130T190358Z-67918ee4.json", "t2048", "| 002 at t2048 B16 T2048 |", 3, 3),
    ]  # fmt: skip
    for path, name, label, fwd_digits, bwd_digits in rows:
        e = _shape(path, name)
        f, b = e["fwd"], e["bwd"]
        cells = (
            f"{f['candidate_ms']['median']:.{fwd_digits}f} ({f['baseline_ms']['median']:.{fwd_digits}f}) | "
            f"{b['candidate_ms']['median']:.{bwd_digits}f} ({b['baseline_ms']['median']:.{bwd_digits}f}) | "
            f"{e['fwdbwd']['ratio']:.3f}x |"
        )  # fmt: skip
        line = next(ln for ln in readme.splitlines() if ln.startswith(label))
        assert line.endswith(cells), (line, cells)
    cc_ideas = "ladder/kernels/cconv/ideas/"
    case_rows = [
        (cc_ideas + "002-strip-box/records/20261130T175109Z-39e2a4a1.json", ""),
        (cc_ideas + "007-case-loop-bwd/records/20261201T112950Z-16d2b484.json", "007, "),
        (cc_ideas + "012-launch-plans/records/20261204T061004Z-48f6a228.json", "012, "),
        (cc_ideas + "013-small-split/records/20261204T142430Z-a71226e9.json", "013 (vendored), "),
    ]
    for (cc, idea), (name, label) in itertools.product(case_rows, (
        ("prod-bias-residual", "prod with bias and residual |"),
        ("packed-131072-d2048", "packed B1, 131072 tokens, lengths 1..8192 |"),
        ("prefill-state", "prefill with initial and final state, B16 T4096 |"),
    )):  # fmt: skip
        label = "| " + idea + label
        e = _shape(cc, name)
        f, b = e["fwd"], e["bwd"]
        cells = (
            f" {f['candidate_ms']['median']:.3f} ({f['baseline_ms']['median']:.3f}) | {f['ratio']:.2f}x"
            f" | {b['candidate_ms']['median']:.3f} ({b['baseline_ms']['median']:.3f}) | {b['ratio']:.2f}x |"
        )  # fmt: skip
        assert label + cells in readme, label + cells
    small = "005-small-call-grid/records/20261201T113044Z-5a185b36.json"
    plans = "012-launch-plans/records/20261204T061004Z-48f6a228.json"
    split = "013-small-split/records/20261204T142430Z-a71226e9.json"
    for path, name, label in (
        (split, "prod", "| B16 T8192 D2048 W4 (prod), 013 |"),
        (split, "b4-t2048", "| B4 T2048 D2048, 013 |"),
        (split, "b1-t4096-d768", "| B1 T4096 D768, 013 |"),
        (plans, "prod", "| B16 T8192 D2048 W4 (prod), 012 |"),
        (plans, "b4-t2048", "| B4 T2048 D2048, 012 |"),
        (plans, "b1-t4096-d768", "| B1 T4096 D768, 012 |"),
        (small, "prod", "| B16 T8192 D2048 W4 (prod), 005 |"),
        (small, "b4-t2048", "| B4 T2048 D2048, 005 |"),
        (small, "b1-t4096-d768", "| B1 T4096 D768, 005 |"),
        ("004-exact-sigmoid/records/20261201T001833Z-f1b512bd.json", "prod", "| B16 T8192 D2048 W4 (prod), 004 |"),
        ("003-strip-merge/records/20261130T222124Z-48feb3e7.json", "prod", "| B16 T8192 D2048 W4 (prod), 003 |"),
    ):  # fmt: skip
        e = _shape(cc_ideas + path, name)
        f, b = e["fwd"], e["bwd"]
        cells = (
            f" {f['candidate_ms']['median']:.3f} ({f['baseline_ms']['median']:.3f}) | {f['ratio']:.2f}x"
            f" | {b['candidate_ms']['median']:.3f} ({b['baseline_ms']['median']:.3f}) | {b['ratio']:.2f}x"
            f" | {e['fwdbwd']['ratio']:.2f}x |"
        )  # fmt: skip
        assert label + cells in readme, label + cells


def test_readme_quotes_the_earlier_layer_steps() -> None:
    """The earlier builds' layer-step ratios README quotes: the previous whole report's and the
    printed tail of a report that did not come back whole."""
    readme = " ".join((ROOT / "README.md").read_text().split())
    prev = json.loads((ROOT / "docs" / "results" / "prodtime-h200-20261202b.json").read_text())
    layer = prev["layer"]
    assert (
        "`docs/results/prodtime-h200-20261202b.json`: "
        f"{layer['ratio']:.2f}x, the conv alone {layer['ratio_cconv_only']:.2f}x, the kda chain "
        f"adding {layer['ratio_vs_cconv_only']:.2f}x"
    ) in readme
    tail = (ROOT / "docs" / "results" / "prodtime-h200-20261203-tail.txt").read_text()
    steps = {}
    for label, key in (("fla", "fla"), ("kernel-fun", "both")):
        cells = [ln.split("│") for ln in tail.splitlines() if ln.startswith("│")]
        # the row that names the side and has a step time (not a ratio's second line)
        (row,) = [c for c in cells if c[1].strip() == label and c[2].strip()]
        steps[key] = float(row[2])
    assert (
        f"printed {steps['fla'] / steps['both']:.2f}x, and only its printed tail came back "
        "(`docs/results/prodtime-h200-20261203-tail.txt`)"
    ) in readme


def test_readme_quotes_the_promoted_kda_profile() -> None:
    """The promoted kda build's per-kernel profile README quotes, beside fla's, as measured."""
    readme = " ".join((ROOT / "README.md").read_text().split())
    res = ROOT / "docs" / "results"
    ours = json.loads((res / "profile-kda-012-h200-20261203.json").read_text())["directions"]
    fla = json.loads((res / "profile-kda-000-h200-20261203.json").read_text())["directions"]

    def ms(prof: dict, direction: str, kernel: str) -> float:
        (row,) = [r for r in prof[direction]["kernels"] if r["kernel"] == kernel]
        return row["ms"]

    intra, wy = ms(ours, "bwd", "kda_bwd_intra_kernel"), ms(ours, "bwd", "kda_bwd_wy_kernel")
    fla_two = ms(fla, "bwd", "chunk_kda_bwd_kernel_intra") + ms(
        fla, "bwd", "chunk_kda_bwd_kernel_wy_dqkg_fused"
    )
    recompute = (
        ms(ours, "bwd", "recompute_w_u_fwd_kda_kernel"),
        ms(ours, "bwd", "chunk_gated_delta_rule_fwd_kernel_h_blockdim64"),
        ms(ours, "bwd", "kda_gate_chunk_cumsum_vector_kernel"),
    )
    for quoted in (
        f"the forward takes {ours['fwd']['wall_ms']:.2f} ms of wall time (fla "
        f"{fla['fwd']['wall_ms']:.2f}), {ms(ours, 'fwd', 'chunk_kda_fwd_kernel_h_o'):.2f} ms",
        f"the backward {ours['bwd']['wall_ms']:.2f} ms (fla {fla['bwd']['wall_ms']:.2f}), "
        f"{intra + wy:.2f} ms of it two kernels",
        f"(`kda_bwd_intra_kernel`, {intra:.2f} ms) and the WY stage (`kda_bwd_wy_kernel`, "
        f"{wy:.2f} ms), where fla's two take {fla_two:.2f} ms",
        f"(w/u {recompute[0]:.2f} ms, the forward state {recompute[1]:.2f} ms, the gate cumsum "
        f"{recompute[2]:.2f} ms) are {sum(recompute):.2f} ms more",
    ):
        assert quoted in readme, quoted


def test_readme_quotes_the_kda_014_sweep_record() -> None:
    """The sweep ratios README's kda paragraph quotes are 014's sweep record's."""
    readme = " ".join((ROOT / "README.md").read_text().split())
    path = "ladder/kernels/kda/ideas/014-intra-reg-cap/records/20261204T194602Z-5d0fda72.json"
    t, neg, deep = (_shape(path, n) for n in ("t2048", "neg-eigval", "deep-gate"))
    assert (
        f"runs at {t['fwdbwd']['ratio']:.3f}x at t2048 (B16 T2048; forward {t['fwd']['ratio']:.3f}x, "
        f"backward {t['bwd']['ratio']:.3f}x), {neg['fwdbwd']['ratio']:.3f}x at neg-eigval (beta near "
        f"2) and {deep['fwdbwd']['ratio']:.3f}x at deep-gate"
    ) in readme
    assert f"slower than fla's ({deep['fwd']['ratio']:.3f}x:" in readme


def test_readme_quotes_the_cconv_012_host_report() -> None:
    """The 012 build's host-time and decode numbers README quotes are its report's."""
    readme = " ".join((ROOT / "README.md").read_text().split())
    rep = json.loads((ROOT / "docs" / "results" / "cconv-host-h200-20261204.json").read_text())
    assert rep["versions"]["cconv.record"] == "012-launch-plans/20261204T061004Z-48f6a228"
    prod, small = rep["us"]["prod"], rep["us"]["b1-t4096-d768"]
    assert (
        f"{prod['kernel_fun']:.1f} us at prod without autograd "
        f"({prod['kernel_fun'] / prod['torch_op']:.2f}x the op's {prod['torch_op']:.1f} us) and "
        f"{prod['kernel_fun_grad']:.1f} us with it"
    ) in readme
    assert f"{small['kernel_fun']:.1f} and {small['kernel_fun_grad']:.1f} us" in readme
    dec = [rep["decode_us"][k]["kernel_fun"] for k in ("n1", "n16", "n64")]
    assert f"{min(dec):.1f}-{max(dec):.1f} us against fla's" in readme


def test_readme_headline_names_the_vendored_kda_chain() -> None:
    """The opening paragraph names the idea and record the package's kda chain was vendored
    from (its _provenance.py) and that record's prod forward+backward ratio."""
    import ast

    from ladder import records

    readme = " ".join((ROOT / "README.md").read_text().split())
    prov = ROOT / "package" / "src" / "kernel_fun" / "kda" / "_provenance.py"
    tree = ast.parse(prov.read_text())
    (record,) = [
        ast.literal_eval(n.value)
        for n in tree.body
        if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == "RECORD"
    ]
    idea, rid = record["idea"], record["record_id"]
    rec = json.loads(
        (ROOT / "ladder/kernels/kda/ideas" / idea / "records" / f"{rid}.json").read_text()
    )
    head = readme[: readme.index("## Set up and test")]
    (gpu,) = re.findall(r"\bH[12]00\b", rec["device"]["name"])
    assert (
        f"the promoted chain (ladder idea `kda/{idea[:3]}`, {records.prod_ratio(rec):.3f}x fla's "
        f"forward+backward at B16 T8192 H16 K128 V256 on an {gpu}, record `{rid}`"
    ) in head


def test_readme_names_the_next_free_idea_numbers() -> None:
    """The research loop's scaffold example names the numbers `ladder new` would give."""
    readme = " ".join((ROOT / "README.md").read_text().split())
    ideas = ROOT / "ladder" / "kernels"
    nxt = {
        fam: 1
        + max(int(p.name[:3]) for p in (ideas / fam / "ideas").iterdir() if p.name[:3].isdigit())
        for fam in ("cconv", "kda")
    }
    assert f"scaffolds `ladder/kernels/cconv/ideas/{nxt['cconv']:03d}-my-idea/`" in readme
    assert f"(the next free number; 001 to {nxt['cconv'] - 1:03d} exist;" in readme
    assert f"`python -m ladder new kda my-idea` gives {nxt['kda']:03d}," in readme


def test_readme_quotes_the_kda_host_times() -> None:
    """The kda host-time paragraph quotes 024's prod record (the vendored chain's, H100), 022's
    (H200) and 014's neg-eigval record."""
    readme = " ".join((ROOT / "README.md").read_text().split())
    ideas = "ladder/kernels/kda/ideas/"
    old = _shape(ideas + "022-diag-qg/records/20261205T051110Z-dd4482b7.json", "prod")["host_us"]
    assert (
        f"had {old['fwd']['candidate']:.0f} and {old['fwdbwd']['candidate']:.0f} us (fla's "
        f"{old['fwd']['baseline']:.0f} and {old['fwdbwd']['baseline']:.0f})" in readme
    )
    prod = _shape(ideas + "024-fixed-launch/records/20261205T120140Z-e2acc143.json", "prod")
    h = prod["host_us"]
    assert (
        f"costs {h['fwd']['candidate']:.0f} us of host time (fla's {h['fwd']['baseline']:.0f} us) and "
        f"forward+backward through autograd {h['fwdbwd']['candidate']:.0f} us (fla's "
        f"{h['fwdbwd']['baseline']:.0f} us), where a one-kernel torch op costs {h['torch_op']:.1f} us "
        f"({h['torch_op_fwdbwd']:.0f} us with autograd)"
    ) in readme
    assert (
        f"At prod the GPU work ({prod['fwdbwd']['candidate_ms']['median']:.0f} ms) hides" in readme
    )
    neg = _shape(ideas + "014-intra-reg-cap/records/20261204T194602Z-5d0fda72.json", "neg-eigval")
    gpu_ms, host_us = neg["fwd"]["candidate_ms"]["median"], neg["host_us"]["fwd"]["candidate"]
    assert host_us > 1000 * gpu_ms  # the claim: there the host sets the pace
    assert (
        f"014's forward took {gpu_ms:.3f} ms on the GPU and {host_us:.0f} us on the host" in readme
    )


def test_readme_quotes_the_kda_host_cpu_report() -> None:
    """The CPU host-path numbers README and kda/024's NOTES.md quote are the committed
    report's (tools/kda_host_cpu.py)."""
    rep = json.loads((ROOT / "docs" / "results" / "kda-host-cpu-022-024.json").read_text())
    a, b = rep["ideas"]["022"], rep["ideas"]["024"]
    assert (a["autotuned"], b["autotuned"], a["launches"], b["launches"]) == (11, 0, 19, 19)
    readme = " ".join((ROOT / "README.md").read_text().split())
    assert (
        f"falls from {a['fwd_us']:.0f} to {b['fwd_us']:.0f} us per forward and from "
        f"{a['fwdbwd_us']:.0f} to {b['fwdbwd_us']:.0f} us per forward+backward"
    ) in readme
    notes = ROOT / "ladder/kernels/kda/ideas/024-fixed-launch/NOTES.md"
    notes_text = " ".join(notes.read_text().split())
    assert (
        f"{a['fwd_us']:.0f} -> {b['fwd_us']:.0f} us per forward and "
        f"{a['fwdbwd_us']:.0f} -> {b['fwdbwd_us']:.0f} us per forward+backward"
    ) in notes_text
    assert (
        f"the CPU measure's -{a['fwd_us'] - b['fwd_us']:.0f} and -{a['fwdbwd_us'] - b['fwdbwd_us']:.0f} us"
        in notes_text
    )


def test_readme_quotes_the_kda_h100_pair() -> None:
    """The H100 numbers README and the two ideas' NOTES.md quote for kda/024 and kda/022 are
    their records' (one commit, written minutes apart), and the GPU test counts README quotes
    are the committed report's."""
    readme = " ".join((ROOT / "README.md").read_text().split())
    ideas = "ladder/kernels/kda/ideas/"
    r24 = ideas + "024-fixed-launch/records/20261205T120140Z-e2acc143.json"
    r22 = ideas + "022-diag-qg/records/20261205T120341Z-dd4482b7.json"
    recs = [json.loads((ROOT / path).read_text()) for path in (r24, r22)]
    assert [r["idea"] for r in recs] == ["024-fixed-launch", "022-diag-qg"]
    assert {r["device"]["name"] for r in recs} == {"NVIDIA H100 80GB HBM3"}
    assert recs[0]["commit"] == recs[1]["commit"]
    assert recs[0]["knobs"].items() >= recs[1]["knobs"].items()  # 022's knobs, 024's added
    a, b = _shape(r24, "prod"), _shape(r22, "prod")
    ha, hb = a["host_us"], b["host_us"]
    fla_moved = abs(ha["fwd"]["baseline"] - hb["fwd"]["baseline"])
    gain = hb["fwd"]["candidate"] - ha["fwd"]["candidate"]
    assert (
        f"024's device time is 022's (forward+backward through autograd "
        f"{a['fwdbwd']['ratio']:.3f}x and {b['fwdbwd']['ratio']:.3f}x fla there) and its host "
        f"time per forward {ha['fwd']['candidate']:.0f} us against 022's "
        f"{hb['fwd']['candidate']:.0f} us, but fla's own forward host time differs by "
        f"{fla_moved:.0f} us between the two records and forward+backward through autograd did "
        f"not move ({ha['fwdbwd']['candidate']:.0f} against {hb['fwdbwd']['candidate']:.0f} us)"
    ) in readme
    assert (
        f"shows ({a['fwdbwd']['ratio']:.3f}x against 022's {b['fwdbwd']['ratio']:.3f}x through "
        f"autograd, in the same call)"
    ) in readme
    assert f"({ha['fwd']['candidate']:.0f} against {hb['fwd']['candidate']:.0f} us)" in readme
    # the claims: device times within 0.5%; the forward's host gain no larger than fla's own
    # difference; the forward+backward host times within 1%
    ms = [x["fwdbwd"]["candidate_ms"]["median"] for x in (a, b)]
    assert abs(ms[0] / ms[1] - 1) < 0.005
    assert 0 < gain <= fla_moved
    assert abs(ha["fwdbwd"]["candidate"] / hb["fwdbwd"]["candidate"] - 1) < 0.01
    assert (
        f"{b['fwd']['ratio']:.3f}x forward, {b['fwdbwd']['ratio']:.3f}x forward+backward"
    ) in readme
    notes24 = " ".join((ROOT / ideas / "024-fixed-launch" / "NOTES.md").read_text().split())
    pct = [
        100 * (a[d]["candidate_ms"]["median"] / b[d]["candidate_ms"]["median"] - 1)
        for d in ("fwd", "bwd", "fwdbwd")
    ]
    assert (
        f"Forward {a['fwd']['candidate_ms']['median']:.3f} ms (kda/022 "
        f"{b['fwd']['candidate_ms']['median']:.3f}, {pct[0]:+.2f}%), backward "
        f"{a['bwd']['candidate_ms']['median']:.3f} ({b['bwd']['candidate_ms']['median']:.3f}, "
        f"{pct[1]:+.2f}%), forward+backward {a['fwdbwd']['candidate_ms']['median']:.3f} "
        f"({b['fwdbwd']['candidate_ms']['median']:.3f}, {pct[2]:+.2f}%)"
    ) in notes24
    assert f"{gain:.0f} us less" in notes24 and f"differs by {fla_moved:.0f} us" in notes24
    cpu = json.loads((ROOT / "docs" / "results" / "kda-host-cpu-022-024.json").read_text())
    x22 = hb["fwdbwd"]["candidate"] / cpu["ideas"]["022"]["fwdbwd_us"]
    x24 = ha["fwdbwd"]["candidate"] / cpu["ideas"]["024"]["fwdbwd_us"]
    assert f"kda/022's figure is {x22:.1f}x its CPU measure" in notes24
    assert f"kda/024's {x24:.1f}x" in notes24
    notes22 = " ".join((ROOT / ideas / "022-diag-qg" / "NOTES.md").read_text().split())
    err = b["correctness"]["err_ratio"]
    assert max(v for v in err.values() if v is not None) < 1.015 + 5e-4
    assert (
        f"forward {b['fwd']['candidate_ms']['median']:.3f} ms against fla's "
        f"{b['fwd']['baseline_ms']['median']:.3f} ({b['fwd']['ratio']:.3f}x)"
    ) in notes22
    report = (ROOT / "docs" / "results" / "gpu-test-20261205.txt").read_text()
    sections = dict((part.split("\n", 1)[0].strip(), part) for part in report.split("## ")[1:])
    assert "25 passed, 1 skipped" in sections["kda (H100)"]
    assert "59 passed, 8 skipped" in sections["cconv (H100)"]
    assert "4 passed" in sections["common (H100)"]
    assert "4 passed" in sections["layer (H200, alone)"]
    assert "OutOfMemoryError" in sections["layer (H100, beside the other groups)"]
    assert (
        "common 4, kda 25 passed and 1 skipped (two GPUs), cconv 59 passed and 8 skipped, on an "
        "H100 80GB HBM3; layer 4, on an H200"
    ) in readme


def test_readme_quotes_the_kda_bounds_report() -> None:
    """The kda bound paragraph quotes the committed tools/kda_bounds.py report."""
    import re

    readme = " ".join((ROOT / "README.md").read_text().split())
    report = (ROOT / "docs/results/kda-bounds-024-h100-20261206.txt").read_text()
    totals = re.findall(r"this chain's bytes ([0-9.]+) GB, ([0-9.]+) ms at the copy rate", report)
    (fwd_gb, fwd_ms), (bwd_gb, bwd_ms) = totals
    assert f"least {fwd_gb} GB forward and {bwd_gb} GB backward" in readme
    assert f"{fwd_ms} and {bwd_ms} ms at the copy rate" in readme
    best = re.search(r"([0-9.]+)x fla at best", report).group(1)
    assert f"so {best}x fla's forward+backward" in readme
