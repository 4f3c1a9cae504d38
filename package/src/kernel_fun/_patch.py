"""Route flash-linear-attention's (fla's) own calls through kernel-fun, without editing model code.

fla's layers never name the short convolution themselves: `ShortConvolution.forward` looks
`causal_conv1d` up in its module's globals on every call. Replacing that function object
wherever fla resolves it therefore routes every KimiDeltaAttention, GatedDeltaNet, ... of a
model through kernel-fun, while the layers, their parameters and their state dicts stay fla's:

    import kernel_fun
    kernel_fun.patch_fla()                 # once, before building the model
    model = build_model(config)

    with kernel_fun.patched_fla():         # or only for a block of code
        loss = model(batch).loss
        loss.backward()

Family `cconv` replaces fla's `causal_conv1d` with `kernel_fun.cconv.causal_conv1d`, and
fla's decode step `causal_conv1d_update` (what `ShortConvolution.step` calls) with
`kernel_fun.cconv.causal_conv1d_update`, each at every
attribute of an imported fla module (`fla` and `fla.*` in sys.modules) that holds fla's
function object. In fla 0.6.0 that is the defining module `fla.modules.causal_conv1d.ops`
(the one ShortConvolution.forward reads), the package `fla.modules.causal_conv1d`, the alias
modules `fla.modules.convolution` and `fla.modules.conv`, and layer modules that did
`from fla.modules.convolution import causal_conv1d` (e.g. `fla.layers.gated_deltanet`).
A name bound to fla's function OUTSIDE fla (your own module's `from fla... import
causal_conv1d`, executed before the patch) keeps fla's function: patch first, or import
`kernel_fun.cconv.causal_conv1d` directly.

Family `kda` replaces fla's `chunk_kda` with `kernel_fun.kda.chunk_kda` the same way.
`KimiDeltaAttention.forward` looks `chunk_kda` up in `fla.layers.kda`'s globals; the object
there is fla's public `chunk_kda` (its `@dispatch` backend wrapper under
`torch.compiler.disable`), also held by `fla.ops.kda.chunk`, `fla.ops.kda`, `fla.ops` and
`fla.ops.kda.backends.flash_kda` in fla 0.6.0. kernel-fun's fallback calls that very object,
so fla's own backend dispatch still happens behind it.

`patch_fla()`, `unpatch_fla()` and `patched_fla()` without arguments act on every known
family; pass "cconv" or "kda" (or several) to pick. The guarantees below hold per family.

Guarantees:
  * atomic: everything is checked before anything is replaced, and a failure while
    replacing restores what was already replaced; a raised error leaves fla untouched;
  * idempotent: patching a patched family changes nothing (it only picks up fla modules
    imported since, that bound fla's original function);
  * exact: unpatching puts back the very objects that were there (identity, not equality),
    also in fla modules imported while patched that bound the replacement;
  * loud: what was replaced is logged at INFO on logger `kernel_fun._patch`; an fla without
    what a family replaces is refused with `PatchError`, naming the attribute and fla's version.

Because the function is looked up when a layer is CALLED, patching after a model was built
works too; code that torch.compile traces should be compiled after patching.
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import logging
import sys
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from types import ModuleType
from typing import Any

__all__ = [
    "KNOWN_FAMILIES",
    "PatchError",
    "is_patched",
    "patch_fla",
    "patched_fla",
    "patched_sites",
    "unpatch_fla",
]

log = logging.getLogger(__name__)

KNOWN_FAMILIES: tuple[str, ...] = ("cconv", "kda")

# The public fla module whose `causal_conv1d` model code imports; in every fla layout the
# package supports it must hold the very function ShortConvolution calls.
_CCONV_PUBLIC_MODULE = "fla.modules.convolution"
_CCONV_NAME = "causal_conv1d"
# The decode step ShortConvolution.step calls (one token per sequence, cache in place).
_CCONV_UPDATE_NAME = "causal_conv1d_update"

_MISSING = object()


class PatchError(RuntimeError):
    """A family could not be patched into the installed fla. Nothing is left patched.

    The message names the fla attribute that is missing or different, and fla's version.
    """


@dataclass(frozen=True)
class _Site:
    """One module attribute that holds (or held) the function a family replaces."""

    module: ModuleType
    attr: str

    @property
    def name(self) -> str:
        return f"{self.module.__name__}.{self.attr}"


@dataclass
class _Patch:
    """What one family replaced: the original, its replacement and every site swapped."""

    family: str
    original: Callable[..., Any]
    replacement: Callable[..., Any]
    sites: list[_Site]


_LOCK = threading.RLock()
_ACTIVE: dict[str, list[_Patch]] = {}
# Who keeps a family patched: open patched_fla() blocks (a count per family) and explicit
# patch_fla() calls (until unpatch_fla()). A block's exit unpatches a family only when no
# other block holds it and no explicit patch_fla() asked for it.
_HOLDS: dict[str, int] = {}
_EXPLICIT: set[str] = set()


# ------------------------------------------------------------------------------------------
# helpers
# ------------------------------------------------------------------------------------------


def _fla_version() -> str:
    """fla's version string, from the imported module or the distribution metadata."""
    mod = sys.modules.get("fla")
    version = getattr(mod, "__version__", None)
    if version:
        return str(version)
    import importlib.metadata as md

    for dist in ("fla-core", "flash-linear-attention"):
        try:
            return md.version(dist)
        except md.PackageNotFoundError:
            continue
    return "unknown"


