"""Can this call run on our kernels, and if not, why not?

Every public entry point of a family asks this before doing any work and hands the call to
fla when the answer is no. The reason string matters as much as the answer: a silent
fallback looks exactly like a kernel that runs at 1.00x, so reasons are logged (once per
process, or on every new reason with KERNEL_FUN_DEBUG=1 raising their level).

Environment switches are read on every call, never at import: a kill switch is useful
precisely on a process that is already running, and an import-time read would depend on
import order. A read is one lookup in os.environ's own storage (`_env`), which every change
made through os.environ updates (`os.environ[...] = ...`, `del`, monkeypatch.setenv), so it
sees what `os.environ.get` would.

torch is imported inside the functions that need it. This module is imported when a family
engages, and families import torch anyway, but the switches themselves are usable (and
testable) without it.
"""

from __future__ import annotations

import logging
import os
from functools import cache
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

log = logging.getLogger("kernel_fun")

# Triton families have been measured on Hopper (sm90) and newer only.
TRITON_MIN_MAJOR = 9

# Architectures (major, minor) whose GPU tests the Triton kernels passed: the allow-list.
# Any other architecture goes to fla unless KERNEL_FUN_ALLOW_ARCH=1 opts in (read per call).
TESTED_ARCHS: frozenset[tuple[int, int]] = frozenset({(9, 0)})

_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"", "0", "false", "no", "off"})

_logged: set[str] = set()
_VERSIONS_KEY = "\x00kernel-fun versions"  # a key no real message can collide with

# Signatures that completed a phase eagerly: (*sig, "fwd") / (*sig, "bwd").
_WARM: set[tuple] = set()
_PHASES = ("fwd", "bwd")


_LOG_CAP = 1024  # distinct messages kept for deduplication; past it, new ones are dropped
_CAPPED_KEY = "\x00kernel-fun log cap"


def log_once(message: str, level: int = logging.INFO) -> None:
    """Log `message` on the ``kernel_fun`` logger at `level`, the first time it is seen.

    Deduplication is by (level, message) for the life of the process, so the same message
    raised to a higher level (e.g. by KERNEL_FUN_DEBUG) is logged once more. After
    ``_LOG_CAP`` distinct messages, one WARNING says so and later new messages are not
    logged: a process whose calls keep producing new reasons must not grow without bound.
    """
    key = f"{level}\x00{message}"
    if key in _logged:
        return
    if len(_logged) >= _LOG_CAP:
        if _CAPPED_KEY not in _logged:
            _logged.add(_CAPPED_KEY)
            log.warning("kernel-fun: %d distinct messages logged; later new ones are not", _LOG_CAP)
        return
    _logged.add(key)
    log.log(level, message)


