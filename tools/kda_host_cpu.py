"""Host work of kda ideas' chains outside Triton's own launch path, measured on the CPU.

Every Triton launch is stubbed out (``JITFunction.run`` returns at once; an autotuner's
timing of its configurations returns a constant, so it picks its first configuration once
per key and then hits its cache, as on a warm GPU machine), and each idea's ``kda_fwd`` /
``kda_bwd`` runs on CPU tensors at a small shape. What is timed is everything a call does in
Python except Triton's launch itself: the chain's code, fla's wrappers, decorators,
heuristics and autotuners, and torch's allocations and views (CPU allocations, which cost
less than CUDA's caching allocator). So it compares ideas' host paths with each other; it
is not a host time per call on a GPU machine (the bench's ``host_us`` is) and includes no
launch cost of any kernel.

    python tools/kda_host_cpu.py 022 024 [--calls 200 --rounds 7] [--out out/kda-host-cpu.json]

Prints, per idea, the median microseconds per forward call and per forward+backward call
over ``rounds`` interleaved blocks of ``calls`` calls, and the number of launches per
forward+backward call (through fla's autotuners, and all).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _stub_triton(counts: collections.Counter) -> None:
    """No Triton launch runs: JITFunction.run returns None; an autotuner times every
    configuration as 1.0 and keeps no disk cache. ``counts`` gets 'launches' and 'autotuned'
    per call of each."""
    from triton.runtime.autotuner import Autotuner
    from triton.runtime.jit import JITFunction

    def run(self, *args, **kwargs):
        counts["launches"] += 1

    def bench(self, *args, config, **kwargs):
        return [1.0, 1.0, 1.0]

    tuned_run = Autotuner.run

    def autotuned(self, *args, **kwargs):
        counts["autotuned"] += 1
        self.cache_results = False
        return tuned_run(self, *args, **kwargs)

    JITFunction.run = run
    Autotuner._bench = bench
    Autotuner.run = autotuned


def _cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo ('' where there is none)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def _inputs(B: int, T: int, H: int, K: int, V: int):
    import torch

    g = torch.Generator().manual_seed(0)
    r = lambda *s: torch.randn(*s, generator=g)  # noqa: E731
    q, k = r(B, T, H, K).bfloat16(), r(B, T, H, K).bfloat16()
    v, gate = r(B, T, H, V).bfloat16(), r(B, T, H, K).bfloat16()
    beta, A_log, dt_bias = r(B, T, H).bfloat16(), r(H), r(H * K)
    do = r(B, T, H, V).bfloat16()
    args = (q, k, v, gate, beta, A_log, dt_bias, K**-0.5, None, False, None, None, False, False)
    return args, do


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("ideas", nargs="+", help="kda idea numbers, e.g. 022 024")
    ap.add_argument("--calls", type=int, default=200, help="calls per timed block")
    ap.add_argument("--rounds", type=int, default=7, help="timed blocks per idea and direction")
    ap.add_argument(
        "--shape", default="1,256,2,64,64", help="B,T,H,K,V of the CPU tensors (K <= 128, V <= 512)"
    )
    ap.add_argument("--out", type=Path, help="write the report as JSON here")
    a = ap.parse_args(argv)
    if a.calls < 1 or a.rounds < 1:
        ap.error("--calls and --rounds must be positive")
    try:
        B, T, H, K, V = (int(x) for x in a.shape.split(","))
    except ValueError:
        ap.error(f"--shape must be five ints B,T,H,K,V, got {a.shape!r}")
    if min(B, T, H, K, V) < 1 or K > 128 or V > 512:
        ap.error(
            f"--shape {a.shape}: every size must be positive, K at most 128 and V at most 512 "
            "(the chains' own path; K above 128 runs fla's stages)"
        )
    if a.out is not None and (a.out.is_dir() or not a.out.parent.is_dir()):
        ap.error(f"--out {a.out}: give a file path in an existing folder")
    ideas = ROOT / "ladder" / "kernels" / "kda" / "ideas"
    for i in a.ideas:
        if not (len(i) == 3 and i.isdigit() and any(ideas.glob(f"{i}-*/kernel.py"))):
            ap.error(f"no kda idea {i!r}: give idea numbers of ladder/kernels/kda/ideas, e.g. 022")
    a.ideas = list(dict.fromkeys(a.ideas))  # each idea once
    tmp = tempfile.TemporaryDirectory(prefix="kda-host-cpu-")
    os.environ.setdefault("TRITON_CACHE_DIR", tmp.name)
    sys.path[:0] = [str(ROOT), str(ROOT / "package" / "src")]
    import contextlib
    import importlib

    import torch

    counts: collections.Counter = collections.Counter()
    _stub_triton(counts)
    torch.cuda.device = lambda *args: contextlib.nullcontext()  # CPU tensors: no device to enter
    import ladder  # noqa: F401  (the idea import finder)

    args, do = _inputs(B, T, H, K, V)
    mods = {i: importlib.import_module(f"ladder.kernels.kda.ideas.i{i}.kernel") for i in a.ideas}

    def fwd(m):
        return m.kda_fwd(*args)

    def fwdbwd(m):
        _, _, ctx = m.kda_fwd(*args)
        return m.kda_bwd(ctx, do, None)

    per_call = {}
    for i, m in mods.items():  # warm: every autotuner's key cached, every import done
        for _ in range(3):
            fwdbwd(m)
        counts.clear()
        fwdbwd(m)
        per_call[i] = {"launches": counts["launches"], "autotuned": counts["autotuned"]}
    us: dict[str, dict[str, list[float]]] = {i: {"fwd": [], "fwdbwd": []} for i in mods}
    for r in range(a.rounds):
        order = list(mods.items()) if r % 2 == 0 else list(mods.items())[::-1]
        for i, m in order:
            for name, fn in (("fwd", fwd), ("fwdbwd", fwdbwd)):
                t0 = time.perf_counter()
                for _ in range(a.calls):
                    fn(m)
                us[i][name].append((time.perf_counter() - t0) * 1e6 / a.calls)
    report = {
        "shape": {"B": B, "T": T, "H": H, "K": K, "V": V},
        "calls": a.calls,
        "rounds": a.rounds,
        "host": {"cpu": _cpu_model(), "cores": os.cpu_count(), "python": platform.python_version()},
        "versions": {
            "torch": torch.__version__,
            "triton": importlib.import_module("triton").__version__,
        },
        "ideas": {
            i: {
                "fwd_us": statistics.median(us[i]["fwd"]),
                "fwdbwd_us": statistics.median(us[i]["fwdbwd"]),
                **per_call[i],
            }
            for i in mods
        },
    }
    for i, r in report["ideas"].items():
        print(
            f"kda/{i}: forward {r['fwd_us']:.0f} us, forward+backward {r['fwdbwd_us']:.0f} us per call "
            f"(launches per forward+backward: {r['launches']}, {r['autotuned']} through fla's autotuners)"
        )
    if a.out:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from outpath import write_report

        write_report(a.out, json.dumps(report, indent=1) + "\n")
    tmp.cleanup()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