def _refusal(what: str, direct: str = "kernel_fun.cconv.causal_conv1d") -> PatchError:
    return PatchError(
        f"cannot patch fla {_fla_version()}: {what}. kernel_fun.patch_fla follows fla "
        f"0.6.0's layout; call {direct} directly instead, or install a "
        f"flash-linear-attention release this kernel-fun supports"
    )


def _families(families: str | Iterable[str] | None) -> tuple[str, ...]:
    """Normalize a family argument (one name or several) and reject unknown names."""
    if families is None:
        return KNOWN_FAMILIES
    if isinstance(families, str):
        names: tuple = (families,)
    elif isinstance(families, (bytes, bytearray)) or not isinstance(families, Iterable):
        raise TypeError(
            f"families must be a family name or an iterable of names (known: "
            f"{', '.join(KNOWN_FAMILIES)}), got {type(families).__name__}"
        )
    else:
        names = tuple(families)
    if not names:
        raise ValueError(
            f"no family given (an empty {type(families).__name__}); pass a family name, several, "
            f"or None for every family ({', '.join(KNOWN_FAMILIES)})"
        )
    for name in names:
        if name not in KNOWN_FAMILIES:
            raise ValueError(
                f"unknown kernel-fun family {name!r}; known families: {', '.join(KNOWN_FAMILIES)}"
            )
    return tuple(dict.fromkeys(names))  # unique, in the order given


def _fla_modules() -> list[ModuleType]:
    """Every imported module of fla (`fla`, `fla.*`), each once (aliases share objects)."""
    seen: set[int] = set()
    out: list[ModuleType] = []
    for name, mod in list(sys.modules.items()):
        if not (name == "fla" or name.startswith("fla.")) or not isinstance(mod, ModuleType):
            continue
        if id(mod) in seen:
            continue
        seen.add(id(mod))
        out.append(mod)
    return out


def _holders(obj: Any) -> list[_Site]:
    """Every attribute of an imported fla module that is `obj` itself (identity)."""
    sites: list[_Site] = []
    for mod in _fla_modules():
        namespace = getattr(mod, "__dict__", None)
        if not isinstance(namespace, dict):
            continue
        for attr, value in list(namespace.items()):
            if value is obj:
                sites.append(_Site(mod, attr))
    return sites


def _get(module: ModuleType, attr: str) -> Any:
    return module.__dict__.get(attr, _MISSING)


# ------------------------------------------------------------------------------------------
# family cconv
# ------------------------------------------------------------------------------------------


def _is_fla_module(name: str) -> bool:
    return name == "fla" or name.startswith("fla.")


def _call_time_module(fn: Callable[..., Any], attr: str) -> ModuleType | None:
    """The module whose attribute `attr` the function `fn` reads each time it runs.

    Either its own module, through a global lookup (`LOAD_GLOBAL attr`: fla 0.6.0's
    ShortConvolution.forward), or the module a function-local `from M import attr` names
    (IMPORT_NAME M, IMPORT_FROM attr: fla 0.5.x). None when `fn` does neither, so that
    replacing the attribute would not reach it.
    """
    import dis
    import importlib.util

    instructions = list(dis.get_instructions(fn))
    imported: str | None = None
    for i, ins in enumerate(instructions):
        if ins.opname == "IMPORT_NAME":
            level = instructions[i - 2].argval if i >= 2 else 0
            name = str(ins.argval)
            if isinstance(level, int) and level > 0:
                package = fn.__globals__.get("__package__") or ""
                name = importlib.util.resolve_name("." * level + name, package)
            imported = name
        elif ins.opname == "IMPORT_FROM" and ins.argval == attr and imported is not None:
            return importlib.import_module(imported)
        elif ins.opname in ("LOAD_GLOBAL", "LOAD_NAME") and ins.argval == attr:
            return sys.modules.get(fn.__globals__.get("__name__", ""))
    return None


