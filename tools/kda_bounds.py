"""How far each kernel of a kda chain is from the bound of its own memory traffic, and what
the chain's structure allows at best.

    python tools/kda_bounds.py docs/results/profile-kda-024-h100-20261206.json \\
        --record ladder/kernels/kda/ideas/024-fixed-launch/records/20261205T120140Z-e2acc143.json \\
        [--out out/kda-bounds.txt]

Reads a per-kernel profile (``python -m ladder.profile kda <idea> --json``: each kernel's
device milliseconds per call and launches) and, for every kernel of the chain this tool
knows, the bytes it must move at the profile's shape: each tensor it reads once and each it
writes once (``SPECS``; what a kernel re-reads from L2 or HBM on top of that is not
counted, so these are lower bounds of the kernel as built, with its inputs and outputs), and
the matrix-product FLOPs it does (2 M N K per product, the small triangular solves left
out). It prints per kernel and direction: milliseconds, GB, the rate it reached as a
fraction of the copy rate, the milliseconds its bytes take at the copy rate, and its time
over that bound. Below them, three totals per direction: the chain as profiled, the chain's
bytes at the copy rate (the best any kernel-by-kernel tuning of this chain can reach: each
stage's intermediates still go through HBM), and the fused bound (``family.min_bytes``:
inputs read once, outputs written once, nothing else) at the copy rate; with fla's times
from ``--record`` (its prod shape, same device), the target of a given speed-up.

The copy rate is the record's ``copy_ceiling_TBps`` (a 1 GiB device-to-device copy timed in
the bench's run: read and written bytes over its time), or ``--copy-TBps``. A kernel that
reads far more than it writes can run above it (the H100's HBM3 reads faster than it copies).
The FLOP column shows that no kernel here is bound by its products: at the H200's dense bf16
rate of about 790 TFLOP/s (the device README's figure; the H100 SXM has the same SMs and
clocks) the largest, the WY backward's, takes under 1 ms at prod.

Kernels of torch itself (fills, reductions, elementwise adds) are listed with their time and
not modelled. A kernel name in the profile that is neither in ``SPECS`` nor torch's is an
error (exit 2): the table would otherwise leave time out silently. Exit 2 also for an
unreadable profile or record, a shape the family does not have, or an --out that cannot be
written.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CHUNK = 64  # the chain's chunk size (tokens)
SUB = 16  # its sub-chunk size
INTRA_BK = 32  # the backward intra stage's K slice (its partial dbeta per slice)
TORCH_PREFIXES = ("void at::native::", "void at::", "Memset", "Memcpy")

__all__ = ["IDEA_SPECS", "SPECS", "Spec", "bounds", "main", "render", "specs_for", "tensor_bytes"]


@dataclass(frozen=True)
class Spec:
    """One kernel's traffic and products: ``reads`` / ``writes`` name tensors of
    ``tensor_bytes`` (a name may carry a fraction, ``("Aqk", 6 / 16)``: the part written);
    ``flops(K, V)`` the matrix-product FLOPs per chunk and value head."""

    reads: tuple
    writes: tuple
    flops: object = None  # callable (K, V) -> float, or None for none
    note: str = ""


def _f(*terms):
    return lambda K, V: float(sum(t(K, V) for t in terms))


def _mm(m, n, k):
    """2 m n k, with m, n, k ints or 'K' / 'V'."""

    def f(K, V):
        d = {"K": K, "V": V}
        return 2.0 * d.get(m, m) * d.get(n, n) * d.get(k, k)

    return f


C, S = CHUNK, SUB
# The chain of kda/022-025 (fla's kernels at fixed launches where it keeps them), by direction
# and kernel name. Tensor names: tensor_bytes' docstring.
SPECS: dict[tuple[str, str], Spec] = {
    ("fwd", "l2norm_fwd_kernel"): Spec(("q", "k"), ("qn", "kn", "rstd", "rstd"), note="q and k"),
    ("fwd", "fused_beta_sigmoid_fwd_kernel"): Spec(("beta",), ("beta_s",)),
    ("fwd", "kda_gate_chunk_cumsum_vector_kernel"): Spec(("g_in",), ("gc",)),
    ("fwd", "kda_fwd_diag_kernel"): Spec(
        ("qn", "kn", "gc", "beta_s"),
        (("Aqk", S / C), "Akkd", "qg"),
        _f(
            _mm(S, S, "K"),
            _mm(S, S, "K"),
            _mm(S, S, "K"),
            _mm(S, S, "K"),
            _mm(S, S, "K"),
            _mm(S, S, "K"),
            _mm(S, S, "K"),
            _mm(S, S, "K"),
        ),  # fmt: skip
        "diagonal 16x16 tiles of Aqk and Akk",
    ),
    ("fwd", "chunk_kda_fwd_kernel_inter_solve_fused"): Spec(
        ("qn", "kn", "gc", "beta_s", "Akkd"),
        (("Aqk", 6 / 16), ("Akk", 10 / 16)),
        lambda K, V: 2 * 6 * 2.0 * S * S * K,
        "off-diagonal tiles, then the solve",
    ),
    ("fwd", "recompute_w_u_fwd_kda_kernel"): Spec(
        ("kn", "v", "beta_s", "Akk", "gc"), ("w", "u", "kg"), _f(_mm(C, C, "K"), _mm(C, C, "V"))
    ),
    ("fwd", "chunk_kda_fwd_kernel_h_o"): Spec(
        ("qg", "kg", "w", "u", "g_last", "Aqk", "h0"),
        ("o", "ht"),
        _f(_mm(C, "V", "K"), _mm(C, "V", "K"), _mm("K", "V", C), _mm(C, "V", C)),
        "state walk with the output",
    ),
    ("bwd", "kda_gate_chunk_cumsum_vector_kernel"): Spec(("g_in",), ("gc",)),
    ("bwd", "recompute_w_u_fwd_kda_kernel"): Spec(
        ("qn", "kn", "v", "beta_s", "Akk", "gc"),
        ("w", "u", "qg", "kg"),
        _f(_mm(C, C, "K"), _mm(C, C, "V")),
        "with q: qg too",
    ),
    ("bwd", "chunk_gated_delta_rule_fwd_kernel_h_blockdim64"): Spec(
        ("kg", "w", "u", "g_last", "h0"), ("h", "v_new"), _f(_mm(C, "V", "K"), _mm("K", "V", C))
    ),
    ("bwd", "chunk_kda_bwd_kernel_dAv"): Spec(
        ("do", "v_new", "Aqk"), ("dAqk", "dv"), _f(_mm(C, C, "V"), _mm(C, "V", C))
    ),
    ("bwd", "chunk_gated_delta_rule_bwd_kernel_dhu_blockdim64"): Spec(
        ("qg", "kg", "w", "do", "dv", "g_last", "dht"),
        ("dh", "dv", "dh0"),
        _f(_mm(C, "V", "K"), _mm("K", "V", C), _mm("K", "V", C)),
    ),
    ("bwd", "kda_bwd_wy_kernel"): Spec(
        ("qn", "kn", "v", "v_new", "do", "dv", "gc", "beta_s", "Akk", "h", "dh"),
        ("dq", "dk", "dg", "dv", "db", "dAkk"),
        _f(
            _mm(C, "K", "V"),
            _mm(C, "K", "V"),
            _mm(C, "K", "V"),
            _mm(C, C, "K"),
            _mm(C, "K", C),
            _mm(C, C, "V"),
            _mm(C, "V", C),
            _mm(C, C, C),
            _mm(C, C, C),
        ),  # fmt: skip
    ),
    ("bwd", "kda_bwd_intra_kernel"): Spec(
        ("qn", "kn", "gc", "beta_s", "dAqk", "dAkk", "dq", "dk", "dg"),
        ("dq", "dk", "dg", "db_parts"),
        lambda K, V: (6 * 4 + 4 * 4) * 2.0 * S * S * K,
        "16-token sub-chunk pairs and diagonal tiles",
    ),
    ("bwd", "kda_gate_tail_bwd_kernel"): Spec(("dg", "g_in"), ("dg_out", "dbias_parts")),
    ("bwd", "l2norm_bwd_kernel"): Spec(
        ("qn", "kn", "rstd", "rstd", "dq_h", "dk_h"), ("dq_out", "dk_out"), note="q and k"
    ),
    ("bwd", "fused_beta_sigmoid_bwd_kernel"): Spec(("beta", "db"), ("dbeta",)),
}


_WALK27 = {  # kda/027's forward: the diagonal kernel also writes kb and kg; the walk forms w, u
    ("fwd", "kda_fwd_diag_kernel"): Spec(
        ("qn", "kn", "gc", "beta_s"),
        (("Aqk", S / C), "Akkd", "qg", "kb", "kg"),
        SPECS[("fwd", "kda_fwd_diag_kernel")].flops,
        "diagonal 16x16 tiles; qg, kb and kg",
    ),
    ("fwd", "chunk_kda_fwd_kernel_walk_wu"): Spec(
        ("qg", "kg", "kb", "v", "beta_s", "Akk", "Aqk", "g_last", "h0"),
        ("o", "ht"),
        _f(
            _mm(C, "K", C),
            _mm(C, "V", C),
            _mm(C, "V", "K"),
            _mm(C, "V", "K"),
            _mm("K", "V", C),
            _mm(C, "V", C),
        ),  # fmt: skip
        "state walk forming w and u, with the output (w counted once)",
    ),
}
_WALK28 = {  # kda/028's backward recompute: a row-wise kernel and a walk forming w and u
    ("bwd", "kda_bwd_qkg_kernel"): Spec(("qn", "kn", "beta_s", "gc"), ("qg", "kb", "kg")),
    ("bwd", "kda_bwd_walk_kernel"): Spec(
        ("kb", "kg", "v", "beta_s", "Akk", "g_last", "h0"),
        ("w", "h", "v_new"),
        _f(_mm(C, "K", C), _mm(C, "V", C), _mm(C, "V", "K"), _mm("K", "V", C)),
        "state walk forming w and u (w counted once)",
    ),
}
# Ideas whose chains launch kernels SPECS does not describe (or describes otherwise), by
# idea number: their specs take precedence.
IDEA_SPECS: dict[str, dict[tuple[str, str], Spec]] = {"027": _WALK27, "028": {**_WALK27, **_WALK28}}


def specs_for(idea: str) -> dict[tuple[str, str], Spec]:
    """SPECS with the overrides of ``idea`` (a folder name or number, e.g. '027-walk-wu')."""
    return {**SPECS, **IDEA_SPECS.get(idea[:3], {})}


def tensor_bytes(shape) -> dict[str, int]:
    """Bytes of each tensor the chain passes between its kernels at ``shape`` (a kda
    ``family.Shape``; es = its dtype's size; N tokens; NC chunks, per sequence rounded up):
    q, k, qn, kn, dq_out, dk_out [N, H, K] es; rstd [N, H] fp32; v, u, v_new, do, dv, o
    [N, HV, V] es; g_in, qg, kg, kb, w, dg_out [N, HV, K] es; gc, dq, dk, dg [N, HV, K] fp32;
    dq_h, dk_h [N, H, K] fp32 (after the GVA sum); g_last [NC, HV, K] fp32; beta, dbeta
    [N, HV] es; beta_s (fla's sigmoid, fp32), db [N, HV] fp32; db_parts [K / 32, N, HV] fp32; Aqk, Akk [N, HV, 64] es;
    Akkd [N, HV, 16] fp32; dAqk, dAkk [N, HV, 64] fp32; h, dh [NC, HV, V, K] es; h0, ht, dh0,
    dht [seqs, HV, V, K] fp32 where the shape has states, else 0; dbias_parts [NC, HV, K]
    fp32."""
    import torch

    es = torch.empty((), dtype=getattr(torch, shape.dtype)).element_size()
    lengths = shape.lengths if shape.lengths is not None else (shape.T,) * shape.B
    N = sum(lengths)
    NC = sum(math.ceil(n / CHUNK) for n in lengths)
    H, HV, K, V = shape.H, shape.HV, shape.K, shape.V
    qk, vs, gk, st = N * H * K, N * HV * V, N * HV * K, NC * HV * K * V
    state = 4 * len(lengths) * HV * K * V if shape.state else 0
    t = {}
    for n in ("q", "k", "qn", "kn", "dq_out", "dk_out"):
        t[n] = es * qk
    for n in ("v", "u", "v_new", "do", "dv", "o"):
        t[n] = es * vs
    for n in ("g_in", "qg", "kg", "kb", "w", "dg_out"):
        t[n] = es * gk
    for n in ("gc", "dq", "dk", "dg"):
        t[n] = 4 * gk
    t["dq_h"] = t["dk_h"] = 4 * qk
    t["rstd"] = 4 * N * H
    t["g_last"] = 4 * NC * HV * K
    t["beta"] = t["dbeta"] = es * N * HV
    t["beta_s"] = t["db"] = 4 * N * HV
    t["db_parts"] = 4 * math.ceil(K / INTRA_BK) * N * HV
    t["Aqk"] = t["Akk"] = es * N * HV * CHUNK
    t["Akkd"] = 4 * N * HV * SUB
    t["dAqk"] = t["dAkk"] = 4 * N * HV * CHUNK
    t["h"] = t["dh"] = es * st
    for n in ("h0", "ht", "dh0", "dht"):
        t[n] = state
    t["dbias_parts"] = 4 * NC * HV * K
    return t


def _sum(names, sizes) -> float:
    total = 0.0
    for n in names:
        name, part = (n, 1.0) if isinstance(n, str) else n
        total += sizes[name] * part
    return total


def bounds(profile: dict, shape, copy_TBps: float) -> dict:
    """Per direction of ``profile`` (ladder.profile's JSON): rows (kernel, ms, launches, GB,
    TB/s, fraction of the copy rate, ms at the copy rate, time over it, GFLOP; None where
    not modelled) and totals. Raises KeyError naming a kernel neither in SPECS nor torch's."""
    sizes = tensor_bytes(shape)
    specs = specs_for(str(profile.get("idea", "")))
    lengths = shape.lengths if shape.lengths is not None else (shape.T,) * shape.B
    chunk_heads = sum(math.ceil(n / CHUNK) for n in lengths) * shape.HV
    out = {}
    for direction, d in profile["directions"].items():
        rows, total_ms, model_gb = [], 0.0, 0.0
        for kern in d["kernels"]:
            name, ms = kern["kernel"], kern["ms"]
            total_ms += ms
            spec = specs.get((direction, name))
            row = {"kernel": name, "ms": ms, "launches": kern.get("launches")}
            if spec is None:
                if not name.startswith(TORCH_PREFIXES):
                    raise KeyError(
                        f"{direction} kernel {name!r} has no entry in SPECS or IDEA_SPECS"
                    )
                row.update(gb=None, torch=True)
                rows.append(row)
                continue
            gb = (_sum(spec.reads, sizes) + _sum(spec.writes, sizes)) / 1e9
            bound_ms = gb / copy_TBps  # GB / (TB/s) = ms
            model_gb += gb
            row.update(
                gb=gb,
                TBps=gb / ms,
                of_copy=gb / ms / copy_TBps,
                bound_ms=bound_ms,
                over=ms / bound_ms,
                gflop=(spec.flops(shape.K, shape.V) * chunk_heads / 1e9) if spec.flops else 0.0,
                note=spec.note,
            )
            rows.append(row)
        out[direction] = {
            "rows": rows,
            "kernel_ms": total_ms,
            "chain_gb": model_gb,
            "chain_bound_ms": model_gb / copy_TBps,
        }
    return out


def render(result: dict, *, profile: dict, shape, copy_TBps: float, fla_ms: dict | None,
           speedup: float, sources: str = "") -> str:  # fmt: skip
    """The report as text (module docstring)."""
    from ladder.kernels.kda import family

    lines = [
        f"# {profile.get('family', 'kda')}/{profile.get('idea', '?')} at {shape.name} "
        f"(B{shape.B} T{shape.T} H{shape.H} HV{shape.HV} K{shape.K} V{shape.V} {shape.dtype}) "
        f"on {profile.get('device', '?')}; copy rate {copy_TBps:.3f} TB/s",
        "# bytes: each tensor a kernel reads or writes, once (tools/kda_bounds.py SPECS); "
        "bound: those bytes at the copy rate",
    ]
    if sources:
        lines.insert(1, f"# from {sources}")
    for direction, r in result.items():
        lines.append("")
        lines.append(
            f"{direction}: {'ms':>7} {'GB':>6} {'TB/s':>5} {'copy':>5} {'bound':>6} {'over':>5} "
            f"{'GFLOP':>6}  kernel"
        )
        for row in sorted(r["rows"], key=lambda x: -x["ms"]):
            if row["gb"] is None:
                lines.append(f"     {row['ms']:7.3f} {'':>6} {'':>5} {'':>5} {'':>6} {'':>5} "
                             f"{'':>6}  {row['kernel'][:60]} (torch's, not modelled)")  # fmt: skip
                continue
            lines.append(
                f"     {row['ms']:7.3f} {row['gb']:6.2f} {row['TBps']:5.2f} "
                f"{row['of_copy']:5.0%} {row['bound_ms']:6.3f} {row['over']:5.2f} "
                f"{row['gflop']:6.0f}  {row['kernel']}"
                + (f" x{row['launches']:g}" if row.get("launches", 1) not in (None, 1) else "")
                + (f" ({row['note']})" if row["note"] else "")
            )
        fused_gb = family.min_bytes(shape, direction) / 1e9
        lines.append(
            f"  kernels {r['kernel_ms']:.3f} ms; this chain's bytes {r['chain_gb']:.2f} GB, "
            f"{r['chain_bound_ms']:.3f} ms at the copy rate; fused bound {fused_gb:.2f} GB, "
            f"{fused_gb / copy_TBps:.3f} ms"
        )
    if fla_ms:
        fwd, bwd = fla_ms["fwd"], fla_ms["bwd"]
        chain = sum(r["chain_bound_ms"] for r in result.values())
        lines.append("")
        lines.append(
            f"fla in the record: fwd {fwd:.3f} ms, bwd {bwd:.3f} ms, fwd+bwd {fwd + bwd:.3f} ms; "
            f"{speedup:g}x that is {(fwd + bwd) / speedup:.3f} ms fwd+bwd "
            f"({fwd / speedup:.3f} ms fwd). This chain's bytes at the copy rate: {chain:.3f} ms "
            f"fwd+bwd, {(fwd + bwd) / chain:.2f}x fla at best."
        )
    return "\n".join(lines) + "\n"


def _load(path: Path, what: str) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise SystemExit(f"kda_bounds: cannot read the {what} {path}: {e}") from None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("profile", type=Path, help="ladder.profile --json output of a kda idea")
    ap.add_argument("--record", type=Path, help="a kda bench record: copy rate and fla's times")
    ap.add_argument("--copy-TBps", type=float, help="the copy rate (default: the record's)")
    ap.add_argument("--shape", help="the family's shape name (default: the profile's)")
    ap.add_argument("--speedup", type=float, default=3.0, help="target over fla (default 3)")
    ap.add_argument("--out", type=Path, help="also write the report here")
    a = ap.parse_args(argv)
    sys.path[:0] = [str(ROOT), str(Path(__file__).resolve().parent)]
    from outpath import out_problem, write_report

    from ladder.kernels.kda import family

    if a.out is not None and (why := out_problem(a.out, "kda-bounds.txt")):
        ap.exit(2, f"kda_bounds: {why}\n")
    try:
        profile = _load(a.profile, "profile")
        record = _load(a.record, "record") if a.record else None
    except SystemExit as e:
        ap.exit(2, f"{e}\n")
    if not isinstance(profile, dict) or "directions" not in profile:
        ap.exit(
            2, f"kda_bounds: {a.profile} is not a ladder.profile --json report (no 'directions')\n"
        )
    name = a.shape or profile.get("shape")
    shapes = {s.name: s for group in family.SHAPES.values() for s in group}
    if name not in shapes:
        ap.exit(2, f"kda_bounds: shape {name!r} is not one of the family's: {', '.join(shapes)}\n")
    shape = shapes[name]
    copy = a.copy_TBps or (record or {}).get("copy_ceiling_TBps")
    if not copy or copy <= 0:
        ap.exit(
            2, "kda_bounds: give --record (a bench record with copy_ceiling_TBps) or --copy-TBps\n"
        )
    fla_ms = None
    if record is not None:
        rec = next((s for s in record.get("shapes", []) if s.get("name") == name), None)
        if rec is None or "fwd" not in rec or "baseline_ms" not in rec["fwd"]:
            ap.exit(2, f"kda_bounds: the record {a.record} has no timed shape {name!r}\n")
        if record.get("device", {}).get("name") != profile.get("device"):
            print(
                f"kda_bounds: the record's device ({record.get('device', {}).get('name')}) is "
                f"not the profile's ({profile.get('device')})",
                file=sys.stderr,
            )
        fla_ms = {d: rec[d]["baseline_ms"]["median"] for d in ("fwd", "bwd")}
    try:
        result = bounds(profile, shape, copy)
    except KeyError as e:
        ap.exit(2, f"kda_bounds: {e.args[0]}: add it to SPECS with its reads and writes\n")
    sources = f"profile {a.profile.name}" + (
        f", record {record.get('record_id')}" if record else ""
    )
    text = render(result, profile=profile, shape=shape, copy_TBps=copy, fla_ms=fla_ms,
                  speedup=a.speedup, sources=sources)  # fmt: skip
    print(text, end="")
    if a.out is not None:
        write_report(a.out, text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
