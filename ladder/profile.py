"""``python -m ladder.profile``: where an idea's time goes, one row per GPU kernel.

For one shape of a family, the idea's directions (the family's ``timed`` hook: fwd, bwd,
fwdbwd) are each called ``--warmup`` times (compilation and autotuning), then ``--reps`` times
under ``torch.profiler``; every CUDA kernel's device time is summed by name and divided by
the repetitions, so a row reads "ms per call of the op". Rows are sorted by time, with each
kernel's share of the direction and the number of launches per call. The direction's wall
time per call (CUDA events around the same repetitions, profiler off) is printed beside the
kernel sum, so launch gaps show as their difference.

``--host`` profiles the host side instead: the same repetitions under ``torch.profiler``
with CPU activity only, every host op (aten ops, driver launch calls, autograd Function and
engine ranges) summed by its self time (time not spent in a child op) per call of the
direction, beside the direction's host time per call (``time.perf_counter`` around each
call, each followed by an untimed synchronize, so the launch queue never fills; the
synchronize's own row is left out of the table). Python that is no op is charged to the
innermost range around it (in an autograd Function's range: the Function's own wrappers and
Triton's launch path) and, outside every range, to nothing: the listed self times then sum
to less than the host time per call, and the difference is that Python.

Also printed, for kernels tuned by Triton's autotuner in any module the idea imported, the
configuration each picked for the keys it saw (``--json`` writes everything to a file).
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import typer

from ladder import paths
from ladder.paths import LadderError
from ladder.prepare import prepare_idea
from ladder.recstore import write_new_file

__all__ = [
    "DIRECTIONS",
    "autotune_picks",
    "check_directions",
    "host_table",
    "iter_autotuners",
    "kernel_table",
    "profile_direction",
    "profile_host",
]

# The callables a family's ``timed`` hook returns (docs/DESIGN.md, "The family contract").
DIRECTIONS = ("fwd", "bwd", "fwdbwd")


def kernel_table(events: Any, reps: int) -> list[dict[str, Any]]:
    """[{kernel, ms, launches}] per call of the op, from profiler key_averages()."""
    rows: dict[str, dict[str, float]] = defaultdict(lambda: {"us": 0.0, "n": 0})
    for ev in events:
        dev = getattr(ev, "device_type", None)
        if dev is None or "CUDA" not in str(dev):
            continue
        total = getattr(ev, "self_device_time_total", None)
        if total is None:
            total = ev.self_cuda_time_total
        rows[ev.key]["us"] += float(total)
        rows[ev.key]["n"] += int(ev.count)
    out = [
        {"kernel": k, "ms": v["us"] / 1e3 / reps, "launches": v["n"] / reps}
        for k, v in rows.items()
        if v["us"] > 0
    ]
    return sorted(out, key=lambda r: -r["ms"])


def host_table(events: Any, reps: int) -> list[dict[str, Any]]:
    """[{op, us, calls}] per call of the op from profiler key_averages() of a CPU-only
    profile: each host op's self CPU time (microseconds, children excluded) and how many times
    it ran, divided by ``reps``, largest first. Ops of no self time are left out."""
    out = []
    for ev in events:
        self_us = float(getattr(ev, "self_cpu_time_total", 0.0) or 0.0)
        if self_us <= 0:
            continue
        out.append({"op": ev.key, "us": self_us / reps, "calls": int(ev.count) / reps})
    return sorted(out, key=lambda r: -r["us"])


def profile_host(fn: Any, *, warmup: int, reps: int) -> dict[str, Any]:
    """Warm ``fn`` up, time ``reps`` calls on the host (each followed by a synchronize, which
    is not counted), then profile ``reps`` calls with CPU activity only: {host_us, ops}."""
    import time

    import torch
    from torch.profiler import ProfilerActivity, profile

    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    spent = 0.0
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        spent += time.perf_counter() - t0
        torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(reps):
            fn()
            torch.cuda.synchronize()
    ops = [r for r in host_table(prof.key_averages(), reps) if r["op"] != "cudaDeviceSynchronize"]
    return {"host_us": spent / reps * 1e6, "ops": ops}


def profile_direction(fn: Any, *, warmup: int, reps: int) -> dict[str, Any]:
    """Warm ``fn`` up, time ``reps`` calls with CUDA events, then profile ``reps`` calls."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        fn()
    end.record()
    torch.cuda.synchronize()
    wall = start.elapsed_time(end) / reps
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            fn()
        torch.cuda.synchronize()
    table = kernel_table(prof.key_averages(), reps)
    return {"wall_ms": wall, "kernel_ms": sum(r["ms"] for r in table), "kernels": table}


