"""kernel-fun: faster drop-in replacements for flash-linear-attention (fla) ops on NVIDIA GPUs.

Each op family is a subpackage whose public function has the same signature and the same
return contract as its fla counterpart, so adopting it is a one-line import swap:

    from kernel_fun.cconv import causal_conv1d    # instead of fla.modules.convolution's
    from kernel_fun.kda import chunk_kda          # instead of fla.ops.kda's

Calls this package does not implement (an argument it has never seen, a device below the
family's architecture floor, a CUDA-graph capture of a shape that never ran eagerly, ...)
are forwarded to fla verbatim, so a fallback computes exactly what fla computes. To swap
fla's own entry points in place instead, for model code you do not edit:

    import kernel_fun
    kernel_fun.patch_fla()          # kernel_fun.unpatch_fla() undoes it
    with kernel_fun.patched_fla():  # or only for a block of code
        ...

`import kernel_fun` is cheap: it imports no torch, triton or CuTe DSL. A family pulls in what
it needs when it is first used.

Environment switches, read on every call (so they can be flipped on a running process):

    KERNEL_FUN_DISABLE=1             forward every call of every family to fla
    KERNEL_FUN_<FAMILY>_DISABLE=1    the same for one family, e.g. KERNEL_FUN_CCONV_DISABLE=1
    KERNEL_FUN_DEBUG=1               log (at WARNING) why a call fell back to fla
    KERNEL_FUN_FALLBACK=1            on fla drift (a symbol or keyword this package calls moved),
                                     warn and fall back instead of raising FlaDriftError
    KERNEL_FUN_ALLOW_ARCH=1          run the kernels on architectures their GPU tests have not
                                     passed on (today only sm90 has); off: those calls go to fla

Switch values: 1/true/yes/on and 0/false/no/off (any case); anything else is ignored with a
warning logged once.
"""

from __future__ import annotations

import importlib
import importlib.util
import platform
from typing import Any

__all__ = [
    "FlaDriftError",
    "PatchError",
    "__version__",
    "patch_fla",
    "patched_fla",
    "unpatch_fla",
    "versions",
]

__version__ = "0.3.0.dev0"

# Attributes resolved on first access, so that `import kernel_fun` stays free of torch.
# name -> module that defines it.
_LAZY_ATTRS: dict[str, str] = {
    "patch_fla": "kernel_fun._patch",
    "unpatch_fla": "kernel_fun._patch",
    "patched_fla": "kernel_fun._patch",
    "PatchError": "kernel_fun._patch",  # what patch_fla raises when fla's layers cannot take it
    "FlaDriftError": "kernel_fun._common.compat",  # what warmup raises when fla moved
}

# Subpackages reachable as attributes without an explicit import (`kernel_fun.cconv`).
_LAZY_SUBMODULES: tuple[str, ...] = ("cconv", "kda")

# versions() key -> import name probed for presence -> distributions that may provide it,
# first installed one wins. Distribution metadata is read instead of importing the module:
# asking for versions must not import torch or the CuTe DSL (seconds, and GPU state).
_DISTRIBUTIONS: dict[str, tuple[str, ...]] = {
    "torch": ("torch",),
    "triton": ("triton", "pytorch-triton"),
    "fla": ("fla-core", "flash-linear-attention"),
    "cutlass": ("nvidia-cutlass-dsl",),
    "cuda-python": ("cuda-python", "cuda-bindings"),
}

NOT_INSTALLED = "not installed"


def _dist_version(candidates: tuple[str, ...]) -> str:
    import importlib.metadata as md

    for dist in candidates:
        try:
            return md.version(dist)
        except md.PackageNotFoundError:
            continue
    return NOT_INSTALLED


def versions() -> dict[str, str]:
    """The versions of everything that decides what this package computes, and how fast.

    Returns a dict with the keys ``kernel_fun``, ``torch``, ``triton``, ``fla``, ``cutlass``
    (the CuTe DSL, distribution ``nvidia-cutlass-dsl``), ``cuda-python`` and ``python``, each a
    version string or ``"not installed"``; plus ``device`` (``"<name> sm<major><minor>"``, e.g.
    ``"NVIDIA H200 sm90"``) when torch is installed and sees a CUDA device; plus, for each
    vendored family (a subpackage with a ``_provenance.py``), ``"<family>.record"`` (the
    winning bench record, ``"<idea>/<record_id>"``) and ``"<family>.source_commit"`` (the
    full sha the kernels were vendored from), or ``"unreadable"`` for a damaged file.

    Versions come from installed distribution metadata, so the call imports none of these
    packages; only the ``device`` entry imports torch (when it is installed). Two entries (the
    CuTe DSL and cuda-python) are usually not pinned by anything and come with the machine
    image, which makes this the first thing to compare when a run is slower than the last.
    """
    out: dict[str, str] = {"kernel_fun": __version__}
    for key, dists in _DISTRIBUTIONS.items():
        out[key] = _dist_version(dists)
    out["python"] = platform.python_version()
    for family, (record, commit) in _vendored().items():
        out[f"{family}.record"] = record
        out[f"{family}.source_commit"] = commit
    device = _device_name()
    if device is not None:
        out["device"] = device
    return out


def _vendored() -> dict[str, tuple[str, str]]:
    """{family: ("<idea>/<record_id>", source commit)} from each ``_provenance.py`` beside
    this file, read as literals (never imported: that would pull in the family)."""
    import ast
    from pathlib import Path

    out: dict[str, tuple[str, str]] = {}
    for path in sorted(Path(__file__).resolve().parent.glob("*/_provenance.py")):
        values: dict[str, Any] = {}
        try:
            for node in ast.parse(path.read_bytes(), str(path)).body:
                if (
                    isinstance(node, ast.Assign)
                    and len(node.targets) == 1
                    and isinstance(node.targets[0], ast.Name)
                    and node.targets[0].id in ("RECORD", "SOURCE_COMMIT")
                ):
                    values[node.targets[0].id] = ast.literal_eval(node.value)
            record = f"{values['RECORD']['idea']}/{values['RECORD']['record_id']}"
            commit = values["SOURCE_COMMIT"]
            if not isinstance(commit, str):
                raise TypeError(commit)
        except (OSError, SyntaxError, ValueError, KeyError, TypeError):
            record = commit = "unreadable"
        out[path.parent.name] = (record, commit)
    return out


def _device_name() -> str | None:
    """``"<name> sm<major><minor>"`` of the current CUDA device, or None without one."""
    if importlib.util.find_spec("torch") is None:
        return None
    try:
        import torch

        if not torch.cuda.is_available():
            return None
        major, minor = torch.cuda.get_device_capability()
        return f"{torch.cuda.get_device_name()} sm{major}{minor}"
    except Exception:  # a broken driver must not break a version report
        return None


def __getattr__(name: str) -> Any:
    """Resolve `patch_fla`, `unpatch_fla`, `patched_fla` and family subpackages on first use."""
    if name in _LAZY_ATTRS:
        value = getattr(importlib.import_module(_LAZY_ATTRS[name]), name)
        globals()[name] = value
        return value
    if name in _LAZY_SUBMODULES:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY_ATTRS) | set(_LAZY_SUBMODULES))