def _looked_up_at_call(
    owner: str, method: Any, name: str, direct: str = "kernel_fun.cconv.causal_conv1d"
) -> tuple[ModuleType, Any]:
    """(module, object): the fla module `method` (a layer's method, `owner` in messages) reads
    `name` from when it runs, and what that module holds under the name. Refuses with
    PatchError when the method is not a function, the module does not load or is not fla's,
    or the name is missing or not callable there. Replaces nothing."""
    fn = inspect.unwrap(method) if callable(method) else None
    if getattr(fn, "__code__", None) is None:
        raise _refusal(f"{owner} is not a function", direct)
    try:
        home = _call_time_module(fn, name)
    except Exception as exc:
        raise _refusal(
            f"the module {owner} imports `{name}` from does not load ({exc})", direct
        ) from exc
    if home is None or not _is_fla_module(home.__name__):
        raise _refusal(
            f"{owner} does not look `{name}` up in an fla module when it runs, so replacing "
            f"that name would not reach it",
            direct,
        )
    original = _get(home, name)
    if original is _MISSING:
        raise _refusal(f"{home.__name__}.{name} is missing", direct)
    if not callable(original):
        raise _refusal(
            f"{home.__name__}.{name} is not callable ({type(original).__name__})", direct
        )
    return home, original


def _plan_cconv() -> _Patch:
    """Find fla's causal_conv1d and every fla attribute holding it; import the replacement.

    Checks, in order, and refuses with PatchError at the first that fails: fla imports;
    fla.modules.ShortConvolution exists; its forward reads `causal_conv1d` at call time
    from an fla module (its own globals, or a function-local import); that module has it;
    fla.modules.convolution has it too, as the same object; the replacement imports and is
    not fla's function. Replaces nothing.
    """
    try:
        fla_modules = importlib.import_module("fla.modules")
    except Exception as exc:
        raise PatchError(
            f"cannot patch fla: flash-linear-attention does not import ({type(exc).__name__}: "
            f"{exc})"
        ) from exc

    short_conv = getattr(fla_modules, "ShortConvolution", None)
    if short_conv is None:
        raise _refusal("fla.modules.ShortConvolution is missing")
    home, original = _looked_up_at_call(
        f"{short_conv.__module__}.ShortConvolution.forward",
        getattr(short_conv, "forward", None),
        _CCONV_NAME,
    )
    home_name = home.__name__

    try:
        public = importlib.import_module(_CCONV_PUBLIC_MODULE)
    except Exception as exc:
        raise _refusal(f"{_CCONV_PUBLIC_MODULE} does not import ({exc})") from exc
    public_fn = _get(public, _CCONV_NAME)
    if public_fn is _MISSING:
        raise _refusal(f"{_CCONV_PUBLIC_MODULE}.{_CCONV_NAME} is missing")
    if public_fn is not original:
        raise _refusal(
            f"{_CCONV_PUBLIC_MODULE}.{_CCONV_NAME} is not the function ShortConvolution "
            f"calls ({home_name}.{_CCONV_NAME})"
        )

    sites = _holders(original)
    if not any(s.module is home and s.attr == _CCONV_NAME for s in sites):
        raise _refusal(f"{home_name} is not among the imported fla modules (sys.modules)")

    try:
        from kernel_fun._common import compat
        from kernel_fun.cconv import causal_conv1d as replacement
    except Exception as exc:
        raise PatchError(
            f"cannot patch fla: kernel_fun.cconv does not import ({type(exc).__name__}: {exc})"
        ) from exc
    if original is replacement:
        raise PatchError(
            f"cannot patch fla: {home_name}.{_CCONV_NAME} is already "
            f"kernel_fun.cconv.causal_conv1d, but not through kernel_fun.patch_fla, so fla's "
            f"original is unknown here; restore fla's function before patching"
        )
    try:
        compat.remember_original(original)
    except Exception as exc:
        raise PatchError(
            f"cannot patch fla: recording fla's original {_CCONV_NAME} failed ({exc})"
        ) from exc
    return _Patch("cconv", original, replacement, sites)


