"""``ladder check`` and ``ladder bench``: run an idea, on the CPU interpreter or the GPU, and
show its record."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
import time
from pathlib import Path
from typing import Annotated, Any

import typer

from ladder import paths, records
from ladder.cliutil import CHECK_SHAPE_SETS, console, ctx_root, guard
from ladder.paths import LadderError, NoGpu

MAX_POOL_SEEDS = 64  # check --pool-seeds: each seed runs the oracle, fla and the idea once

__all__ = ["PhaseLines", "bench", "check", "render_record"]


def _gpu_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


def _respawn_interpreted(root: Path | None, argv: list[str]) -> int:
    """Run ``python -m ladder <argv>`` with TRITON_INTERPRET=1 set before anything imports
    Triton; its output streams through. Returns its exit code."""
    env = dict(os.environ)
    env["TRITON_INTERPRET"] = "1"
    here = str(paths.repo_root())
    env["PYTHONPATH"] = here + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    cmd = [sys.executable, "-m", "ladder"]
    if root is not None:
        cmd += ["--root", str(root)]
    sys.stdout.flush()
    sys.stderr.flush()
    return subprocess.run([*cmd, *argv], env=env, check=False).returncode


@guard
def check(
    ctx: typer.Context,
    family: Annotated[str, typer.Argument(help="Family, e.g. cconv.")],
    idea: Annotated[str, typer.Argument(help="Idea: 1, 001 or 001-strip-onepass.")],
    shapes: Annotated[
        str | None,
        typer.Option(
            help="small|prod|sweep|all, or shape names joined by commas (e.g. v128,gva). On "
            "the interpreter, small or small shapes by name only. Default: all on a GPU; "
            "small on the interpreter."
        ),
    ] = None,
    knob: Annotated[
        list[str] | None, typer.Option("--knob", help="KEY=VALUE env knob (repeatable).")
    ] = None,
    interpret: Annotated[
        bool, typer.Option("--interpret", help="Run the small shapes on Triton's CPU interpreter.")
    ] = False,
    strided: Annotated[
        bool,
        typer.Option(help="Also check each shape with the family's strided(inputs) layouts."),
    ] = True,
    seed: Annotated[int | None, typer.Option(help="Input seed (default: fresh).")] = None,
    pool_seeds: Annotated[
        int | None,
        typer.Option(
            "--pool-seeds",
            help="Judge few-element outputs (kda's dA_log) over this many seeds (2 to 64) "
            "instead of the family's RATIO_POOL_SEEDS, printing each seed's errors: a study of a "
            "noisy ratio (bench records always use the family's number). Only on a GPU, for a "
            "family with RATIO_MIN_ELEMENTS (kda).",
        ),
    ] = None,
) -> None:
    """Correctness only: candidate vs the fp64 oracle, against fla's own error."""
    from ladder.prepare import check_seed, prepare_idea

    if pool_seeds is not None and not 2 <= pool_seeds <= MAX_POOL_SEEDS:
        raise LadderError(
            f"--pool-seeds {pool_seeds}: give 2 to {MAX_POOL_SEEDS} seeds to pool over"
        )
    root = ctx_root(ctx)
    knobs = list(knob or [])
    fam = paths.load_family(family, root, complete=True)
    folder = paths.resolve_idea(family, idea, root)
    if shapes is not None and shapes not in CHECK_SHAPE_SETS:
        from ladder.bench import select_shapes

        select_shapes(fam, shapes, CHECK_SHAPE_SETS)  # a name list: each must be the family's
    check_seed(seed)
    gpu = False if interpret else _gpu_available()
    seed = seed if seed is not None else secrets.randbits(30)
    out = console()
    if interpret or not gpu:
        why_not = getattr(fam, "NO_INTERPRETER", None)
        if why_not and knobs and os.environ.get("TRITON_INTERPRET") != "1":
            # a bad --knob is refused here and now, not first on the GPU machine
            prepare_idea(family, folder, knobs, root, load=False)
        if why_not:
            raise NoGpu(
                f"family {family} cannot run on Triton's CPU interpreter ({why_not}); run "
                f"`python -m ladder check {family} {folder}"
                f"{'' if pool_seeds is None else f' --pool-seeds {pool_seeds}'}` on the GPU machine"
            )
        if "small" not in fam.SHAPES:
            raise NoGpu(
                f"no CUDA GPU and family {family} has no 'small' shapes for Triton's CPU "
                f"interpreter; run `python -m ladder check {family} {folder}` on the GPU machine"
            )
        small = {s.name: s for s in fam.SHAPES["small"]}
        picked = None  # None: every small shape
        if shapes not in (None, "small"):
            from ladder.bench import shape_names

            names = shape_names(shapes)
            big = [n for n in names if n not in small]
            if big:
                one = len(big) == 1
                raise LadderError(
                    f"the CPU interpreter runs the family's small shapes only ({', '.join(small)}); "
                    f"{', '.join(big)} {'is' if one else 'are'} not one of them: drop "
                    f"{'it' if one else 'them'} from --shapes, or run `python -m ladder check "
                    f"{family} {folder} --shapes {shapes}` on the GPU machine"
                )
            picked = [small[n] for n in names]
        if paths.idea_number(folder) == 0 and not getattr(fam, "BASELINE_ON_INTERPRETER", False):
            raise NoGpu(
                f"{folder} is {family}'s baseline benched as an idea, and the baseline cannot "
                f"run on Triton's CPU interpreter (its kernels are autotuned); run "
                f"`python -m ladder check {family} {folder}` on the GPU machine"
            )
        if os.environ.get("TRITON_INTERPRET") != "1":
            # the knobs (a scan of seconds per idea) after the cheap refusals, here so that a
            # bad --knob is refused before the interpreter's process starts
            prepare_idea(family, folder, knobs, root, load=False)
            if not interpret:
                out.print("no CUDA GPU: checking the small shapes on Triton's CPU interpreter")
            argv = ["check", family, folder, "--interpret", "--seed", str(seed)]
            argv += [] if picked is None else ["--shapes", ",".join(s.name for s in picked)]
            argv += [] if strided else ["--no-strided"]
            argv += [] if pool_seeds is None else ["--pool-seeds", str(pool_seeds)]
            for item in knobs:
                argv += ["--knob", item]
            raise typer.Exit(_respawn_interpreted(root, argv))
        device, baseline = "cpu", False
        shape_list = list(fam.SHAPES["small"]) if picked is None else picked
        defaults = dict(getattr(fam, "INTERPRET_KNOBS", {}))
    else:
        from ladder.bench import select_shapes

        device, baseline, defaults = "cuda", True, {}
        shape_list = select_shapes(fam, shapes or "all", CHECK_SHAPE_SETS)
    raise typer.Exit(
        _run_check(
            out,
            family,
            folder,
            knobs,
            root,
            defaults,
            device,
            shape_list,
            baseline,
            seed,
            strided,
            pool_seeds,
        )
    )


