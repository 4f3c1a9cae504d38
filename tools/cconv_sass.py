"""Static cost of cconv ideas' dense kernels on sm90, from the compiled code (CPU only).

    python tools/cconv_sass.py 001 003 004            (any machine with Triton; no GPU)

For each idea, Triton compiles its `cconv_fwd_kernel` and `cconv_bwd_kernel` for sm90 at
the prod-like configuration (W 4, bf16 x, fp32 w, fast sigmoid, EVEN_T, no channel mask;
BD = 128 x warps, G rows per step) and Triton's own `cuobjdump` reads the cubin: registers
per thread, stack (spill) bytes, and the whole kernel's static SASS instruction count (the
loop, prologue, halo and epilogue together, not a dynamic count) with its MUFU, FP32 and
memory instructions. The signature is the one a launch specializes to, except that no
pointer carries a divisibility hint: pointers are `*bf16` / `*fp32`, sizes and row strides
i32 (batch strides i64), the channel strides equal to 1 are constexpr.

ladder/kernels/cconv/ideas/004-exact-sigmoid/NOTES.md quotes its output (4 warps, G 4 and 8).
Exit status: 0 done; 2 an idea without these kernels or no ptxas/cuobjdump in Triton.
"""

from __future__ import annotations

import importlib
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import typer

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

FWD_TYPES = dict(x="*bf16", w="*fp32", y="*bf16", T="i32", D="i32", TS="i32", WORK="i32",
                 sxb="i64", sxt="i32", syb="i64", syt="i32")  # fmt: skip
BWD_TYPES = dict(x="*bf16", w="*fp32", dy="*bf16", dx="*bf16", dwp="*fp32", T="i32", D="i32",
                 TS="i32", NS="i32", WORK="i32", sxb="i64", sxt="i32", sgb="i64", sgt="i32",
                 sdb="i64", sdt="i32")  # fmt: skip
FP32_OPS = ("FFMA", "FMUL", "FADD", "FMNMX", "FSEL", "FSETP")


def _jit(kernel):
    """The triton.jit function under any heuristics or autotuning wrapper."""
    import triton

    while not isinstance(kernel, triton.runtime.jit.JITFunction):
        kernel = kernel.fn
    return kernel


def compile_sm90(fn, types: dict, consts: dict, warps: int, maxnreg: int | None):
    """Triton's compiled kernel of `fn` for sm90 (cubin included)."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    sig = {n: "constexpr" if n in consts else types[n] for n in fn.arg_names}
    src = ASTSource(
        fn=fn, signature=sig, constexprs={(fn.arg_names.index(k),): v for k, v in consts.items()}
    )
    options = {"num_warps": warps, "num_stages": 1}
    if maxnreg:
        options["maxnreg"] = maxnreg
    return triton.compile(src, target=GPUTarget("cuda", 90, 32), options=options)


def sass_stats(cubin: bytes) -> dict[str, int | None]:
    """{regs, stack, instrs, mufu, fp32, mem} of one cubin, read with Triton's cuobjdump."""
    import triton

    tool = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    if not tool.is_file():
        raise FileNotFoundError(f"no cuobjdump in this Triton ({tool})")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "k.cubin"
        path.write_bytes(cubin)
        sass = subprocess.run([tool, "-sass", path], capture_output=True, text=True, check=True)
        res = subprocess.run([tool, "-res-usage", path], capture_output=True, text=True, check=True)
    ops = re.findall(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z0-9_]+)", sass.stdout)
    regs = re.search(r"REG:(\d+)", res.stdout)
    stack = re.search(r"STACK:(\d+)", res.stdout)
    return {
        "regs": int(regs.group(1)) if regs else None,
        "stack": int(stack.group(1)) if stack else None,
        "instrs": len(ops),
        "mufu": sum(op == "MUFU" for op in ops),
        "fp32": sum(op in FP32_OPS for op in ops),
        "mem": sum(op.startswith(("LDG", "STG", "LDS", "STS")) for op in ops),
    }


def idea_stats(idea: str, warps: int, g: int, maxnreg: int | None) -> dict[str, dict]:
    """{"fwd": stats, "bwd": stats} of a cconv idea's dense kernels ("001", "i003", ...)."""
    import ladder  # noqa: F401  (the idea import finder)

    num = idea.lstrip("i")
    mod = importlib.import_module(f"ladder.kernels.cconv.ideas.i{num}.kernel")
    consts = dict(W=4, FAST=True, EVEN_T=True, BD=128 * warps, G=g, MD=False, sxd=1)
    out = {}
    for name, attr, types, extra in (
        ("fwd", "cconv_fwd_kernel", FWD_TYPES, {}),
        ("bwd", "cconv_bwd_kernel", BWD_TYPES, {"sgd": 1}),
    ):
        if not hasattr(mod, attr):
            raise AttributeError(f"cconv idea {num} has no {attr}")
        k = compile_sm90(_jit(getattr(mod, attr)), types, {**consts, **extra}, warps, maxnreg)
        out[name] = sass_stats(k.asm["cubin"])
    return out


def main(
    ideas: list[str] = typer.Argument(..., help="cconv idea numbers, e.g. 001 003 004"),
    warps: int = typer.Option(4, min=1, help="num_warps (BD = 128 x warps)"),
    rows: list[int] = typer.Option([4, 8], "--g", help="rows per loop step (repeatable)"),
    maxnreg: int | None = typer.Option(None, help="register cap, as CCONV_MAXNREG configs"),
) -> None:
    """Print registers, stack and static SASS counts per idea, kernel and G."""
    try:
        for g in rows:
            for idea in ideas:
                for kernel, s in idea_stats(idea, warps, g, maxnreg).items():
                    typer.echo(
                        f"{idea} {kernel} warps {warps} G {g}: regs {s['regs']} stack "
                        f"{s['stack']} instrs {s['instrs']} (MUFU {s['mufu']}, FP32 "
                        f"{s['fp32']}, memory {s['mem']})"
                    )
    except (AttributeError, FileNotFoundError, ModuleNotFoundError) as exc:
        typer.echo(f"cconv_sass: {exc}", err=True)
        raise typer.Exit(2) from None


if __name__ == "__main__":
    typer.run(main)
