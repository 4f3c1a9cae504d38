"""cconv idea 010's launch cache on the CPU.

The cache's hit path needs a CUDA launcher, so these tests stand Triton's last step in with a
recorder: the JIT function's ``run`` returns a fake compiled kernel whose launcher records
its arguments, and the current device and stream are stubbed. What is checked is the cache's
own logic: which calls hit, and that a hit launches what Triton's path launched (grid, every
parameter in order, the config's and the heuristics' values). The kernels themselves are
009's (checked by `ladder check cconv 010 --interpret` and the GPU tests, which compare a
cached launch with Triton's bit for bit).
"""

from __future__ import annotations

import pytest
import torch
import triton
import triton.language as tl
from ladder.kernels.cconv.ideas.i010 import kernel as k10
from ladder.kernels.cconv.ideas.i010 import launch

import ladder  # noqa: F401  (the idea import finder)


@triton.jit(do_not_specialize=["T"])
def _toy(x, y, T, D, S, W: tl.constexpr, BD: tl.constexpr, MD: tl.constexpr):
    pass


class _Compiled:
    """A stand-in for Triton's CompiledKernel: its launcher records each launch."""

    def __init__(self, launches: list) -> None:
        self.function = object()
        self.packed_metadata = ("meta",)
        self._launches = launches

    def run(self, gx, gy, gz, stream, function, packed, lm, enter, exit_, *args):
        assert function is self.function and packed == self.packed_metadata
        self._launches.append(("cached", (gx, gy, gz), stream, args))


@pytest.fixture
def toy(monkeypatch):
    """(cached launch of an autotuned, heuristic toy kernel, the launch log)."""
    log: list = []
    compiled = _Compiled(log)

    def run(*args, grid, warmup, **kwargs):  # Triton's JITFunction.run, recorded
        g = grid(kwargs) if callable(grid) else grid
        log.append(("triton", tuple(g), args, dict(kwargs)))
        return compiled

    monkeypatch.setattr(_toy, "run", run)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)

    class _Driver:
        class active:  # noqa: N801
            @staticmethod
            def get_current_stream(device):
                return 1000 + device

    monkeypatch.setattr(launch, "driver", _Driver)
    heur = triton.heuristics({"MD": lambda a: a["D"] % a["BD"] != 0})(_toy)
    tuned = triton.autotune(configs=[triton.Config({"BD": 64}, num_warps=2)], key=["W", "S"])(heur)
    return launch.CachedLaunch(tuned), log


def _grid(D):
    return lambda m: (triton.cdiv(D, m["BD"]), 3)


def _args(x, T=100, D=96, S=256):
    y = torch.empty_like(x)
    return (x, y, T, D, S)


def test_second_call_at_a_signature_launches_what_triton_launched(toy):
    cache, log = toy
    x = torch.zeros(64, dtype=torch.bfloat16)
    args = _args(x)
    cache.launch(_grid(96), args, {"W": 4}, (96,))
    cache.launch(_grid(96), args, {"W": 4}, (96,))
    assert (cache.hits, cache.misses) == (1, 1)
    kind0, grid0, args0, kw0 = log[0]
    kind1, grid1, stream, args1 = log[1]
    assert (kind0, kind1) == ("triton", "cached")
    assert grid1 == (*grid0, 1) == (2, 3, 1)
    assert stream == 1000  # the current device's current stream
    # every parameter of _toy in order: the positional ones, then W, BD (the config's) and MD
    # (the heuristic's: 96 % 64 != 0)
    assert args1 == (*args, 4, 64, True)
    assert kw0["BD"] == 64 and kw0["W"] == 4 and kw0["num_warps"] == 2


@pytest.mark.parametrize(
    "change",
    [
        "x_dtype",
        "x_misaligned",
        "D_class",
        "S_value",
        "kwargs",
        "extra",
        "T_int64",
    ],
)
def test_a_call_differing_in_what_triton_specializes_on_misses(toy, change):
    cache, log = toy
    base = torch.zeros(64, dtype=torch.bfloat16)
    cache.launch(_grid(96), _args(base), {"W": 4}, (96,))
    x, T, D, S, kw, extra = base, 100, 96, 256, {"W": 4}, (96,)
    if change == "x_dtype":
        x = torch.zeros(64, dtype=torch.float16)
    elif change == "x_misaligned":
        x = base[1:]  # 2 bytes past an aligned address
    elif change == "D_class":
        D = 97  # not a multiple of 16: Triton specializes D differently
    elif change == "S_value":
        S = 1024  # an autotune key argument: the tuned config may differ
    elif change == "kwargs":
        kw = {"W": 3}
    elif change == "extra":
        extra = (112,)
    elif change == "T_int64":
        T = 1 << 31
    cache.launch(_grid(D), _args(x, T, D, S), kw, extra)
    assert (cache.hits, cache.misses) == (0, 2)
    assert [e[0] for e in log] == ["triton", "triton"]