def _run_check(
    out: Any,
    family: str,
    folder: str,
    knobs: list[str],
    root: Path | None,
    defaults: dict[str, str],
    device: str,
    shape_list: list[Any],
    baseline: bool,
    seed: int,
    strided: bool,
    pool_seeds: int | None = None,
) -> int:
    from rich.table import Table

    from ladder import contract
    from ladder.check import ShapeCheck, check_shape
    from ladder.prepare import prepare_idea

    prepared = prepare_idea(family, folder, knobs, root, defaults=defaults, load=True)
    fam = prepared.family_module
    cases = contract.idea_cases(fam, prepared.module, f"ideas/{folder}/kernel.py")
    where = "CPU (Triton interpreter)" if device == "cpu" else "GPU"
    out.print(f"check {family}/{folder} on {where}, seed {seed} (repeat with --seed {seed})")
    values = prepared.knob_values()
    if values:
        out.print("knobs: " + ", ".join(f"{k}={v}" for k, v in values.items()))
    if prepared.env and device == "cpu":
        out.print("interpreter settings: " + ", ".join(f"{k}={v}" for k, v in prepared.env.items()))
    if not baseline:
        out.print(
            "fla's baseline is skipped on the CPU interpreter (its kernels are autotuned): "
            "only the absolute tolerances apply, not the error ratio to fla"
        )
    if strided and getattr(fam, "strided", None) is None:
        out.print(f"family {family} defines no strided layouts: checking the given layout only")
        strided = False
    if pool_seeds is not None and not (baseline and getattr(fam, "RATIO_MIN_ELEMENTS", 0)):
        why = (
            f"family {family} judges every output at one seed (no RATIO_MIN_ELEMENTS)"
            if baseline
            else "fla's baseline does not run on the interpreter, so there is no ratio to pool"
        )
        out.print(f"--pool-seeds {pool_seeds} changes nothing here: {why}")
    names = tuple(fam.TOLERANCES)
    results: list[ShapeCheck] = []
    skipped: list[str] = []
    for i, shape in enumerate(shape_list):
        if contract.shape_case(shape) not in cases:
            skipped.append(f"{shape.name} ({contract.shape_case(shape)})")
            continue
        for st in (False, True) if strided else (False,):
            try:
                res = check_shape(
                    fam,
                    prepared.module,
                    shape,
                    device,
                    seed + i,
                    baseline=baseline,
                    strided=st,
                    pool_seeds=pool_seeds,
                )
            except NotImplementedError as exc:
                # a scaffold: one line, not a table of NaNs
                out.print(f"not written yet: {exc}; nothing checked")
                return 1
            except Exception as exc:
                msg = (str(exc).strip().splitlines() or [""])[0]
                label = shape.name + ("+strided" if st else "")
                nan = {n: float("nan") for n in names}
                res = ShapeCheck(
                    label, nan, None, None, False, [f"raised {type(exc).__name__}: {msg}"]
                )
            results.append(res)
            out.print(f"  {res.name}: {'ok' if res.passed else 'FAILED'}")
    table = Table(title=f"{family}/{folder} correctness (relative L2 error vs fp64)")
    for col in ("shape", "output", "error", "tol", "fla error", "ratio", "ok"):
        table.add_column(col, justify="left" if col in ("shape", "output") else "right")
    for res in results:
        for n in names:
            base = res.baseline_err[n] if res.baseline_err else None
            ratio = res.err_ratio[n] if res.err_ratio else None
            table.add_row(
                res.name,
                n,
                f"{res.candidate_err[n]:.3e}",
                f"{fam.TOLERANCES[n]:.0e}",
                "-" if base is None else f"{base:.3e}",
                "-" if ratio is None else f"{ratio:.3f}",
                # a shape-wide problem (layout, dtype, an exception) marks every output
                "NO"
                if n in res.failed or res.problems or (not res.passed and not res.failed)
                else "yes",
            )
    out.print(table)
    for res in results:
        for n, why in res.failed.items():
            out.print(f"  {res.name} {n}: {why}")
    for res in results:
        for n, p in (res.pooled or {}).items():
            out.print(
                f"  {res.name} {n}: judged over {p['seeds']} seeds, pooled error "
                f"{p['candidate_err']:.3e} vs fla {p['baseline_err']:.3e} "
                f"(ratio {p['err_ratio']:.3f}; worst single seed {p['worst_candidate_err']:.3e})"
            )
            if pool_seeds is not None and res.per_seed and n in res.per_seed:
                out.print(
                    "    per seed (candidate / fla): "
                    + ", ".join(f"{c:.3e}/{b:.3e}" for c, b in res.per_seed[n])
                )
    for res in results:
        for p in res.problems:
            out.print(f"{res.name}: {p}")
    if skipped:
        out.print(
            f"skipped (case not in the idea's CASES = {', '.join(cases)}): {', '.join(skipped)}"
        )
    if not results:
        out.print(f"nothing checked: {folder} implements none of these shapes' cases")
        return 1
    failed = [r.name for r in results if not r.passed]
    if failed:
        out.print(f"FAILED: {', '.join(failed)}")
        return 1
    out.print(f"passed: {len(results)} checks")
    return 0