def brief(value: Any) -> str:
    """An argument as a fallback reason names it: the repr of None, a bool, a number or a
    string, cut to 40 characters; a tensor's shape and dtype; else its type. Never a
    tensor's or container's contents (large, and printing a CUDA tensor waits on the GPU)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        text = repr(value)
        return text if len(text) <= 40 else text[:37] + "..."
    shape, dtype = getattr(value, "shape", None), getattr(value, "dtype", None)
    if shape is not None and dtype is not None:
        return f"a {type(value).__name__} of shape {tuple(shape)} and dtype {dtype}"
    return f"a {type(value).__name__}"


def unclassifiable(exc: Exception) -> str:
    """The fallback reason for arguments whose classification raised `exc`: its type and the
    first 80 characters of its message (which may quote an argument's value)."""
    text = " ".join(str(exc).split())
    return f"arguments kernel-fun cannot classify ({type(exc).__name__}: {text[:80]})"


def log_versions_once() -> None:
    """Log `kernel_fun.versions()` at INFO the first time any family engages.

    Cheap after the first call (one set lookup), so families call it on every dispatch.
    """
    if _VERSIONS_KEY in _logged:
        return
    _logged.add(_VERSIONS_KEY)
    from kernel_fun import versions

    log.info("kernel-fun versions: %s", versions())


_ENV_KEYS: dict[str, Any] = {}  # switch name -> its key in os.environ's storage


def _env(name: str) -> str | None:
    """os.environ.get(name), now. CPython keeps os.environ's values in a dict of encoded keys
    (`_data`, `encodekey`); a lookup there costs a tenth of `os.environ.get` for an absent
    name, which raises and catches a KeyError. Where that storage is not there (another
    interpreter, a replaced os.environ) this is os.environ.get."""
    env = os.environ
    data = getattr(env, "_data", None)
    if type(data) is not dict:
        return env.get(name)
    key = _ENV_KEYS.get(name)
    if key is None:
        try:
            key = _ENV_KEYS[name] = env.encodekey(name)
        except AttributeError:
            return env.get(name)
    raw = data.get(key)
    return None if raw is None else env.decodevalue(raw)


def _switch(name: str) -> bool:
    """The boolean environment switch `name`, read now. Unknown values: warn once, False."""
    raw = _env(name)
    if raw is None:
        return False
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value not in _FALSE:
        log_once(
            f"kernel-fun: ignoring {name}={raw!r} (want 1/true/yes/on or 0/false/no/off)",
            logging.WARNING,
        )
    return False


def _family_key(family: str) -> str:
    if not family or not family.replace("_", "").isalnum():
        raise ValueError(f"family must be a non-empty identifier such as 'cconv', got {family!r}")
    return family.upper()


def disabled(family: str) -> bool:
    """True when KERNEL_FUN_DISABLE or KERNEL_FUN_<FAMILY>_DISABLE is on. Read per call.

    `family` is the family's short name ("cconv"); raises ValueError when it is not an
    identifier.
    """
    name = _DISABLE_NAMES.get(family)
    if name is None:
        name = _DISABLE_NAMES[family] = f"KERNEL_FUN_{_family_key(family)}_DISABLE"
    return _switch("KERNEL_FUN_DISABLE") or _switch(name)


_DISABLE_NAMES: dict[str, str] = {}  # family -> its KERNEL_FUN_<FAMILY>_DISABLE


def debug() -> bool:
    """True when KERNEL_FUN_DEBUG is on: every new fallback reason is logged at WARNING."""
    return _switch("KERNEL_FUN_DEBUG")


def fallback_on_drift() -> bool:
    """True when KERNEL_FUN_FALLBACK is on: fla drift warns and falls back instead of raising."""
    return _switch("KERNEL_FUN_FALLBACK")


def report_fallback(family: str, reason: str) -> None:
    """Record that a `family` call went to fla because of `reason`.

    Logged once per process per reason: at INFO normally, at WARNING (so it shows without
    any logging set-up) when KERNEL_FUN_DEBUG is on.
    """
    level = logging.WARNING if debug() else logging.INFO
    log_once(f"kernel-fun {family}: calling fla instead: {reason}", level)


@cache
def _capability(device_index: int) -> tuple[int, int]:
    import torch

    major, minor = torch.cuda.get_device_capability(device_index)
    return int(major), int(minor)


@cache
def arch_at_least(device_index: int, major: int) -> bool:
    """True when CUDA device `device_index` has compute capability major >= `major`. Cached."""
    return _capability(device_index)[0] >= major


def capturing() -> bool:
    """True while a CUDA graph is being captured on the current stream.

    A capture needs an initialised CUDA context, so a process that never initialised CUDA
    (any CPU process) answers False without touching the driver.
    """
    import torch

    if not torch.cuda.is_initialized():
        return False
    return bool(torch.cuda.is_current_stream_capturing())


def mark_warm(sig: tuple, phase: str, *, eager: bool = False) -> None:
    """Record that call signature `sig` just completed `phase` ("fwd" or "bwd") eagerly.

    `sig` is the family's hashable description of everything its compile and autotune caches
    are keyed on (shapes, dtypes, device, kernel-selecting flags). A mark made while a CUDA
    graph is being captured does not count: nothing really ran. `eager=True`: the caller has
    just checked that no capture is running (`capturing()`), so it is not asked again.
    Raises ValueError for an unknown `phase`.
    """
    if phase not in _PHASES:
        raise ValueError(f"phase must be one of {_PHASES}, got {phase!r}")
    if eager or not capturing():
        _WARM.add((*sig, phase))


def capture_unsupported_reason(sig: tuple, needs_grad: bool) -> str | None:
    """Why a call with signature `sig` must not run our kernels under capture, or None.

    Outside a capture this is always None. Inside one, our kernels may run only for a
    signature that already ran eagerly: its forward, and its backward too when `needs_grad`.
    A first call at a shape compiles and autotunes, and autotuning times trial launches and
    synchronizes, which a capture cannot contain.

    The stream is deliberately not part of `sig`. What cannot be captured (compilation and
    autotuning) is keyed on shapes and dtypes only, so a shape that ran on one stream is warm
    on every stream; and the usual graphing recipe (torch.cuda.make_graphed_callables, or a
    warm-up on a side stream before torch.cuda.graph) runs the eager warm-up on one stream and
    captures on another. Keying on the stream would send every such captured call to fla.
    """
    if not capturing():
        return None
    if (*sig, "fwd") not in _WARM:
        return (
            "CUDA graph capture of a call signature that never ran eagerly (run one forward "
            "at this shape before capturing; compile and autotune cannot be captured)"
        )
    if needs_grad and (*sig, "bwd") not in _WARM:
        return (
            "CUDA graph capture with gradients of a call signature whose backward never ran "
            "eagerly (run one forward and backward at this shape before capturing)"
        )
    return None


def check_positive_ints(**sizes: object) -> None:
    """Raise ValueError naming the first of ``sizes`` (name -> value) that is not a positive
    int (bools are not sizes). Used by the warmups, whose arguments would otherwise pass
    unchecked on a machine without a GPU and fail only on the GPU."""
    import operator

    for name, value in sizes.items():
        try:
            size = None if isinstance(value, bool) else operator.index(value)
        except TypeError:
            size = None
        if size is None or size < 1:
            raise ValueError(f"warmup: {name} must be a positive int, got {value!r}")


def check_dtypes(**dtypes: object) -> None:
    """Raise TypeError naming the first of ``dtypes`` (name -> value) that is not a
    torch.dtype, and ValueError for one that is not a floating dtype (every tensor a warmup
    makes is a float tensor)."""
    import torch

    for name, value in dtypes.items():
        if not isinstance(value, torch.dtype):
            raise TypeError(
                f"warmup: {name} must be a torch.dtype such as torch.bfloat16, got {value!r}"
            )
        if not value.is_floating_point:
            raise ValueError(
                f"warmup: {name} must be a floating dtype such as torch.bfloat16, got {value}"
            )


def check_device(device: object) -> object:
    """``device`` as a torch.device (None stays None: the current CUDA device), or ValueError
    saying what a device is; the same on every machine, before anything looks for a GPU."""
    import torch

    if device is None or isinstance(device, torch.device):
        return device
    if isinstance(device, bool) or not isinstance(device, (str, int)):
        raise ValueError(
            f"warmup: device must be a torch.device, a str such as 'cuda:1' or a CUDA index, "
            f"got {device!r}"
        )
    try:
        return torch.device("cuda", device) if isinstance(device, int) else torch.device(device)
    except (RuntimeError, ValueError) as exc:
        raise ValueError(
            f"warmup: device {device!r} is not a device ({exc}); give e.g. 'cuda', 'cuda:1', 1 "
            "or a torch.device"
        ) from None


def allow_any_arch() -> bool:
    """True when KERNEL_FUN_ALLOW_ARCH is on: architectures outside the allow-list run our
    kernels too (at the user's risk: their GPU tests never ran there). Read per call."""
    return _switch("KERNEL_FUN_ALLOW_ARCH")


def _sm(arch: tuple[int, int]) -> str:
    return f"sm{arch[0]}{arch[1]}"


def triton_unsupported_reason(
    t: torch.Tensor,
    family: str,
    archs: frozenset[tuple[int, int]] = TESTED_ARCHS,
) -> str | None:
    """The gates every Triton family shares, checked on its main input `t`; None when clear.

    In order: the family is switched off (KERNEL_FUN_DISABLE / KERNEL_FUN_<FAMILY>_DISABLE),
    `t` is not a CUDA tensor, or `t`'s device has a compute capability (major, minor) outside
    `archs` (default TESTED_ARCHS, the architectures the kernels passed their GPU tests on)
    while KERNEL_FUN_ALLOW_ARCH is off. Shape, dtype and capture checks belong to the family.
    """
    if disabled(family):
        return f"switched off by KERNEL_FUN_DISABLE or KERNEL_FUN_{family.upper()}_DISABLE"
    if not t.is_cuda:
        return f"input is on {t.device}, not a CUDA device"
    index = t.device.index
    if index is None:  # a bare "cuda" device means the current one
        import torch

        index = torch.cuda.current_device()
    arch = _capability(index)
    if arch not in archs and not allow_any_arch():
        tested = ", ".join(_sm(a) for a in sorted(archs)) or "none"
        return (
            f"device {index} is {_sm(arch)}; this family's kernels passed their GPU tests "
            f"only on {tested} (KERNEL_FUN_ALLOW_ARCH=1 runs them anyway)"
        )
    return None


def import_vendored(family: str, names: tuple[str, ...]) -> tuple[Any, str | None]:
    """The first of `names` (a family's vendored kernel modules, newest first) that this
    build has, imported: (module, None). (None, None) when the build has none of them.
    (None, error) when one exists but fails to import (a broken install): the error is
    logged once at ERROR, and the family sends its calls to fla with it as the reason.
    Families call this once and keep the result."""
    import importlib

    for name in names:
        try:
            return importlib.import_module(name), None
        except ModuleNotFoundError as exc:
            if exc.name is not None and (name == exc.name or name.startswith(exc.name + ".")):
                continue  # this module (or a package above it) is not in the build
            error = f"{type(exc).__name__}: {exc}"
        except ImportError as exc:
            error = f"{type(exc).__name__}: {exc}"
        log_once(
            f"kernel-fun {family}: the vendored kernels {name} failed to import ({error}); "
            "calls go to fla",
            logging.ERROR,
        )
        return None, error
    return None, None


def triton_kernels_of(package: str) -> tuple[str, ...]:
    """The names of the Triton kernels that `package` and every module below it (its regular
    subpackages, those with an ``__init__.py``, included; ``__main__`` modules are not run)
    define themselves: ``@triton.jit`` functions with ``kernel`` among the ``_``-separated
    words of their name (``dense_fwd_kernel``, fla's style ``chunk_kda_fwd_kernel_h_o``),
    bare or wrapped by autotune / heuristics; kernels a module imports from elsewhere (fla's,
    for example) and helpers with other names are left out. Sorted. torch.profiler names a
    launch of one of them exactly so. Imports every module it scans. Raises TypeError when
    `package` is not a str, ModuleNotFoundError when it or triton is not installed, and
    ImportError naming the module when one below it fails to import."""
    import importlib
    import pkgutil

    from triton.runtime.jit import JITFunction

    if not isinstance(package, str):
        raise TypeError(
            f"triton_kernels_of takes a package's dotted name (a str), not {type(package).__name__}"
        )
    pkg = importlib.import_module(package)
    mods = [pkg]
    for info in pkgutil.walk_packages(getattr(pkg, "__path__", []), f"{package}."):
        if info.name.rpartition(".")[2] == "__main__":
            continue
        try:
            mods.append(importlib.import_module(info.name))
        except Exception as exc:
            raise ImportError(
                f"triton_kernels_of({package!r}): importing {info.name} failed: "
                f"{type(exc).__name__}: {exc}"
            ) from exc
    names: set[str] = set()
    for mod in mods:
        for obj in vars(mod).values():
            fn = obj
            for _ in range(4):  # Autotuner / Heuristics hold the JITFunction they wrap in .fn
                if fn is None or isinstance(fn, JITFunction):
                    break
                try:
                    fn = getattr(fn, "fn", None)
                except Exception:  # an object whose attribute lookup raises is no kernel
                    fn = None
            if (
                isinstance(fn, JITFunction)
                and fn.fn.__module__ == mod.__name__
                and "kernel" in fn.__name__.split("_")
            ):
                names.add(fn.__name__)
    return tuple(sorted(names))


def _reset_for_tests() -> None:
    """Forget logged messages, warm signatures and cached device probes."""
    _logged.clear()
    _WARM.clear()
    _capability.cache_clear()
    arch_at_least.cache_clear()
