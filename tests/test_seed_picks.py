"""tools/seed_picks.py: the entries it writes are the ones Triton's own autotuner then finds
(no benchmark), with the committed pick; what it must not seed, it skips; --verify tells a
re-tune from a hit."""

from __future__ import annotations

import json
import sys
import time
import types
from pathlib import Path

import pytest
import triton
import triton.language as tl
from triton.backends.compiler import GPUTarget

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))

import seed_picks  # noqa: E402

DEVICE = "NVIDIA H100 80GB HBM3"
CONFIGS = [
    triton.Config({"BS": 16}, num_warps=2, num_stages=3),
    triton.Config({"BS": 32}, num_warps=4, num_stages=3),
    triton.Config({"BS": 64}, num_warps=4, num_stages=2),
]


@triton.autotune(configs=CONFIGS, key=["N"], cache_results=True)
@triton.jit
def seed_test_kernel(x, N, BS: tl.constexpr):
    o = tl.program_id(0) * BS + tl.arange(0, BS)
    tl.store(x + o, tl.load(x + o, mask=o < N), mask=o < N)


KEY = [4096, "torch.float32"]  # N, then x's dtype, as Autotuner.run builds it
TIMINGS = [
    {"BS": 16, "num_warps": 2, "num_stages": 3, "ms": [0.30, 0.29, 0.31]},
    {"BS": 32, "num_warps": 4, "num_stages": 3, "ms": [0.10, 0.09, 0.11]},  # the pick
    {"BS": 64, "num_warps": 4, "num_stages": 2, "ms": [0.20, 0.19, 0.21]},
]


def _picks(timings=TIMINGS, device=DEVICE):
    return {
        "device": device,
        "versions": {"triton": triton.__version__, "fla": "0"},
        "kernels": {"seed_test_kernel": [{"key": KEY, "timings_ms": timings}]},
    }


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """An empty Triton cache and an sm90 CUDA target, as on an H100 (no GPU needed: the
    target only names the backend whose hash enters the cache key)."""
    import triton.runtime.autotuner as atmod

    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "cache"))
    target = GPUTarget("cuda", 90, 32)
    stub = types.SimpleNamespace(active=types.SimpleNamespace(get_current_target=lambda: target))
    monkeypatch.setattr(atmod, "driver", stub)
    seed_test_kernel.cache.clear()
    yield tmp_path / "cache"
    seed_test_kernel.cache.clear()


def _no_bench():
    raise AssertionError("Triton benchmarked: the seeded entry was not found")


def test_seeded_entry_is_what_tritons_autotuner_finds(cache):
    rows = seed_picks.seed(_picks(), {"seed_test_kernel": [seed_test_kernel]})
    assert [r["status"] for r in rows] == ["seeded"]
    assert not seed_test_kernel.cache  # the seeding process's autotuner is left unchanged
    # the autotuner's own lookup, as Autotuner.run makes it at that key
    assert seed_test_kernel.check_disk_cache(tuple(KEY), CONFIGS, _no_bench) is True
    best = seed_test_kernel.cache[tuple(KEY)]
    assert (best.kwargs, best.num_warps, best.num_stages) == ({"BS": 32}, 4, 3)
    # a second seeding leaves the entry alone
    rows = seed_picks.seed(_picks(), {"seed_test_kernel": [seed_test_kernel]})
    assert [r["status"] for r in rows] == ["present"]


def test_another_key_is_still_tuned(cache):
    seed_picks.seed(_picks(), {"seed_test_kernel": [seed_test_kernel]})
    benched = []

    def bench():
        benched.append(1)
        seed_test_kernel.configs_timings = {c: [1.0] for c in CONFIGS}

    assert seed_test_kernel.check_disk_cache((8192, "torch.float32"), CONFIGS, bench) is False
    assert benched == [1]


@pytest.mark.parametrize(
    "timings, why",
    [
        (TIMINGS[:2], "no committed timing"),  # fla's list here has a configuration more
        ([{**TIMINGS[0], "num_stages": 4}, *TIMINGS[1:]], "no committed timing"),
    ],
)
def test_partial_timings_are_skipped(cache, timings, why):
    rows = seed_picks.seed(_picks(timings), {"seed_test_kernel": [seed_test_kernel]})
    assert rows[0]["status"] == "skipped" and why in rows[0]["why"]
    assert not list(cache.glob("*/*.autotune.json"))


def test_unknown_or_ambiguous_kernel_is_skipped(cache):
    assert seed_picks.seed(_picks(), {})[0]["status"] == "skipped"
    two = {"seed_test_kernel": [seed_test_kernel, seed_test_kernel]}
    assert "2 fla autotuners" in seed_picks.seed(_picks(), two)[0]["why"]


def test_verify_tells_a_retune(cache):
    rows = seed_picks.seed(_picks(), {"seed_test_kernel": [seed_test_kernel]})
    since = time.time()
    assert seed_picks.verify(rows, since, cache)[0]["status"] == "used"
    # a tuning run that computed another cache key writes a second file with the same key
    other = cache / "other-key-dir"
    other.mkdir(parents=True)
    time.sleep(0.01)
    (other / "seed_test_kernel.autotune.json").write_text(json.dumps({"key": KEY}))
    assert seed_picks.verify(rows, since, cache)[0]["status"] == "re-tuned"


def test_cli_device_and_version_checks(cache, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(seed_picks, "autotuners", lambda: {"seed_test_kernel": [seed_test_kernel]})
    monkeypatch.setitem(sys.modules, "fla", types.SimpleNamespace(__version__="0"))
    p = tmp_path / "picks.json"
    p.write_text(json.dumps(_picks(device="NVIDIA H200")))
    assert seed_picks.main([str(p), "--device", DEVICE]) == 0
    assert "not NVIDIA H100" in capsys.readouterr().out
    assert not list(cache.glob("*/*.autotune.json"))
    bad = _picks()
    bad["versions"]["fla"] = "9.9"
    p.write_text(json.dumps(bad))
    seed_picks.main([str(p), "--device", DEVICE])
    assert "skipped" in capsys.readouterr().out
    p.write_text(json.dumps(_picks()))
    assert seed_picks.main([str(p), "--device", DEVICE]) == 0
    assert "seeded 1 keys" in capsys.readouterr().out
    assert seed_picks.main(["--verify"]) == 0
    assert "1 seeded keys used, 0 tuned again" in capsys.readouterr().out
    # a machine whose cache came with the entry (a carried cache) checks it all the same
    assert seed_picks.main([str(p), "--device", DEVICE]) == 0
    assert "seeded 0 keys" in capsys.readouterr().out
    assert seed_picks.main(["--verify"]) == 0
    assert "1 seeded keys used, 0 tuned again" in capsys.readouterr().out
    p.write_text("{}")
    with pytest.raises(SystemExit) as e:
        seed_picks.main([str(p), "--device", DEVICE])
    assert e.value.code == 2
