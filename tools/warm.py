"""Fill Triton's on-disk kernel cache for a command, compiling in N processes at once.

    python tools/warm.py -j 6 --ladder kda 007 prod,deep-gate [--knob KDA_WY_BK=64]
    python tools/warm.py -j 4 -- -m ladder check cconv 007 --shapes packed-131072-d2048

On a cold machine Triton's autotuner compiles every configuration of every autotuned kernel
one after another in one process: fla's kda chain spends minutes there at a new shape. This
runs the command (the arguments after ``--``, given to ``python``) in N processes, process i
autotuning each kernel over configurations i, i+N, i+2N, ... of its list only, so each
configuration is compiled once, by one of N processes, into the shared cache
(``TRITON_CACHE_DIR``). A later run of the real command (a ladder bench) then finds every
binary on disk and only times the configurations.

``--ladder FAMILY IDEA SHAPES`` is the workload of a ladder bench at those shapes without its
oracle or timing: each process runs the family's ``run`` (forward, then backward) once per
shape on the idea (with its ``--knob`` values) and on the baseline, shape after shape, so a
process holds one shape's tensors at a time (mind N x the peak memory of one call).

What it never keeps: the warm processes' autotune picks (each saw part of the list, under
load from the others). Disk-cached picks (``cache_results``, fla's ``FLA_CACHE_RESULTS``) are
neither read nor written by them, so the real run tunes on the whole list, alone.

Each process's output goes to ``<logs>/warm-<i>.log`` (``--logs``, default a temporary
folder, printed). Stopping this process (SIGTERM, Ctrl-C) kills the warm processes. Exit status: 0 when every process exited 0; else the first non-zero status
among them (its log's last lines are printed); 2 on a usage error.
"""

from __future__ import annotations

import argparse
import os
import runpy
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

PART_ENV = "KF_WARM_PART"  # "i/N" in a warm process


def parse_part(text: str) -> tuple[int, int]:
    """Parse "i/N" into (i, N), with 0 <= i < N; ValueError otherwise."""
    try:
        i_s, n_s = text.split("/")
        i, n = int(i_s), int(n_s)
    except ValueError:
        raise ValueError(f"{PART_ENV}={text!r}: expected i/N, e.g. 0/8") from None
    if not 0 <= i < n:
        raise ValueError(f"{PART_ENV}={text!r}: need 0 <= i < N")
    return i, n


def share(configs: list, i: int, n: int) -> list:
    """Configurations i, i+n, ... of the list; when the list is shorter than n, the one at
    i mod its length (an autotuner must run at least one)."""
    mine = configs[i::n]
    return mine if mine else [configs[i % len(configs)]] if configs else configs


def patch_autotuner(i: int, n: int) -> None:
    """Make every Triton autotuner in this process tune over its share of configurations and
    never read or write disk-cached picks."""
    from triton.runtime.autotuner import Autotuner

    prune = Autotuner.prune_configs
    run = Autotuner.run

    def prune_share(self, kwargs):
        return share(prune(self, kwargs), i, n)

    def run_uncached(self, *args, **kwargs):
        self.cache_results = False
        return run(self, *args, **kwargs)

    Autotuner.prune_configs = prune_share
    Autotuner.run = run_uncached


def _child(part: str, argv: list[str]) -> None:
    """Run ``python argv...`` in this process with the autotuner patched."""
    i, n = parse_part(part)
    patch_autotuner(i, n)
    if argv[:1] == ["-m"] and len(argv) >= 2:
        sys.argv = [argv[1], *argv[2:]]
        runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
    else:
        sys.argv = list(argv)
        runpy.run_path(argv[0], run_name="__main__")


LADDER_FLAG = "--run-ladder"  # a warm process's first argument in --ladder mode


def ladder_workload(family: str, idea: str, shapes: str, knobs: list[str]) -> None:
    """The family's run(impl, inputs, poison) once per shape, on the idea then the baseline."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    import torch

    from ladder import paths
    from ladder.bench import BENCH_SHAPE_SETS, select_shapes
    from ladder.prepare import prepare_idea

    fam = paths.load_family(family, complete=True)
    module = prepare_idea(family, idea, knobs, load=True).module
    for shape in select_shapes(fam, shapes, BENCH_SHAPE_SETS):
        for impl in (module, fam.BASELINE):
            inputs = fam.make_inputs(shape, "cuda", 0)
            fam.run(impl, inputs, lambda specs: None)
            del inputs
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
        print(f"warm: {shape.name} done", flush=True)


def main(args: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if args is None else args)
    part = os.environ.get(PART_ENV)
    if part is not None:  # a warm process: run the command, patched
        if args[:1] == [LADDER_FLAG]:
            patch_autotuner(*parse_part(part))
            ladder_workload(args[1], args[2], args[3], args[4:])
        else:
            _child(part, args)
        return 0
    ap = argparse.ArgumentParser(
        prog="tools/warm.py",
        description="Compile a command's autotuned Triton kernels in N processes at once.",
    )
    ap.add_argument("-j", "--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--logs", type=Path, default=None, help="folder for warm-<i>.log")
    ap.add_argument(
        "--ladder", nargs=3, metavar=("FAMILY", "IDEA", "SHAPES"), default=None,
        help="run a ladder bench's workload (no oracle, no timing) instead of a command",
    )  # fmt: skip
    ap.add_argument("--knob", action="append", default=[], help="KEY=VALUE, with --ladder")
    ap.add_argument("command", nargs=argparse.REMAINDER, help="-- then python's arguments")
    ns = ap.parse_args(args)
    cmd = ns.command[1:] if ns.command[:1] == ["--"] else ns.command
    if ns.ladder is not None:
        if cmd:
            ap.error("give --ladder or a command after --, not both")
        cmd = [LADDER_FLAG, *ns.ladder, *ns.knob]
    elif ns.knob:
        ap.error("--knob goes with --ladder; a command takes its own options")
    elif not cmd or (cmd[0] == "-m" and len(cmd) < 2):
        ap.error("give the command after --, e.g. -- -m ladder check kda 007 --shapes prod")
    if ns.jobs < 1:
        ap.error(f"--jobs must be 1 or more, got {ns.jobs}")
    logs = ns.logs if ns.logs is not None else Path(tempfile.mkdtemp(prefix="warm-"))
    logs.mkdir(parents=True, exist_ok=True)
    procs = []
    for i in range(ns.jobs):
        env = {**os.environ, PART_ENV: f"{i}/{ns.jobs}"}
        log = open(logs / f"warm-{i}.log", "wb")
        procs.append(
            (i, log, subprocess.Popen([sys.executable, __file__, *cmd], env=env, stdout=log,
                                      stderr=subprocess.STDOUT))
        )  # fmt: skip
    # stopped (a time limit's SIGTERM, Ctrl-C): stop the warm processes too
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    status = 0
    try:
        for i, log, p in procs:
            rc = p.wait()
            log.close()
            if rc != 0 and status == 0:
                status = rc
                tail = (logs / f"warm-{i}.log").read_text(errors="replace").splitlines()[-15:]
                print(
                    f"warm process {i}/{ns.jobs} exited {rc}:", *tail, sep="\n  ", file=sys.stderr
                )
    finally:
        for _i, _log, p in procs:
            if p.poll() is None:
                p.kill()
    print(f"warm: {ns.jobs} processes, exit {status}, logs in {logs}")
    return status


if __name__ == "__main__":
    sys.exit(main())
