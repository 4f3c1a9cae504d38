"""Static cost of kda ideas' fused WY backward kernel (or another stage's kernel, --stage) on
sm90, from the compiled code (CPU only).

    python tools/kda_wy_sass.py 004 005 --launch 64,64,4,2 --launch 64,64,4,2,168
    python tools/kda_wy_sass.py 008 --stage fwdho --launch 64,4,1 --launch 32,4,2

For each idea (one with ``wy.kda_bwd_wy_kernel``: kda/004 and later) and each launch
(BK, BV, warps, stages[, maxnreg]; stages is the V loop's, the KDA_WY_STAGES knob, and the
kernel's other loops take Triton's default of 3, as the ideas' wrappers launch it), Triton
compiles the kernel for sm90 at prod's sizes
(H = HV = 16, K 128, V 256, bf16 activations, fp32 gate, dense batch) and Triton's own
`cuobjdump` reads the cubin: registers per thread, stack (spill) bytes per thread, shared
memory per program, the static SASS instruction count (not a dynamic count) and how many
programs of that size fit on one H200 SM (65,536 registers, 227 KB of shared memory, at
most 64 warps).

`--stage intra` compiles the backward intra-chunk kernel of kda/003 (one program per
sub-chunk), kda/013 (one per chunk), kda/014 (kda/003's under a register cap) or kda/018
(kda/003's with its deep diagonal tiles queued; its deep tiles' kernel printed on a
second line) at each BK, warps, stages[, maxnreg], dense batch.
`--stage fwddiag` compiles the forward's diagonal-tile kernel (``intra_fwd.kda_fwd_diag_kernel``)
of kda/012, kda/015 to kda/017, kda/022, kda/023 or kda/027 (022's and 023's: 012's and 017's
writing qg too; 027's: 022's writing kb and kg too) at each BK, warps, stages[, exact_bk] (exact_bk: kda/015's exact path's K step; the
others' kernels have none), dense batch, bf16 q and k.
`--stage fwdho` compiles an idea's ``fwd.chunk_kda_fwd_kernel_h_o`` (kda/008, 019), or kda/027's
``fwd.chunk_kda_fwd_kernel_walk_wu``, at each BV, warps, stages, at the same sizes, with no
initial or final state.
`--stage bwdwalk` compiles kda/028's backward recompute walk (``recompute.kda_bwd_walk_kernel``:
w and u formed in the walk, h, v_new and w stored) at each BV, warps, stages, dense batch, no
initial state.
`--stage fwdh` and `--stage dhu` compile fla 0.6.0's state kernels as an idea launches them at
a fixed BV, warps, stages: the backward's recompute of the chunk states
(``chunk_gated_delta_rule_fwd_kernel_h_blockdim64``, kda/020's ``fwdh.py``) and the state
gradient (``chunk_gated_delta_rule_bwd_kernel_dhu_blockdim64``, kda/006's ``dhu.py``), per-key
gate, no initial or final state.
Without `--launch` each idea compiles at its own knob values (defaults, or the KDA_*
environment).

Pointers carry `tt.divisibility` 16, the alignment Triton's JIT specializes a launch to when
the tensors' addresses are multiples of 16 (torch's allocations are): without it Triton does
not pipeline the V loop into asynchronous copies, so the counts would not be the GPU's.
Exit status: 0 done; 2 an idea without the kernel or no ptxas/cuobjdump in Triton.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import typer

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tools.cconv_sass import _jit, sass_stats  # noqa: E402

POINTERS = dict(q="*bf16", k="*bf16", v="*bf16", v_new="*bf16", g="*fp32", beta="*bf16",
                A="*bf16", h="*bf16", do="*bf16", dh="*bf16", dv="*bf16", dq="*fp32",
                dk="*fp32", dv2="*bf16", dg="*fp32", db="*fp32", dA="*fp32", dA_part="*fp32",
                db_part="*fp32", counter="*i32", cu_seqlens="*i64",
                chunk_indices="*i64")  # fmt: skip
SCALARS = dict(scale="fp32", T="i32", NTG="i32")
FWDHO_POINTERS = dict(q="*bf16", kg="*bf16", w="*bf16", u="*bf16", gk="*fp32", A="*bf16",
                      o="*bf16", h0="*fp32", ht="*fp32", cu_seqlens="*i64")  # fmt: skip
INTRA_POINTERS = dict(q="*bf16", k="*bf16", g="*fp32", beta="*bf16", dAqk="*fp32", dAkk="*fp32",
                      dq="*fp32", dk="*fp32", dg="*fp32", dq2="*fp32", dk2="*fp32", dg2="*fp32",
                      db2="*fp32", cu_seqlens="*i64", chunk_indices="*i64", Count="*i32",
                      Queue="*i32")  # fmt: skip
FWDDIAG_POINTERS = dict(q="*bf16", k="*bf16", g="*fp32", beta="*bf16", Aqk="*bf16",
                        Akkd="*fp32", qg="*bf16", kb="*bf16", kg="*bf16", First="*i32",
                        cu_seqlens="*i64", chunk_indices="*i64")  # fmt: skip
# kda/027's walk, which forms w and u itself from kb, v, beta and the solved A (beta fp32: the
# chain's sigmoid output)
WALK_POINTERS = dict(qg="*bf16", kb="*bf16", kg="*bf16", v="*bf16", beta="*fp32", Akk="*bf16",
                     gk="*fp32", Aqk="*bf16", o="*bf16", h0="*fp32", ht="*fp32",
                     cu_seqlens="*i64")  # fmt: skip
INTRA_KERNELS = {
    "003": "kda_bwd_intra_kernel",
    "013": "kda_bwd_intra_chunk_kernel",
    "014": "kda_bwd_intra_kernel",  # kda/003's kernel, which 014 launches under a register cap
    "018": "kda_bwd_intra_kernel",  # kda/003's, its deep diagonal tiles queued
}
SM_REGS, SM_SMEM, SM_WARPS = 65536, 227 * 1024, 64


def _idea_kernel(idea: str, module: str, name: str):
    """The triton.jit function ``name`` of a kda idea's ``module`` (AttributeError without it)."""
    import ladder  # noqa: F401  (the idea import finder)

    mod = importlib.import_module(f"ladder.kernels.kda.ideas.i{idea.lstrip('i')}.{module}")
    if not hasattr(mod, name):
        raise AttributeError(f"kda idea {idea} has no {module}.{name}")
    return _jit(getattr(mod, name))