def render_record(rec: dict, out: Any, rank_shapes: tuple[str, ...] = ("prod",)) -> None:
    """Print a bench record's per-shape results as a table, then its prod ratio and, for a
    family ranking on more shapes (``rank_shapes``), its rank ratio
    (:func:`ladder.recview.rank_line`)."""
    from rich.table import Table

    from ladder.recview import rank_line

    table = Table(
        title=f"{rec['family']}/{rec['idea']} on {rec['device'].get('name', '?')}: "
        f"{rec['status']} (ratio = fla / idea; copy ceiling "
        f"{rec['copy_ceiling_TBps'] or 0:.2f} TB/s)"
    )
    for col in (
        "shape",
        "fwd ms",
        "fla",
        "x",
        "%copy",
        "bwd ms",
        "fla",
        "x",
        "%copy",
        "fwd+bwd x",
        "err ratio",
        "ok",
        "host us fwd (fla)",
        "host us f+b (fla)",
        "peak MiB (fla)",
    ):
        table.add_column(col, justify="left" if col == "shape" else "right")
    for s in rec["shapes"]:
        cells = [s["name"]]
        for d in ("fwd", "bwd"):
            t = s.get(d)
            if t:
                cells += [
                    f"{t['candidate_ms']['median']:.4f}",
                    f"{t['baseline_ms']['median']:.4f}",
                    f"{t['ratio']:.3f}",
                    f"{100 * t['fraction_of_copy']:.1f}",
                ]
            else:
                cells += ["-"] * 4
        fb = s.get("fwdbwd")
        cells.append(f"{fb['ratio']:.3f}" if fb else "-")
        pooled = s["correctness"].get("pooled") or {}
        ratios = [
            pooled[n]["err_ratio"] if n in pooled else v
            for n, v in (s["correctness"].get("err_ratio") or {}).items()
        ]
        ratios = [v for v in ratios if v is not None]
        cells.append(f"{max(ratios):.3f}" if ratios else "-")
        cells.append("yes" if s["correctness"]["passed"] else "NO")
        host, mem = s.get("host_us"), s.get("peak_mem_bytes")
        for d in ("fwd", "fwdbwd"):
            cells.append(f"{host[d]['candidate']:.0f} ({host[d]['baseline']:.0f})" if host else "-")
        mib = float(1 << 20)
        cells.append(f"{mem['candidate'] / mib:.0f} ({mem['baseline'] / mib:.0f})" if mem else "-")
        table.add_row(*cells)
    floor = [s["host_us"]["torch_op"] for s in rec["shapes"] if "torch_op" in s.get("host_us", {})]
    if floor:
        out.print(f"host us of one torch op (x.mul(1.0)), the floor: {min(floor):.0f}")
    out.print(table)
    score = records.prod_ratio(rec)
    if score is not None:
        out.print(f"prod ratio (fwd+bwd): {score:.3f}")
    rank = rank_line(rec, rank_shapes)
    if rank is not None:
        out.print(rank, markup=False)
    if rec.get("error"):
        out.print(f"error: {rec['error']}", markup=False)