def test_a_new_T_in_the_same_class_hits(toy):
    """T is a do-not-specialize int: another length of the same class reuses the launch (the
    grid is the caller's, recomputed per call)."""
    cache, log = toy
    x = torch.zeros(64, dtype=torch.bfloat16)
    cache.launch(_grid(96), _args(x, T=100), {"W": 4}, (96,))
    cache.launch(lambda m: (7, 5), _args(x, T=101), {"W": 4}, (96,))
    assert (cache.hits, cache.misses) == (1, 1)
    assert log[1][1] == (7, 5, 1) and log[1][3][2] == 101


def test_launch_hooks_and_pre_hooks_always_take_tritons_path(toy, monkeypatch):
    cache, log = toy
    x = torch.zeros(64, dtype=torch.bfloat16)
    monkeypatch.setattr(triton.knobs.runtime, "launch_enter_hook", lambda *a: None)
    for _ in range(2):
        cache.launch(_grid(96), _args(x), {"W": 4}, (96,))
    assert (cache.hits, cache.misses, len(cache.entries)) == (0, 2, 0)
    monkeypatch.setattr(triton.knobs.runtime, "launch_enter_hook", None)
    cache.kernel.configs[0].pre_hook = lambda nargs: None
    for _ in range(2):
        cache.launch(_grid(96), _args(x), {"W": 4}, (96,))
    assert (cache.hits, len(cache.entries)) == (0, 0)


def test_the_cache_is_bounded(toy, monkeypatch):
    cache, log = toy
    monkeypatch.setattr(launch, "MAX_ENTRIES", 2)
    x = torch.zeros(64, dtype=torch.bfloat16)
    for W in (1, 2, 3, 3):
        cache.launch(_grid(96), _args(x), {"W": W}, (96,))
    assert len(cache.entries) == 2 and cache.hits == 0 and cache.misses == 4


def test_no_cuda_device_takes_tritons_path(toy, monkeypatch):
    cache, log = toy

    def no_device():
        raise RuntimeError("no CUDA")

    monkeypatch.setattr(torch.cuda, "current_device", no_device)
    x = torch.zeros(64, dtype=torch.bfloat16)
    for _ in range(2):
        cache.launch(_grid(96), _args(x), {"W": 4}, (96,))
    assert (cache.hits, cache.misses, len(cache.entries)) == (0, 2, 0)


def test_arg_classes():
    x = torch.zeros(8, dtype=torch.float32)
    assert launch.arg_classes((x, 1, 32, 33, 1 << 31, None, 0.5)) == (
        (torch.float32, True),
        (True, False, True),
        (False, True, True),
        (False, False, True),
        (False, True, False),
        None,
        float,
    )
    assert launch.arg_classes((x[1:],))[0] == (torch.float32, False)
    with pytest.raises(TypeError, match="str"):
        launch.arg_classes(("a",))


def test_the_dense_entry_points_launch_through_the_cache(monkeypatch):
    """cconv_fwd / cconv_bwd hand the cache 004's kernels with 004's arguments: the recorded
    launch equals what 005's own entry points pass to Triton."""
    seen = {}

    def fake_launch(self, grid, args, kwargs, extra=()):
        seen.setdefault(self.kernel, []).append((grid(kwargs | {"BD": 256}), args, kwargs, extra))

    monkeypatch.setattr(launch.CachedLaunch, "launch", fake_launch)
    monkeypatch.setattr(k10, "LAUNCH_CACHE", True)
    x = torch.randn(2, 40, 24, dtype=torch.bfloat16)
    w = torch.randn(24, 4)
    k10.cconv_fwd(x, w)
    ((grid, args, kwargs, extra),) = seen[k10._FWD_FIXED.kernel]
    assert args[:3] == (x, w, args[2]) and args[3:] == (40, 24, args[5], args[6], *x.stride(),
                                                       40 * 24, 24)  # fmt: skip
    assert extra == (24,) and kwargs["W"] == 4 and kwargs["BD"] == k10._FIXED_BD
    k10.cconv_bwd(x, w, torch.randn_like(x))
    ((grid, args, kwargs, extra),) = seen[k10._BWD_FIXED.kernel]
    assert args[0] is x and args[-2:] == (40 * 24, 24) and extra == (24,)


@pytest.mark.parametrize("small", [False, True])
def test_segment_rules_are_004s_and_005s(small):
    """010's host-integer segment rules give 004's and 005's segments at every size."""
    from ladder.kernels.cconv.ideas.i004 import kernel as k4
    from ladder.kernels.cconv.ideas.i005 import kernel as k5

    for B in (1, 2, 4, 16, 64):
        for T in (1, 2, 7, 8, 9, 63, 64, 65, 1000, 2048, 4096, 8191, 8192, 65536, 131072):
            for D in (16, 40, 255, 256, 768, 1024, 2048, 4096, 5000):
                assert k10._segment(B, T, D) == k4._segment(B, T, D), (B, T, D)
                got = k10._segment_small(B, T, D, small)
                assert got == k5._segment(B, T, D, small), (B, T, D, small)
                assert k10._cdiv(T, got) == triton.cdiv(T, got)