def _compile_sm90(fn, pointers: dict, consts: dict, options: dict, scalars: dict | None = None):
    """Triton's compiled ``fn`` for sm90: ``consts`` as constexprs, the other arguments typed
    from ``pointers`` (16-byte aligned, as the JIT specializes them) and SCALARS."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    types = {**pointers, **(SCALARS if scalars is None else scalars)}
    sig = {n: "constexpr" if n in consts else types[n] for n in fn.arg_names}
    attrs = {(fn.arg_names.index(n),): [["tt.divisibility", 16]] for n in pointers}
    src = ASTSource(fn=fn, signature=sig, constexprs=consts, attrs=attrs)
    return triton.compile(src, target=GPUTarget("cuda", 90, 32), options=options)


def compile_wy(idea: str, bk: int, bv: int, warps: int, stages: int, maxnreg: int | None):
    """Triton's compiled WY kernel of a kda idea ("004", "005") for sm90 at prod's sizes."""
    import triton

    fn = _idea_kernel(idea, "wy", "kda_bwd_wy_kernel")
    K, V = 128, 256
    consts = dict(H=16, HV=16, K=K, V=V, BT=64, BK=bk, BV=bv, NK=triton.cdiv(K, bk),
                  IS_VARLEN=False, NUM_STAGES=stages)  # fmt: skip
    # as the ideas' wrappers launch it: num_warps (and maxnreg) only, so Triton's default of 3
    # stages for the kernel's other loops; the knob's stages go to the V loop (NUM_STAGES)
    options = {"num_warps": warps, "num_stages": 3}
    if maxnreg:
        options["maxnreg"] = maxnreg
    return _compile_sm90(fn, POINTERS, consts, options)


def compile_fwdho(idea: str, bv: int, warps: int, stages: int):
    """Triton's compiled fused forward state pass and output of a kda idea (kda/008's, kda/019's
    reading qg [B, T, HV, K] in place of q, or kda/027's forming w and u itself) for sm90 at
    prod's sizes (dense batch, no states), launched as its wrapper launches it."""
    import ladder  # noqa: F401  (the idea import finder)

    mod = importlib.import_module(f"ladder.kernels.kda.ideas.i{idea.lstrip('i')}.fwd")
    if hasattr(mod, "chunk_kda_fwd_kernel_walk_wu"):  # kda/027
        fn = _jit(mod.chunk_kda_fwd_kernel_walk_wu)
        consts = dict(HV=16, K=128, V=256, BT=64, BV=bv, USE_INITIAL_STATE=False,
                      STORE_FINAL_STATE=False, IS_VARLEN=False)  # fmt: skip
        return _compile_sm90(fn, WALK_POINTERS, consts, {"num_warps": warps, "num_stages": stages})
    fn = _idea_kernel(idea, "fwd", "chunk_kda_fwd_kernel_h_o")
    pointers = dict(FWDHO_POINTERS)
    consts = dict(HK=16, HV=16, K=128, V=256, BT=64, BV=bv, USE_INITIAL_STATE=False,
                  STORE_FINAL_STATE=False, IS_VARLEN=False)  # fmt: skip
    if "qg" in fn.arg_names:  # kda/019: qg per value head, no q and so no H
        pointers["qg"] = pointers.pop("q")
    else:
        consts["H"] = 16
    return _compile_sm90(fn, pointers, consts, {"num_warps": warps, "num_stages": stages})