class PhaseLines:
    """Prints ``[   12s] <phase>`` on ``console`` whenever a bench's progress description
    enters a new phase; seconds count from construction. The timed blocks of one shape and
    direction ("prod fwd: candidate round 3/8", interleaved with the baseline's and the copy's)
    are one phase, "prod fwd: timing", so a shape gives a handful of lines, not one per block."""

    def __init__(self, console: Any) -> None:
        self.console = console
        self.start = time.monotonic()
        self.last: str | None = None

    def __call__(self, desc: str) -> None:
        phase = desc
        if " round " in desc and ": " in desc:
            phase = desc.rsplit(": ", 1)[0] + ": timing"
        if phase != self.last:
            self.last = phase
            secs = time.monotonic() - self.start
            self.console.print(f"[{secs:6.0f}s] {phase}", markup=False, highlight=False)


@guard
def bench(
    ctx: typer.Context,
    family: Annotated[str, typer.Argument(help="Family, e.g. cconv.")],
    idea: Annotated[str, typer.Argument(help="Idea: 1, 001 or 001-strip-onepass.")],
    shapes: Annotated[
        str, typer.Option(help="prod|sweep|all, or comma-separated shape names (e.g. w2,w3).")
    ] = "all",
    knob: Annotated[
        list[str] | None,
        typer.Option(
            "--knob",
            help="KEY=VALUE env knob (repeatable); KEY=v1,v2,... sweeps the values (one "
            "record per point of the product, same seed).",
        ),
    ] = None,
    allow_dirty: Annotated[
        bool, typer.Option("--allow-dirty", help="Bench a dirty tree (record dirty=true).")
    ] = False,
    out: Annotated[
        Path | None,
        typer.Option("--out", help="A folder to write the record into, not the idea's records/."),
    ] = None,
    rounds: Annotated[int, typer.Option(help="Interleaved blocks per side.")] = 8,
    reps: Annotated[int, typer.Option(help="Timed calls per block.")] = 25,
    warmup: Annotated[int, typer.Option(help="Untimed calls at the start of each block.")] = 1,
    seed: Annotated[int | None, typer.Option(help="Input seed (default: fresh).")] = None,
) -> None:
    """Time an idea against fla on the GPU and write one bench record."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from ladder.bench import BenchOptions, run_bench

    opts = BenchOptions(
        family=family,
        idea=idea,
        shapes=shapes,
        knobs=list(knob or []),
        allow_dirty=allow_dirty,
        out=out,
        rounds=rounds,
        reps=reps,
        warmup=warmup,
        seed=seed,
        root=ctx_root(ctx),
    )
    con, err = console(), console(stderr=True)
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    )
    # The bar is drawn on a terminal only, and only once measuring starts: a usage error
    # before that (or any error on a pipe) is then the only line on stderr.
    prog = Progress(*columns, console=err, transient=True, disable=not err.is_terminal)
    task = prog.add_task("preparing", total=None)
    # Off a terminal (a log file, a remote call killed at its time limit) one plain line per
    # phase says where the minutes went: compiling and autotuning, or timing.
    phases = None if err.is_terminal else PhaseLines(err)

    def progress(desc: str, advance: float, total: float) -> None:
        if phases is not None:
            phases(desc)
            return
        if not prog.live.is_started:
            prog.start()
        prog.update(task, description=desc, advance=advance, total=total)

    def log(text: str) -> None:
        if prog.live.is_started:
            prog.stop()
        err.print(text, markup=False)

    if any("," in item for item in opts.knobs):  # a sweep: one record per point
        raise typer.Exit(_bench_sweep(opts, con, prog, task, progress, log))
    try:
        rec, path = run_bench(opts, progress=progress, log=log)
    finally:
        if prog.live.is_started:
            prog.stop()
    render_record(rec, con, records.rank_shapes(paths.load_family(family, opts.root)))
    con.print(f"record: {path}")
    if rec["status"] != "passed":
        raise typer.Exit(1)


def _bench_sweep(opts: Any, con: Any, prog: Any, task: Any, progress: Any, log: Any) -> int:
    """Bench every point of a knob sweep in this process, one record each, all with one seed
    (so the points see the same inputs). Every point's knobs are checked before the first is
    measured. A point whose record could not be written is reported (where it was saved) and
    the sweep goes on. Returns 0 when every point passed and was written, else 1."""
    import dataclasses

    from rich.table import Table

    from ladder.bench import run_bench
    from ladder.prepare import check_seed, prepare_idea, sweep_points

    points = sweep_points(opts.knobs)
    check_seed(opts.seed)
    for point in points:  # a bad value anywhere fails now, not after hours of measuring
        prepare_idea(opts.family, opts.idea, point, opts.root, load=False)
    seed = opts.seed if opts.seed is not None else secrets.randbits(30)
    keys = [item.partition("=")[0] for item in points[0]]
    saved = {k: os.environ.get(k) for k in keys}
    con.print(f"sweep: {len(points)} points of {', '.join(keys)}, seed {seed}")
    results: list[tuple[list[str], dict | None, str]] = []
    try:
        for i, point in enumerate(points, 1):
            prog.reset(task, description="preparing", total=None)
            try:
                rec, path = run_bench(
                    dataclasses.replace(opts, knobs=point, seed=seed),
                    progress=progress,
                    log=log,
                )
                where = str(path)
            except records.RecordNotWritten as exc:
                rec, where = None, str(exc)
            finally:
                if prog.live.is_started:
                    prog.stop()
            status = rec["status"] if rec is not None else "not written"
            con.print(f"point {i}/{len(points)} {' '.join(point)}: {status}; {where}", markup=False)
            results.append((point, rec, where))
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    shapes = records.rank_shapes(paths.load_family(opts.family, opts.root))
    ranked = shapes != ("prod",)
    title = f"{opts.family}/{opts.idea} sweep (prod; ratio = fla / idea"
    title += f"; rank x over {', '.join(shapes)})" if ranked else ")"
    table = Table(title=title)
    rank_col = ["rank x"] if ranked else []
    for col in (*keys, "status", "fwd ms", "bwd ms", "prod x", *rank_col, "record"):
        table.add_column(col, justify="right" if col.endswith(("ms", "x")) else "left")
    for point, rec, _where in results:
        values = [item.partition("=")[2] for item in point]
        if rec is None:
            table.add_row(
                *values, "not written", "-", "-", "-", *["-" for _ in rank_col], "(see above)"
            )
            continue
        prod = next((s for s in rec["shapes"] if s["name"] == "prod" and s.get("fwd")), None)
        score = records.prod_ratio(rec)
        rank = records.rank_score(rec, shapes)
        table.add_row(
            *values,
            rec["status"],
            f"{prod['fwd']['candidate_ms']['median']:.4f}" if prod else "-",
            f"{prod['bwd']['candidate_ms']['median']:.4f}" if prod else "-",
            f"{score:.3f}" if score is not None else "-",
            *([f"{rank:.3f}" if rank is not None else "-"] if ranked else []),
            rec["record_id"],
        )
    con.print(table)
    ok = all(rec is not None and rec["status"] == "passed" for _, rec, _ in results)
    return 0 if ok else 1