def _plan_cconv_update() -> _Patch:
    """fla's causal_conv1d_update, where ShortConvolution.step reads it at call time, and
    every fla attribute holding it; the replacement is kernel_fun.cconv.causal_conv1d_update.

    Refuses with PatchError when ShortConvolution.step is missing or does not look the name
    up in an fla module when it runs, or when that module lacks it. Replaces nothing."""
    short_conv = importlib.import_module("fla.modules").ShortConvolution
    name = _CCONV_UPDATE_NAME
    home, original = _looked_up_at_call(
        f"{short_conv.__module__}.ShortConvolution.step", getattr(short_conv, "step", None), name
    )
    try:
        from kernel_fun._common import compat
        from kernel_fun.cconv import causal_conv1d_update as replacement
    except Exception as exc:
        raise PatchError(
            f"cannot patch fla: kernel_fun.cconv does not import ({type(exc).__name__}: {exc})"
        ) from exc
    if original is replacement:
        raise PatchError(
            f"cannot patch fla: {home.__name__}.{name} is already kernel-fun's, but not "
            f"through kernel_fun.patch_fla; restore fla's function before patching"
        )
    try:
        compat.remember_original(original, name)
    except Exception as exc:
        raise PatchError(
            f"cannot patch fla: recording fla's original {name} failed ({exc})"
        ) from exc
    return _Patch("cconv", original, replacement, _holders(original))


def _plan_cconv_all() -> list[_Patch]:
    """Family cconv replaces two functions: the convolution and its decode step."""
    return [_plan_cconv(), _plan_cconv_update()]


# ------------------------------------------------------------------------------------------
# family kda
# ------------------------------------------------------------------------------------------

_KDA_LAYER_MODULE = "fla.layers.kda"
_KDA_PUBLIC_MODULE = "fla.ops.kda"
_KDA_NAME = "chunk_kda"
_KDA_DIRECT = "kernel_fun.kda.chunk_kda"


def _plan_kda() -> _Patch:
    """Find fla's chunk_kda and every fla attribute holding it; import the replacement.

    The object replaced is the one KimiDeltaAttention.forward calls: fla's public
    `chunk_kda`, i.e. the function fla wraps with its backend `@dispatch` and
    `torch.compiler.disable` (never the undecorated body), so fla's own dispatch stays
    behind kernel-fun's fallback. Checks, in order, and refuses with PatchError at the first
    that fails: fla.layers.kda imports; it has KimiDeltaAttention; its forward reads
    `chunk_kda` at call time from an fla module; that module has it; fla.ops.kda has it
    too, as the same object; the replacement imports and is not fla's function. Replaces
    nothing.
    """
    try:
        layer_module = importlib.import_module(_KDA_LAYER_MODULE)
    except Exception as exc:
        raise PatchError(
            f"cannot patch fla: {_KDA_LAYER_MODULE} does not import ({type(exc).__name__}: {exc})"
            + (
                "; fla's layers ship in flash-linear-attention: install it (kernel-fun's "
                "`layers` extra), or call patch_fla('cconv') for the conv alone"
                if isinstance(exc, ModuleNotFoundError)
                and (exc.name or "").startswith("fla.layers")
                else ""
            )
        ) from exc
    layer = getattr(layer_module, "KimiDeltaAttention", None)
    if layer is None:
        raise _refusal(f"{_KDA_LAYER_MODULE}.KimiDeltaAttention is missing", _KDA_DIRECT)
    home, original = _looked_up_at_call(
        "KimiDeltaAttention.forward", getattr(layer, "forward", None), _KDA_NAME, _KDA_DIRECT
    )
    home_name = home.__name__
    try:
        public = importlib.import_module(_KDA_PUBLIC_MODULE)
    except Exception as exc:
        raise _refusal(f"{_KDA_PUBLIC_MODULE} does not import ({exc})", _KDA_DIRECT) from exc
    public_fn = _get(public, _KDA_NAME)
    if public_fn is _MISSING:
        raise _refusal(f"{_KDA_PUBLIC_MODULE}.{_KDA_NAME} is missing", _KDA_DIRECT)
    if public_fn is not original:
        raise _refusal(
            f"{_KDA_PUBLIC_MODULE}.{_KDA_NAME} is not the function KimiDeltaAttention calls "
            f"({home_name}.{_KDA_NAME})",
            _KDA_DIRECT,
        )
    sites = _holders(original)
    if not any(s.module is home and s.attr == _KDA_NAME for s in sites):
        raise _refusal(
            f"{home_name} is not among the imported fla modules (sys.modules)", _KDA_DIRECT
        )

    try:
        from kernel_fun._common import compat
        from kernel_fun.kda import chunk_kda as replacement
    except Exception as exc:
        raise PatchError(
            f"cannot patch fla: kernel_fun.kda does not import ({type(exc).__name__}: {exc})"
        ) from exc
    if original is replacement:
        raise PatchError(
            f"cannot patch fla: {home_name}.{_KDA_NAME} is already kernel_fun.kda.chunk_kda, "
            f"but not through kernel_fun.patch_fla, so fla's original is unknown here; "
            f"restore fla's function before patching"
        )
    try:
        compat.remember_original(original, "chunk_kda")
    except Exception as exc:
        raise PatchError(
            f"cannot patch fla: recording fla's original {_KDA_NAME} failed ({exc})"
        ) from exc
    return _Patch("kda", original, replacement, sites)