# kda/028's backward recompute: the walk forming w and u (and storing h, v_new and w), and
# the row-wise qg/kb/kg kernel
BWDWALK_POINTERS = dict(kb="*bf16", kg="*bf16", v="*bf16", beta="*fp32", A="*bf16", gk="*fp32",
                        w="*bf16", v_new="*bf16", h="*bf16", h0="*fp32", cu_seqlens="*i64",
                        chunk_offsets="*i64")  # fmt: skip


def compile_bwdwalk(idea: str, bv: int, warps: int, stages: int):
    """Triton's compiled backward recompute walk of a kda idea (kda/028's
    ``recompute.kda_bwd_walk_kernel``) for sm90 at prod's sizes (dense batch, no initial
    state), launched as its wrapper launches it."""
    fn = _idea_kernel(idea, "recompute", "kda_bwd_walk_kernel")
    consts = dict(HV=16, K=128, V=256, BT=64, BV=bv, USE_INITIAL_STATE=False, IS_VARLEN=False)
    return _compile_sm90(fn, BWDWALK_POINTERS, consts, {"num_warps": warps, "num_stages": stages},
                         scalars={"T": "i32"})  # fmt: skip


STATE_KERNELS = {  # stage: (the idea's module, fla's kernel, its pointer arguments)
    "fwdh": ("fwdh", "chunk_gated_delta_rule_fwd_kernel_h_blockdim64",
             dict(k="*bf16", v="*bf16", w="*bf16", v_new="*bf16", gk="*fp32", h="*bf16")),
    "dhu": ("dhu", "chunk_gated_delta_rule_bwd_kernel_dhu_blockdim64",
            dict(q="*bf16", k="*bf16", w="*bf16", gk="*fp32", dht="*fp32", dh0="*fp32",
                 do="*bf16", dh="*bf16", dv="*bf16", dv2="*bf16")),
}  # fmt: skip


def compile_state(idea: str, stage: str, bv: int, warps: int, stages: int):
    """fla 0.6.0's state kernel of ``stage`` ("fwdh": the chunk states' recompute, "dhu": the
    state gradient) compiled for sm90 at prod's sizes as the idea's fixed-launch module
    launches it (kda/020's ``fwdh``, kda/006's ``dhu``): per-key gate, V-first states, dense
    batch, no initial or final state. ModuleNotFoundError for an idea without that module."""
    from fla.ops.common import chunk_delta_h

    import ladder  # noqa: F401  (the idea import finder)

    module, name, pointers = STATE_KERNELS[stage]
    importlib.import_module(f"ladder.kernels.kda.ideas.i{idea.lstrip('i')}.{module}")
    fn = _jit(getattr(chunk_delta_h, name))
    consts = dict(H=16, HV=16, K=128, V=256, BT=64, BV=bv, USE_G=False, USE_GK=True,
                  USE_INITIAL_STATE=False, STATE_V_FIRST=True, IS_VARLEN=False, g=None,
                  cu_seqlens=None, chunk_offsets=None)  # fmt: skip
    if stage == "fwdh":
        consts.update(STORE_FINAL_STATE=False, SAVE_NEW_VALUE=True, h0=None, ht=None)
    else:
        consts.update(USE_FINAL_STATE_GRADIENT=False)
    return _compile_sm90(fn, pointers, consts, {"num_warps": warps, "num_stages": stages},
                         scalars={"scale": "fp32", "T": "i32"})  # fmt: skip


