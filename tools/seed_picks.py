"""Seed Triton's on-disk autotune cache with fla's own committed picks, so that a fresh GPU
machine of the same model skips fla's autotuning at those keys.

    python tools/seed_picks.py [PICKS.json ...] [--dry-run]      (on the GPU machine)
    python tools/seed_picks.py --verify [PICKS.json ...]         (after the run)

fla autotunes each of its kda-chain kernels at every new key (head count, K, V, dtypes, and
for some kernels a bucket of token counts), timing every configuration of its list: on a
cold machine that is minutes of a bench call before anything is timed. Triton keeps each
pick on disk (``cache_results``, on in fla by default) under a key made of Triton's own
version hash, the backend, the kernel's source, the environment, the tuning key and the
configuration list. A picks file (``docs/results/kda-fla-picks-*.json``) holds, per kernel
and tuning key, the timing of every configuration fla's autotuner measured on one device
model, packed from such a cache after a bench. For each entry this tool finds fla's
autotuner of that kernel name in this process and has Triton's own ``check_disk_cache``
write the entry under the key Triton computes here (the timings handed over in place of a
benchmark), so the cache files are exactly those a tuning run on this machine would have
written, with the committed timings. fla then picks what it picked on that device model.

Taken only where it is sound: the picks file's device name must equal this GPU's (a pick
measured on an H100 is not an H200's), its triton and fla versions this process's, the
autotuner must keep picks on disk and prune nothing by argument (``early_config_prune``,
``perf_model``), and every configuration of its live list must have a committed timing.
Anything else is skipped and said. An entry already on disk is left as it is.

``--verify`` (after the run) says, per seeded entry, whether fla tuned again at that key: a
second ``<kernel>.autotune.json`` holding the same tuning key, written since the seeding,
means Triton computed another cache key and timed every configuration again.

Without --device the GPU's name comes from torch (exit 2 without a CUDA GPU). With no
PICKS files, every ``docs/results/*-fla-picks-*.json`` whose device is this GPU. Exit status:
0 (also when nothing matched), 2 on a usage error or an unreadable picks file.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODULES = ("fla.ops.kda", "fla.modules.l2norm")
STAMP = ".kf-seeded.json"  # in TRITON_CACHE_DIR: what was seeded, and when

__all__ = ["autotuners", "load_picks", "main", "seed", "verify"]


def autotuners(modules=MODULES) -> dict:
    """{kernel name: [Autotuner, ...]} over every fla module loaded after importing
    ``modules`` (``ladder.profile.iter_autotuners``), named by the innermost JIT function."""
    from triton.runtime.jit import JITFunction

    sys.path.insert(0, str(ROOT))
    from ladder.profile import iter_autotuners

    for m in modules:
        importlib.import_module(m)
    found: dict[str, list] = {}
    for _, _, at in iter_autotuners(("fla",)):
        fn = at.fn
        while not isinstance(fn, JITFunction):
            fn = fn.fn
        found.setdefault(fn.__name__, []).append(at)
    return found


def load_picks(path: Path) -> dict:
    """A picks file as JSON, checked for the fields this tool reads; ValueError naming what
    is missing."""
    data = json.loads(path.read_text())
    for field in ("device", "versions", "kernels"):
        if field not in data:
            raise ValueError(f"{path}: no {field!r} field (not a picks file?)")
    for name, entries in data["kernels"].items():
        for e in entries:
            if "key" not in e or "timings_ms" not in e:
                raise ValueError(f"{path}: kernel {name}: an entry without 'key' or 'timings_ms'")
    return data


def _cfg_id(kwargs: dict, num_warps, num_stages) -> tuple:
    return (tuple(sorted(kwargs.items())), num_warps, num_stages)


def _plan(at, entry) -> tuple[tuple | None, dict | None, str]:
    """(tuning key, {live Config: timing}, '') for one picks entry on autotuner ``at``, or
    (None, None, why not)."""
    if not getattr(at, "cache_results", False):
        return None, None, "its autotuner keeps no picks on disk (cache_results off)"
    if at.early_config_prune or at.perf_model:
        return None, None, "its autotuner prunes its configurations by argument"
    if len(at.configs) < 2:
        return None, None, "one configuration: nothing is tuned"
    timings = {}
    for t in entry["timings_ms"]:
        kw = {k: v for k, v in t.items() if k not in ("num_warps", "num_stages", "ms")}
        timings[_cfg_id(kw, t.get("num_warps"), t.get("num_stages"))] = t["ms"]
    live = {}
    for c in at.configs:
        if c.pre_hook is not None:
            return None, None, "a configuration with a pre-hook (Triton never caches those)"
        ms = timings.get(_cfg_id(c.kwargs, c.num_warps, c.num_stages))
        if ms is None:
            return None, None, f"no committed timing for its configuration {c}"
        live[c] = ms
    return tuple(entry["key"]), live, ""


def seed(picks: dict, tuners: dict, dry_run: bool = False) -> list[dict]:
    """Seed every entry of ``picks`` (module docstring); one row per entry: kernel, key,
    status ('seeded', 'present', 'would seed' with dry_run, or 'skipped') and why."""
    rows = []
    for name, entries in picks["kernels"].items():
        ats = tuners.get(name, [])
        for entry in entries:
            row = {"kernel": name, "key": entry["key"]}
            rows.append(row)
            if len(ats) != 1:
                row.update(status="skipped", why=f"{len(ats)} fla autotuners of that name here")
                continue
            at = ats[0]
            key, live, why = _plan(at, entry)
            if key is None:
                row.update(status="skipped", why=why)
                continue
            if dry_run:
                row.update(status="would seed", why="")
                continue

            def hand_over(at=at, live=live):
                at.configs_timings = dict(live)

            present = at.check_disk_cache(key, list(live), hand_over)
            at.cache.pop(key, None)  # this process only seeds: keep its autotuner unchanged
            row.update(status="present" if present else "seeded", why="")
    return rows


def _cache_dir() -> Path:
    from triton import knobs

    return Path(knobs.cache.dir)


def verify(seeded: list[dict], since: float, cache_dir: Path) -> list[dict]:
    """Per seeded row (kernel, key): 'used' when no other cache file of that kernel holding
    that key was written after ``since`` (seconds since the epoch), else 're-tuned'."""
    out = []
    files: dict[str, list[Path]] = {}
    for p in cache_dir.glob("*/*.autotune.json"):
        files.setdefault(p.name[: -len(".autotune.json")], []).append(p)
    for r in seeded:
        hits = []
        for p in files.get(r["kernel"], []):
            if p.stat().st_mtime <= since:
                continue
            try:
                if json.loads(p.read_text()).get("key") == r["key"]:
                    hits.append(str(p))
            except (OSError, ValueError):
                continue
        out.append({**r, "status": "re-tuned" if hits else "used", "files": hits})
    return out


def _default_picks() -> list[Path]:
    return sorted((ROOT / "docs" / "results").glob("*-fla-picks-*.json"))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("picks", nargs="*", type=Path, help="picks files (default: the committed ones)")
    ap.add_argument("--device", help="the GPU's name (default: torch's name of cuda:0)")
    ap.add_argument(
        "--dry-run", action="store_true", help="say what would be seeded, write nothing"
    )
    ap.add_argument(
        "--verify", action="store_true", help="after a run: was any seeded key re-tuned?"
    )
    a = ap.parse_args(argv)
    cache_dir = _cache_dir()
    stamp = cache_dir / STAMP
    if a.verify:
        try:
            done = json.loads(stamp.read_text())
        except (OSError, ValueError):
            print(f"seed_picks: nothing seeded in {cache_dir} (no {STAMP})")
            return 0
        rows = verify(done["rows"], done["time"], cache_dir)
        for r in rows:
            print(f"seed_picks: {r['status']:8} {r['kernel']} {r['key']}")
        n = sum(r["status"] == "re-tuned" for r in rows)
        print(f"seed_picks: {len(rows) - n} seeded keys used, {n} tuned again")
        # (a key found already there counts as seeded: it was expected to be used too)
        return 0
    device = a.device
    if device is None:
        import torch

        if not torch.cuda.is_available():
            ap.exit(2, "seed_picks: no CUDA GPU here; give --device NAME to seed for one\n")
        device = torch.cuda.get_device_name(0)
    import triton

    fla_version = importlib.import_module("fla").__version__
    paths = a.picks or _default_picks()
    tuners = None
    all_rows = []
    for path in paths:
        try:
            picks = load_picks(path)
        except (OSError, ValueError) as e:
            ap.exit(2, f"seed_picks: cannot use {path}: {e}\n")
        versions = picks["versions"]
        if picks["device"] != device:
            if a.picks:
                print(
                    f"seed_picks: {path.name}: measured on {picks['device']}, not {device}: skipped"
                )
            continue
        if (versions.get("triton"), versions.get("fla")) != (triton.__version__, fla_version):
            print(
                f"seed_picks: {path.name}: triton {versions.get('triton')} / fla "
                f"{versions.get('fla')}, here {triton.__version__} / {fla_version}: skipped"
            )
            continue
        tuners = tuners if tuners is not None else autotuners()
        rows = seed(picks, tuners, dry_run=a.dry_run)
        for r in rows:
            print(
                f"seed_picks: {path.name}: {r['status']:10} {r['kernel']} {r['key']}"
                + (f" ({r['why']})" if r["why"] else "")
            )
        all_rows += [r for r in rows if r["status"] in ("seeded", "present")]
    if not all_rows:
        print(f"seed_picks: nothing seeded for {device}")
        return 0
    stamp.parent.mkdir(parents=True, exist_ok=True)
    stamp.write_text(json.dumps({"time": time.time(), "device": device, "rows": all_rows}))
    n = sum(r["status"] == "seeded" for r in all_rows)
    print(f"seed_picks: seeded {n} keys into {cache_dir} ({len(all_rows) - n} already there)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