def _plan_kda_all() -> list[_Patch]:
    """Family kda replaces one function: fla's public chunk_kda."""
    return [_plan_kda()]


_PLANNERS: dict[str, Callable[[], list[_Patch]]] = {"cconv": _plan_cconv_all, "kda": _plan_kda_all}


# ------------------------------------------------------------------------------------------
# apply / restore
# ------------------------------------------------------------------------------------------


def _swap(sites: list[_Site], old: Any, new: Any) -> list[_Site]:
    """Set every site from `old` to `new`; on a failure put back the ones done and raise."""
    done: list[_Site] = []
    for site in sites:
        try:
            setattr(site.module, site.attr, new)
        except Exception as exc:
            for earlier in reversed(done):
                setattr(earlier.module, earlier.attr, old)
            raise PatchError(f"cannot patch fla: setting {site.name} failed ({exc})") from exc
        done.append(site)
    return done


def _qualname(fn: Any) -> str:
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__name__', repr(fn))}"


def _describe(p: _Patch, sites: list[_Site]) -> str:
    """ "fla X causal_conv1d -> kernel_fun... at N place(s): a, b, ..." for the logs."""
    what = getattr(p.original, "__name__", p.family)
    where = ", ".join(s.name for s in sites)
    return (
        f"fla {_fla_version()} {what} -> {_qualname(p.replacement)} "
        f"at {len(sites)} place(s): {where}"
    )


def patch_fla(families: str | Iterable[str] | None = None) -> dict[str, tuple[str, ...]]:
    """Route fla's own calls of each family through kernel-fun (see the module docstring).

    families: a family name or an iterable of them; known: KNOWN_FAMILIES ("cconv", "kda");
    None (the default): every known family.
    Returns {family: names ("module.attr") of every fla attribute now holding the
    replacement}. A family already patched is left as it is, except that fla modules imported
    since, which bound fla's original, are patched too.

    Raises ValueError for an unknown family name (listing the known ones) or an empty
    iterable (None, not an empty list, means every family), and PatchError
    when the installed fla lacks what a family replaces, or kernel_fun's replacement does
    not import; then nothing is patched (all families of the call are rolled back).
    A family patched here stays patched until `unpatch_fla`, whatever `patched_fla` blocks
    open and close around it.
    """
    names = _families(families)
    with _LOCK:
        result = _patch(names)
        _EXPLICIT.update(names)
        return result


def _patch(names: tuple[str, ...]) -> dict[str, tuple[str, ...]]:
    """patch_fla's work, without marking the families as explicitly patched."""
    with _LOCK:
        plans: list[tuple[str, list[_Patch]]] = []
        extensions: list[tuple[_Patch, list[_Site]]] = []
        for name in names:
            active = _ACTIVE.get(name)
            if active is not None:
                extensions.extend((p, _holders(p.original)) for p in active)
            else:
                plans.append((name, _PLANNERS[name]()))
        applied: list[tuple[_Patch, list[_Site]]] = []
        try:
            for _, ps in plans:
                for p in ps:
                    applied.append((p, _swap(p.sites, p.original, p.replacement)))
            for p, new_sites in extensions:
                applied.append((p, _swap(new_sites, p.original, p.replacement)))
        except Exception:
            for p, done in reversed(applied):
                for site in reversed(done):
                    setattr(site.module, site.attr, p.original)
            raise
        for name, ps in plans:
            _ACTIVE[name] = ps
            for p in ps:
                log.info("kernel-fun: patched %s", _describe(p, p.sites))
        for p, new_sites in extensions:
            if new_sites:
                p.sites.extend(new_sites)
                log.info("kernel-fun: patched (newly imported) %s", _describe(p, new_sites))
            else:
                log.debug("kernel-fun: %s is already patched; nothing to do", p.family)
        return {name: _site_names(_ACTIVE[name]) for name in names}