def _intra_consts(bk: int) -> dict:
    """The backward intra kernels' sizes at prod (K 128 in slices of bk), dense batch."""
    return dict(H=16, HV=16, K=128, BT=64, BC=16, BK=bk, NC=4, NK=-(-128 // bk), IS_VARLEN=False)


def compile_intra(idea: str, bk: int, warps: int, stages: int, maxnreg: int | None = None):
    """Triton's compiled backward intra-chunk kernel of a kda idea (kda/003's per sub-chunk,
    kda/013's per chunk, kda/014's kda/003 kernel under a register cap, kda/018's) for sm90
    at prod's sizes, dense batch, launched as its wrapper does (maxnreg: the cap, None for
    none)."""
    name = INTRA_KERNELS.get(idea.lstrip("i"))
    if name is None:
        raise AttributeError(f"kda idea {idea}: --stage intra knows {', '.join(INTRA_KERNELS)}")
    fn = _idea_kernel(idea, "intra", name)
    consts = dict(_intra_consts(bk), DIAG_RANGE=128.0)
    options = {"num_warps": warps, "num_stages": stages}
    if maxnreg:
        options["maxnreg"] = maxnreg
    pointers = {n: t for n, t in INTRA_POINTERS.items() if n in fn.arg_names}
    return _compile_sm90(fn, pointers, consts, options, scalars=dict(T="i32", NTOK="i32"))


def compile_intra_deep(idea: str, bk: int, warps: int):
    """Triton's compiled deep-tile kernel of a kda idea's backward intra stage (kda/018's
    ``kda_bwd_intra_deep_kernel``, its second launch) for sm90 at prod's sizes, dense batch;
    AttributeError for an idea without one."""
    import ladder  # noqa: F401  (the idea import finder)

    fn = _idea_kernel(idea, "intra", "kda_bwd_intra_deep_kernel")
    mod = importlib.import_module(f"ladder.kernels.kda.ideas.i{idea.lstrip('i')}.intra")
    consts = dict(_intra_consts(bk), SEG=mod.SEG, RISE=mod.RISE)
    pointers = {n: t for n, t in INTRA_POINTERS.items() if n in fn.arg_names}
    return _compile_sm90(fn, pointers, consts, {"num_warps": warps, "num_stages": 2},
                         scalars=dict(T="i32", NTOK="i32", NBH="i32"))  # fmt: skip


def compile_fwddiag(idea: str, bk: int, warps: int, stages: int, exact_bk: int | None = None):
    """Triton's compiled forward diagonal-tile kernel of a kda idea (kda/012, 015 to 017, 022, 023,
    027) for sm90 at prod's sizes, dense batch, launched as its wrapper does; exact_bk (kda/015's
    exact path's K step) defaults to the idea's knob and is refused for a kernel without one."""
    import ladder  # noqa: F401  (the idea import finder)

    fn = _idea_kernel(idea, "intra_fwd", "kda_fwd_diag_kernel")
    mod = importlib.import_module(f"ladder.kernels.kda.ideas.i{idea.lstrip('i')}.intra_fwd")
    consts = dict(H=16, HV=16, K=128, BK=bk, BT=64, BC=16, LIMIT=mod.LIMIT, IS_VARLEN=False)
    if "RISE" in fn.arg_names:  # kda/017's segments' bound on a rise
        consts["RISE"] = mod.RISE
    if "EXACT_BK" in fn.arg_names:
        consts["EXACT_BK"] = exact_bk or mod.EXACT_BK
    elif exact_bk:
        raise AttributeError(f"kda idea {idea}'s diagonal kernel has no exact_bk")
    options = {"num_warps": warps, "num_stages": stages}
    pointers = {n: t for n, t in FWDDIAG_POINTERS.items() if n in fn.arg_names}
    return _compile_sm90(fn, pointers, consts, options, scalars=dict(scale="fp32", T="i32"))


def knob_problem(name: str, n: int, dot: bool = True, top: int | None = None) -> str | None:
    """What is wrong with one launch knob (None if nothing), by its name: a tile (BK, BV,
    exact_bk) a power of two, at least 16 when ``dot`` (tl.dot's least K); warps (any name
    ending so) a power of two up to 32 (1024 threads); stages positive; maxnreg 32..255;
    any of them at most ``top`` when given. kda_stage_bench's launches share these rules."""
    if name == "maxnreg":
        return None if 32 <= n <= 255 else f"maxnreg {n} is not in 32..255 (leave it out for none)"
    if n < 1:
        return f"{name} {n} is not positive"
    if name != "stages" and n & (n - 1):
        return f"{name} {n} is not a power of two"
    if name.endswith("warps") and n > 32:
        return f"{name} {n} is past 32 (1024 threads)"
    if name in ("BK", "BV") and dot and n < 16:
        return f"{name} {n} is below 16 (tl.dot's least K)"
    if top is not None and n > top:
        return f"{name} {n} is past {top}"
    return None


def launch_problem(stage: str, parts: list[int]) -> str | None:
    """What is wrong with a --launch for the stage (None if nothing): ``knob_problem`` for
    each field, the tiles at most the prod size they slice (K 128, V 256)."""
    names = {"wy": ("BK", "BV", "warps", "stages", "maxnreg"),
             "intra": ("BK", "warps", "stages", "maxnreg"),
             "fwddiag": ("BK", "warps", "stages", "exact_bk")}.get(stage, ("BV", "warps", "stages"))  # fmt: skip
    top = {"BK": 128, "BV": 256, "exact_bk": 128}
    for name, n in zip(names, parts):
        problem = knob_problem(name, n, top=top.get(name))
        if problem:
            return problem
    return None


def resident(regs: int, smem: int, warps: int) -> int:
    """Programs of this size that fit on one H200 SM at once (registers are allocated per
    warp in units of 256)."""
    per_warp = -(-regs * 32 // 256) * 256
    return min(SM_REGS // (per_warp * warps), SM_SMEM // max(smem, 1), SM_WARPS // warps)


def idea_launch(idea: str, stage: str) -> list[int]:
    """The launch an idea's module reads from its knobs (defaults or the KDA_* environment):
    wy [BK, BV, warps, stages] plus maxnreg when the idea caps it; intra [BK, warps, stages]
    plus maxnreg likewise; fwdho, fwdh, dhu, bwdwalk [BV, warps, stages]; fwddiag [BK, warps, stages] plus exact_bk
    when the idea has one."""
    import ladder  # noqa: F401  (the idea import finder)

    module = {"wy": "wy", "intra": "intra", "fwddiag": "intra_fwd", "fwdh": "fwdh",
              "dhu": "dhu", "bwdwalk": "recompute"}.get(stage, "fwd")  # fmt: skip
    mod = importlib.import_module(f"ladder.kernels.kda.ideas.i{idea.lstrip('i')}.{module}")
    if stage in ("fwdho", "fwdh", "dhu", "bwdwalk"):
        return [mod.BV, mod.NUM_WARPS, mod.NUM_STAGES]
    if stage == "fwddiag":  # exact_bk when the diagonal kernel itself takes it (kda/015)
        takes = "EXACT_BK" in _jit(mod.kda_fwd_diag_kernel).arg_names
        exact = getattr(mod, "EXACT_BK", 0) if takes else 0
        return [mod.BK, mod.NUM_WARPS, mod.NUM_STAGES, *([exact] if exact else [])]
    cap = getattr(mod, "MAXNREG", 0)
    tiles = [mod.BK, mod.BV] if stage == "wy" else [mod.BK]
    return [*tiles, mod.NUM_WARPS, mod.NUM_STAGES, *([cap] if cap else [])]


def main(
    ideas: list[str] = typer.Argument(..., help="kda idea numbers, e.g. 004 005"),
    launch: list[str] = typer.Option(
        None,
        help="wy: BK,BV,warps,stages[,maxnreg]; fwdho, fwdh, dhu, bwdwalk: BV,warps,stages; "
        "intra: BK,warps,stages[,maxnreg]; fwddiag: BK,warps,stages[,exact_bk] (repeatable)",
    ),
    stage: str = typer.Option(
        "wy",
        help="wy (the fused WY backward), fwdho (kda/008, 019, 027), intra (kda/003, 013, 014, "
        "018), fwddiag (kda/012, 015 to 017, 022, 023, 027), fwdh (kda/020), dhu (kda/006) or "
        "bwdwalk (kda/028)",
    ),
) -> None:
    """Print registers, stack, shared memory, static SASS count and programs per SM, at each
    --launch, or without one at each idea's own knob values."""
    if stage not in ("wy", "fwdho", "intra", "fwddiag", "fwdh", "dhu", "bwdwalk"):
        raise typer.BadParameter(
            f"--stage {stage!r}: wy, fwdho, intra, fwddiag, fwdh, dhu or bwdwalk"
        )
    form, counts = {"wy": ("BK,BV,warps,stages[,maxnreg]", (4, 5)),
                    "intra": ("BK,warps,stages[,maxnreg]", (3, 4)),
                    "fwddiag": ("BK,warps,stages[,exact_bk]", (3, 4))}.get(stage, ("BV,warps,stages", (3,)))  # fmt: skip
    try:
        for spec in launch or [None]:  # no --launch: each idea at its own knob values
            given = None
            if spec is not None:
                try:
                    given = [int(p) for p in spec.split(",")]
                except ValueError:
                    given = []
                if len(given) not in counts:
                    raise typer.BadParameter(f"--launch {spec!r}: {form}")
                problem = launch_problem(stage, given)
                if problem:
                    raise typer.BadParameter(f"--launch {spec!r}: {problem}")
            for idea in ideas:
                parts = given or idea_launch(idea, stage)
                problem = None if given else launch_problem(stage, parts)
                if problem:  # the idea's knobs, from its KDA_* environment
                    raise typer.BadParameter(
                        f"kda idea {idea}'s own launch {','.join(map(str, parts))} "
                        f"(its KDA_* knobs): {problem}"
                    )
                if stage == "wy":
                    bk, bv, warps, stages = parts[:4]
                    maxnreg = parts[4] if len(parts) == 5 else None
                    k = compile_wy(idea, bk, bv, warps, stages, maxnreg)
                    what = f"BK {bk} BV {bv} warps {warps} stages {stages} maxnreg {maxnreg or '-'}"
                elif stage == "intra":
                    bk, warps, stages = parts[:3]
                    maxnreg = parts[3] if len(parts) == 4 else None
                    k = compile_intra(idea, bk, warps, stages, maxnreg)
                    what = f"BK {bk} warps {warps} stages {stages} maxnreg {maxnreg or '-'}"
                elif stage == "fwddiag":
                    bk, warps, stages = parts[:3]
                    own = idea_launch(idea, "fwddiag")  # the idea's exact_bk, if it has one
                    exact_bk = parts[3] if len(parts) == 4 else (own[3] if len(own) == 4 else None)
                    k = compile_fwddiag(idea, bk, warps, stages, exact_bk)
                    what = f"BK {bk} warps {warps} stages {stages} exact_bk {exact_bk or '-'}"
                else:
                    bv, warps, stages = parts
                    if stage == "fwdho":
                        k = compile_fwdho(idea, bv, warps, stages)
                    elif stage == "bwdwalk":
                        k = compile_bwdwalk(idea, bv, warps, stages)
                    else:
                        k = compile_state(idea, stage, bv, warps, stages)
                    what = f"BV {bv} warps {warps} stages {stages}"
                kernels = [(what, k, warps)]
                mod = (importlib.import_module(f"ladder.kernels.kda.ideas.i{idea.lstrip('i')}.intra")
                       if stage == "intra" else None)  # fmt: skip
                if hasattr(mod, "kda_bwd_intra_deep_kernel"):
                    # the deep tiles' second launch (kda/018), at its own warps
                    deep = (f"deep tiles' kernel BK {bk} warps {mod.DEEP_WARPS}",
                            compile_intra_deep(idea, bk, mod.DEEP_WARPS), mod.DEEP_WARPS)  # fmt: skip
                    kernels.append(deep)
                for label, kern, nw in kernels:
                    s = sass_stats(kern.asm["cubin"])
                    smem = kern.metadata.shared
                    typer.echo(
                        f"{idea} {label}: regs {s['regs']} stack {s['stack']} smem "
                        f"{smem / 1024:.1f} KiB instrs {s['instrs']} (memory {s['mem']}); "
                        f"{resident(s['regs'], smem, nw)} per SM"
                    )
    except ModuleNotFoundError as exc:
        typer.echo(f"kda_wy_sass: that idea has no module for --stage {stage} ({exc})", err=True)
        raise typer.Exit(2) from None
    except (AttributeError, FileNotFoundError) as exc:
        typer.echo(f"kda_wy_sass: {exc}", err=True)
        raise typer.Exit(2) from None
    except ValueError as exc:  # an idea module's KDA_* knob that is not an int, read at import
        typer.echo(f"kda_wy_sass: {exc} (check the KDA_* environment)", err=True)
        raise typer.Exit(2) from None
    except Exception as exc:  # Triton's compile and ptxas errors: their last line says why
        if type(exc).__name__ not in ("CompilationError", "PTXASError"):
            raise
        why = str(exc).strip().splitlines()[-1]
        typer.echo(f"kda_wy_sass: does not compile ({type(exc).__name__}: {why})", err=True)
        raise typer.Exit(2) from None


if __name__ == "__main__":
    typer.run(main)
