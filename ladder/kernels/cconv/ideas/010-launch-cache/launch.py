"""Cached Triton launches: one compiled kernel per call signature, launched without Triton's
per-call machinery.

A launch through ``kernel[grid](*args, **kwargs)`` pays, on every call, for Triton's
autotuner (a dict of the arguments, the tuning key, the config's keyword arguments), its
heuristics (another dict per heuristic) and the JIT function's binder (the specialization of
every argument, the compile-cache key, a check of the globals the kernel read). On the H200's
host that is most of a small call's cost: 49-68 us per forward call against 16-22 us for a
one-kernel torch op (cconv/005's records).

:class:`CachedLaunch` wraps one kernel (a ``triton.jit`` function, optionally under
``triton.heuristics`` and ``triton.autotune``). Its first call at a signature goes through
Triton as before and keeps what Triton launched: the compiled kernel and the values of every
parameter the launch did not pass positionally (the config's, the heuristics', the
constexprs given). Later calls at the same signature compute the grid and call the compiled
kernel's launcher directly, on the current device's current stream.

The signature is at least as fine as everything Triton decides a launch by:
- for every positional argument, what Triton specializes on: a tensor's dtype and whether its
  address is a multiple of 16; an int's equality to 1, divisibility by 16 and whether it
  fits in 32 bits (for ``do_not_specialize`` ints too, which only refines the key);
- the keyword arguments given (constexprs, launch options), by name and value;
- the values of the autotuner's key arguments (the tuned config is chosen by them and the
  tensors' dtypes);
- ``extra``: whatever the caller's heuristics or grid read besides the above (the caller
  passes it; for cconv, D);
- the current CUDA device (a compiled kernel is loaded per device).

Never cached, always Triton's own path: a launch while Triton's launch hooks are set (a
profiler is watching), a config with a pre-hook, a kernel run by Triton's CPU interpreter
(no compiled kernel comes back), and any parameter whose value the first call cannot name.
At most MAX_ENTRIES signatures are kept per kernel; a new one beyond that takes Triton's
path, uncached.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from triton import knobs
from triton.runtime.autotuner import Autotuner, Heuristics
from triton.runtime.driver import driver

__all__ = ["MAX_ENTRIES", "CachedLaunch", "arg_classes"]

MAX_ENTRIES = 256

_I32_MIN = -(1 << 31)
_I32_MAX = (1 << 31) - 1


def arg_classes(args: Sequence[Any]) -> tuple:
    """What Triton specializes a launch on, per positional argument (module docstring): a
    tensor -> (dtype, address % 16 == 0); an int -> (== 1, % 16 == 0, fits in int32); None ->
    None; a float -> float. Raises TypeError on any other type (the caller then launches
    through Triton)."""
    out = []
    for a in args:
        t = type(a)
        if t is int:  # most arguments: sizes and strides
            out.append((a == 1, a % 16 == 0, _I32_MIN <= a <= _I32_MAX))
        elif t is torch.Tensor or isinstance(a, torch.Tensor):
            out.append((a.dtype, a.data_ptr() % 16 == 0))
        elif t is bool or a is None:
            out.append(a)
        elif isinstance(a, int):
            out.append((a == 1, a % 16 == 0, _I32_MIN <= a <= _I32_MAX))
        elif isinstance(a, float):
            out.append(float)
        else:
            raise TypeError(f"no launch signature for an argument of type {t.__name__}")
    return tuple(out)


def _hooked(hook: Any) -> bool:
    """Whether a Triton launch hook would run: set, and (a hook chain, Triton 3.5 and later)
    holding at least one function."""
    if hook is None:
        return False
    calls = getattr(hook, "calls", None)
    return calls is None or bool(calls)


class CachedLaunch:
    """``kernel`` (a JIT function, possibly under heuristics and an autotuner) with its
    launches cached per signature (module docstring).

    ``launch(grid, args, kwargs, extra)``: grid is a callable taking the launch's keyword
    values (the config's included, as Triton's grid callables do) and returning a 1-3 tuple;
    args the positional arguments, kwargs the keyword arguments as Triton takes them; extra a
    hashable tuple of what else decides the launch. Errors: Triton's, from the first call at
    a signature.
    """

    def __init__(self, kernel: Any) -> None:
        self.kernel = kernel
        self.entries: dict[tuple, tuple] = {}
        self.hits = 0
        self.misses = 0
        self._tuner = kernel if isinstance(kernel, Autotuner) else None
        names = list(getattr(kernel, "arg_names", ()))
        keys = self._tuner.keys if self._tuner is not None else ()
        # the autotuner's key arguments by position (those passed by keyword are in the
        # signature's keyword part already)
        self._key_pos = tuple(names.index(k) for k in keys if k in names)

    def launch(
        self,
        grid: Callable[[dict], tuple],
        args: tuple,
        kwargs: dict[str, Any],
        extra: tuple = (),
    ) -> None:
        hooked = _hooked(knobs.runtime.launch_enter_hook) or _hooked(knobs.runtime.launch_exit_hook)
        key = None
        if not hooked:
            try:
                key = (
                    torch.cuda.current_device(),
                    tuple(kwargs.items()),
                    tuple(args[i] for i in self._key_pos if i < len(args)),
                    extra,
                    arg_classes(args),
                )
            except (TypeError, RuntimeError, AssertionError):
                key = None  # an argument with no signature, or no CUDA device: Triton's path
        entry = self.entries.get(key) if key is not None else None
        if entry is not None:
            run, function, packed, meta, tail, device, stream = entry
            g = grid(meta)
            n = len(g)
            run(
                g[0], g[1] if n > 1 else 1, g[2] if n > 2 else 1, stream(device), function,
                packed, None, None, None, *args, *tail,
            )  # fmt: skip
            self.hits += 1
            return
        self.misses += 1
        compiled = self.kernel[grid](*args, **kwargs)
        if key is None or len(self.entries) >= MAX_ENTRIES:
            return
        entry = self._entry(compiled, args, kwargs, key[0])
        if entry is not None:
            self.entries[key] = entry

    def _entry(self, compiled: Any, args: tuple, kwargs: dict, device: int) -> tuple | None:
        """(launcher, function, packed metadata, keyword values, the parameters after the
        positional ones, device, the current-stream getter) of the launch just made, or None
        when it cannot be named."""
        if not all(hasattr(compiled, a) for a in ("run", "function", "packed_metadata")):
            return None  # the interpreter, or a Triton whose compiled kernel differs
        kw = dict(kwargs)
        fn = self.kernel
        if isinstance(fn, Autotuner):
            cfg = fn.best_config
            if cfg is None or cfg.pre_hook is not None:
                return None
            kw.update(cfg.all_kwargs())
            fn = fn.fn
        while isinstance(fn, Heuristics):
            for name, heur in fn.values.items():
                kw[name] = heur({**dict(zip(fn.arg_names, args)), **kw})
            fn = fn.fn
        params = getattr(fn, "params", None)
        if params is None or len(args) > len(params):
            return None
        tail = []
        for p in params[len(args) :]:
            if p.name in kw:
                tail.append(kw[p.name])
            elif p.has_default:
                tail.append(p.default)
            else:
                return None
        run = compiled.run  # loads the module on first use
        stream = driver.active.get_current_stream
        return (run, compiled.function, compiled.packed_metadata, kw, tuple(tail), device, stream)