def _site_names(patches: list[_Patch]) -> tuple[str, ...]:
    return tuple(s.name for p in patches for s in p.sites)


def unpatch_fla(families: str | Iterable[str] | None = None) -> dict[str, tuple[str, ...]]:
    """Put fla's original objects back for each family (default: every patched family).

    Restores every attribute that `patch_fla` swapped and still holds the replacement, and
    every attribute of an fla module imported while patched that bound the replacement.
    An attribute someone else reassigned in the meantime is left alone, with a warning.
    A family that is not patched is a no-op. Returns {family: names restored}.
    Raises ValueError for an unknown family name or an empty iterable (as `patch_fla`).
    """
    names = _families(families)
    with _LOCK:
        _EXPLICIT.difference_update(names)
        return _unpatch(names)


def _unpatch(names: tuple[str, ...]) -> dict[str, tuple[str, ...]]:
    out: dict[str, tuple[str, ...]] = {}
    with _LOCK:
        for name in names:
            patches = _ACTIVE.pop(name, None)
            if patches is None:
                continue
            restored: list[str] = []
            for p in patches:
                restored.extend(_restore(p, name))
            out[name] = tuple(restored)
    return out


def _restore(p: _Patch, family: str) -> list[str]:
    """Put fla's original back wherever `p` replaced it (and in modules imported since)."""
    restored: list[str] = []
    recorded = {(id(s.module), s.attr) for s in p.sites}
    late = [s for s in _holders(p.replacement) if (id(s.module), s.attr) not in recorded]
    for site in [*p.sites, *late]:
        current = _get(site.module, site.attr)
        if current is p.replacement:
            setattr(site.module, site.attr, p.original)
            restored.append(site.name)
        else:
            log.warning(
                "kernel-fun: %s no longer holds kernel-fun's %s (reassigned while "
                "patched); left as it is",
                site.name,
                getattr(p.original, "__name__", family),
            )
    log.info(
        "kernel-fun: unpatched %s: fla's own %s restored at %d place(s)",
        family,
        getattr(p.original, "__name__", family),
        len(restored),
    )
    return restored


@contextlib.contextmanager
def patched_fla(
    families: str | Iterable[str] | None = None,
) -> Iterator[dict[str, tuple[str, ...]]]:
    """Context manager: `patch_fla(families)` on entry, undo on exit (also on an exception).
    families as for `patch_fla` (default: every known family).

    Blocks are counted per family: on exit a family is unpatched only when no other open
    block holds it and no `patch_fla` call (before or inside the block) asked for it, so
    blocks nest, overlap and exit in any order (threads included), and a family patched
    explicitly stays patched. An explicit `unpatch_fla` inside a block unpatches at once.
    Yields what `patch_fla` returns. Raises as `patch_fla` does, on entry (then nothing is
    held).
    """
    names = _families(families)
    with _LOCK:
        result = _patch(names)
        for n in names:
            _HOLDS[n] = _HOLDS.get(n, 0) + 1
    try:
        yield result
    finally:
        with _LOCK:
            done = []
            for n in names:
                _HOLDS[n] -= 1
                if _HOLDS[n] == 0:
                    del _HOLDS[n]
                    if n not in _EXPLICIT:
                        done.append(n)
            if done:
                _unpatch(tuple(done))


def is_patched(family: str = "cconv") -> bool:
    """Is `family` currently patched into fla by this module? ValueError if unknown."""
    (name,) = _families(family)
    return name in _ACTIVE


def patched_sites(family: str = "cconv") -> tuple[str, ...]:
    """Names ("module.attr") of the fla attributes `family` replaced; () when not patched."""
    (name,) = _families(family)
    patches = _ACTIVE.get(name)
    return () if patches is None else _site_names(patches)