PICK_PACKAGES = ("fla", "ladder", "kernel_fun")  # where the kernels a family runs live


def _unwrap_autotuner(obj: Any, autotuner: type) -> Any:
    """The Autotuner under ``obj``'s ``.fn`` chain (heuristics, autotune, jit), or None. Any
    error while looking (extension classes raise on unknown attributes) means none."""
    for _ in range(8):
        if obj is None or isinstance(obj, autotuner):
            return obj
        try:
            obj = getattr(obj, "fn", None)
        except Exception:
            return None
    return None


def iter_autotuners(packages: tuple[str, ...]) -> Iterator[tuple[str, str, Any]]:
    """(module name, attribute name, Autotuner) for every Triton Autotuner under an attribute
    (heuristics and jit wrappers unwrapped) of a loaded module of ``packages``, each once."""
    from triton.runtime.autotuner import Autotuner

    seen = set()
    for mname, mod in list(sys.modules.items()):
        if mod is None or mname.split(".")[0] not in packages:
            continue
        for name, obj in list(vars(mod).items()):
            tuner = _unwrap_autotuner(obj, Autotuner)
            if tuner is None or id(tuner) in seen:
                continue
            seen.add(id(tuner))
            yield mname, name, tuner


def autotune_picks() -> list[dict[str, Any]]:
    """Every Triton Autotuner in a loaded module of fla, the ladder or kernel_fun, with the
    configurations it picked: [{module, kernel, key, config}]."""
    return [
        {"module": mname, "kernel": name, "key": repr(key), "config": str(cfg)}
        for mname, name, tuner in iter_autotuners(PICK_PACKAGES)
        for key, cfg in tuner.cache.items()
    ]


app = typer.Typer(add_completion=False, help=__doc__.split("\n")[0])


def check_directions(directions: str) -> list[str]:
    """The ``--directions`` list, each one of DIRECTIONS, in order, without repeats.

    Raises LadderError for an empty list, an empty item or an unknown or repeated name.
    """
    items = [d.strip() for d in directions.split(",")]
    if not directions.strip() or "" in items:
        raise LadderError(
            f"--directions {directions!r}: give names joined by commas, e.g. fwd,bwd "
            f"(one of {', '.join(DIRECTIONS)})"
        )
    bad = [d for d in items if d not in DIRECTIONS]
    if bad:
        raise LadderError(
            f"--directions: unknown {', '.join(bad)}; each is one of {', '.join(DIRECTIONS)}"
        )
    if len(set(items)) != len(items):
        raise LadderError(f"--directions {directions!r} names a direction twice; keep one")
    return items


