"""The launch recorder of the cconv launch-plan tests (tests/test_cconv_012.py,
tests/test_cconv_013.py): Triton's last step stood in on the CPU.

`install(monkeypatch)` makes the JIT function of every launch cache of idea 011 log
("triton", grid, args, kwargs) and return a fake compiled kernel whose launcher logs
("plan", grid, stream, args); the current CUDA device is 0 and its stream 1000.
"""

from __future__ import annotations

import torch
from ladder.kernels.cconv.ideas.i010 import launch
from ladder.kernels.cconv.ideas.i011 import kernel as k11
from triton.runtime.autotuner import Autotuner, Heuristics

import ladder  # noqa: F401  (the idea import finder)


def _jit(kernel):
    """The JIT function under a kernel's heuristics and autotuner wrappers."""
    while isinstance(kernel, (Autotuner, Heuristics)):
        kernel = kernel.fn
    return kernel


class _Compiled:
    def __init__(self, log: list) -> None:
        self.function = object()
        self.packed_metadata = ("meta",)
        self._log = log

    def run(self, gx, gy, gz, stream, function, packed, lm, enter, exit_, *args):
        assert function is self.function and packed == self.packed_metadata
        assert lm is None and enter is None and exit_ is None
        self._log.append(("plan", (gx, gy, gz), stream, args))


def install(monkeypatch, extra: tuple = ()) -> list:
    """Stand the recorder in (undone by monkeypatch); returns the launch log. ``extra``: more
    launch caches (a later idea's ``launch.CachedLaunch`` objects) logged the same way."""
    log: list = []
    compiled = _Compiled(log)
    for cache in (k11._DENSE_FWD_L, k11._DENSE_BWD_L, k11._CASE_FWD_L, k11._CASE_BWD_L,
                  k11._CASE_BWD32_L, k11._DH0_L, k11._HT_L, *extra):  # fmt: skip
        jit = _jit(cache.kernel)

        def run(*args, grid, warmup, _jit=jit, **kwargs):
            g = grid(kwargs) if callable(grid) else grid
            log.append(("triton", tuple(g) + (1,) * (3 - len(g)), args, dict(kwargs)))
            return compiled

        monkeypatch.setattr(jit, "run", run)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)

    class _Driver:
        class active:  # noqa: N801
            @staticmethod
            def get_current_stream(device):
                return 1000 + device

    monkeypatch.setattr(launch, "driver", _Driver)
    monkeypatch.setattr(k11.k10, "LAUNCH_CACHE", True)
    return log


def recording(monkeypatch, extra: tuple, tables: tuple):
    """A launch-log fixture's body (``yield from`` it): ``install(monkeypatch, extra)``, with
    the given plan tables emptied before the test and after it."""
    log = install(monkeypatch, extra)
    for table in tables:
        table.clear()
    yield log
    for table in tables:
        table.clear()


def _params(kernel) -> list[str]:
    return [p.name for p in _jit(kernel).params]


def _same_args(a: tuple, b: tuple) -> bool:
    """Equal argument lists: tensors by identity, everything else by value."""
    return len(a) == len(b) and all(
        (p is q) if isinstance(p, torch.Tensor) or isinstance(q, torch.Tensor) else p == q
        for p, q in zip(a, b, strict=True)
    )


def _expect(triton_entry, kernel, tensors: tuple) -> tuple:
    """The argument list a plan must pass for a call whose Triton launch was `triton_entry`:
    the call's tensors, the launch's integers, then every remaining parameter's value from
    the launch's keywords (constexprs, config, heuristics)."""
    _, _, args, kw = triton_entry
    names = _params(kernel)
    tail = tuple(kw[n] for n in names[len(args) :])
    return (*tensors, *args[len(tensors) :], *tail)