@app.command()
def main(
    family: str = typer.Argument(..., help="family name, e.g. kda"),
    idea: str = typer.Argument(..., help="idea number or folder, e.g. 000"),
    shape: str = typer.Option("prod", help="a shape name of the family"),
    directions: str = typer.Option("fwd,bwd", help="comma-separated: fwd, bwd, fwdbwd"),
    warmup: int = typer.Option(2, min=1, help="calls before profiling (compile, autotune)"),
    reps: int = typer.Option(5, min=1, help="calls timed and profiled per direction"),
    seed: int = typer.Option(0, help="seed of the family's random inputs"),
    json_out: Path | None = typer.Option(None, "--json", help="write the results here"),
    top: int = typer.Option(25, help="rows printed per direction"),
    host: bool = typer.Option(
        False, "--host", help="profile the host side (CPU ops by self time) instead of kernels"
    ),
) -> None:
    """Where an idea's time goes on the GPU: per direction of one shape, every CUDA kernel's
    time per call, share and launches, beside the direction's wall time, and the configs
    Triton's autotuner picked; with --host, every host op's self time per call beside the
    direction's host time per call. Needs a CUDA GPU (exit 2 without one)."""
    try:
        import torch

        fam = paths.load_family(family)
        shapes = {s.name: s for group in fam.SHAPES.values() for s in group}
        if shape not in shapes:
            raise LadderError(f"family {family} has no shape {shape!r}; one of {sorted(shapes)}")
        paths.resolve_idea(family, idea)
        dirs = check_directions(directions)
        if top < 1:
            raise LadderError(f"--top must be at least 1, got {top}")
        if seed < 0:
            raise LadderError(f"--seed must be 0 or more, got {seed}")
        if json_out is not None:
            if json_out.is_dir():
                raise LadderError(
                    f"--json {json_out} is a folder; give a file name, e.g. {json_out / 'profile.json'}"
                )
            if json_out.exists() or json_out.is_symlink():
                raise LadderError(
                    f"--json {json_out} exists; give a new file name (a profile never replaces a file)"
                )
            if not json_out.parent.is_dir():
                raise LadderError(
                    f"--json {json_out}: folder {json_out.parent} does not exist; create it first"
                )
        if not torch.cuda.is_available():
            raise LadderError("ladder.profile needs a CUDA GPU")
        prepared = prepare_idea(family, idea, [], None, load=True)
        inputs = fam.make_inputs(shapes[shape], torch.device("cuda"), seed)
        calls = fam.timed(prepared.module, inputs)
        bad = [d for d in dirs if d not in calls]
        if bad:
            raise LadderError(f"unknown direction(s) {bad}; the family times {sorted(calls)}")
    except LadderError as exc:
        typer.echo(f"ladder.profile: {exc}", err=True)
        raise typer.Exit(2) from None
    result: dict[str, Any] = {
        "family": family,
        "idea": prepared.folder,
        "shape": shape,
        "device": torch.cuda.get_device_name(),
        "mode": "host" if host else "kernels",
        "directions": {},
    }
    head = f"\n{family}/{prepared.folder} {shape}"
    for d in dirs:
        if host:
            res = profile_host(calls[d], warmup=warmup, reps=reps)
            listed = sum(r["us"] for r in res["ops"])
            typer.echo(
                f"{head} {d} (host): {res['host_us']:.0f} us/call, "
                f"profiled ops' self time {listed:.0f} us/call"
            )
            for r in res["ops"][:top]:
                typer.echo(f"  {r['us']:9.1f} us x{r['calls']:<6g} {r['op'][:90]}")
        else:
            res = profile_direction(calls[d], warmup=warmup, reps=reps)
            typer.echo(
                f"{head} {d}: wall {res['wall_ms']:.3f} ms/call, "
                f"kernels {res['kernel_ms']:.3f} ms/call"
            )
            for r in res["kernels"][:top]:
                share = r["ms"] / res["kernel_ms"] if res["kernel_ms"] else 0.0
                typer.echo(
                    f"  {r['ms']:8.3f} ms {share:6.1%} x{r['launches']:<5g} {r['kernel'][:90]}"
                )
        result["directions"][d] = res
    result["autotune"] = autotune_picks()
    if json_out is not None:
        _write_new(json_out, json.dumps(result, indent=1))


def _write_new(path: Path, text: str) -> None:
    """Write `text` to `path`, all or nothing, never over a file: a file that appeared there
    during the run is kept and the result goes beside it (`<name>.<n>`), said on stderr."""
    target, n = path, 0
    while True:
        try:
            write_new_file(target, text, prefix=".profile-")
            break
        except FileExistsError:
            n += 1
            target = path.with_name(f"{path.name}.{n}")
    if target != path:
        typer.echo(
            f"{path} appeared during the run and is kept; the profile is in {target}", err=True
        )


if __name__ == "__main__":
    app()
