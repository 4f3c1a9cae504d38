"""Call-cache helpers for kernels compiled with the CuTe DSL (nvidia-cutlass-dsl).

Turning a torch tensor into a CuTe tensor (`from_dlpack` plus layout marks) costs tens of
microseconds per argument, which is more than a small kernel runs. A CuTe family therefore
builds its views once per cache entry and, on every later call, only rewrites the data
pointer inside each view's descriptor before launching:

  cute_view           a torch tensor as a CuTe tensor in the mode order the kernel wants, with
                      chosen modes dynamic so that one compile serves every batch and length
  retarget            point a cached view at this call's tensor (one 64-bit store)
  release_keepalives  drop the DLPack references a cached view holds on the tensor it was
                      made from (a leak fix, see below)
  out_specs/alloc_outs  what a cache entry keeps of its outputs: shapes and dtypes, never
                      tensors; outputs are allocated fresh on every call and retargeted
  stream_handle       the current CUDA stream's raw handle, for the launch

Why release_keepalives exists: `from_dlpack` keeps the exporting tensor alive for as long
as the view lives, so a cached view pins the storage of the first call's tensors for the
life of the process. At production shapes that is gigabytes that the caching allocator can
never reuse, and the memory pressure it adds is what drives the allocator into synchronizing
retries. A cached view needs only its own descriptor, because `retarget` rewrites the data
pointer before every launch.

Why outputs are never cached: a cache-owned output tensor is silently shared by every call
that hits the entry, so the second call overwrites what the first returned; a benchmark that
makes one call per iteration cannot see it.

cutlass and torch are imported inside the functions; `stride_order` and
`canonical_strides` are pure and need neither.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

# Fields of cutlass.cute.runtime._Tensor that keep the exporting tensor alive (checked
# against nvidia-cutlass-dsl 4.8.1). If a release renames them, release_keepalives fails
# loudly rather than quietly going back to pinning memory.
KEEPALIVE_FIELDS: tuple[str, ...] = ("_dlpack_data", "_dltensor_wrapper")

DEFAULT_ALIGN = 16  # bytes; the alignment the compiled kernels assume for every view


def _check_perm(perm: Sequence[int], ndim: int) -> tuple[int, ...]:
    perm = tuple(int(p) for p in perm)
    if sorted(perm) != list(range(ndim)):
        raise ValueError(f"perm must be a permutation of range({ndim}), got {perm}")
    return perm


def _check_layout(shape: Sequence[int], strides: Sequence[int]) -> tuple[tuple[int, ...], ...]:
    shape = tuple(int(s) for s in shape)
    strides = tuple(int(s) for s in strides)
    if len(shape) != len(strides):
        raise ValueError(f"shape {shape} and strides {strides} have different ranks")
    if any(s < 0 for s in shape) or any(s < 0 for s in strides):
        raise ValueError(f"negative size or stride in {shape}:{strides}")
    return shape, strides


def _outer_to_inner(shape: tuple[int, ...], strides: tuple[int, ...]) -> list[int]:
    """Modes ordered outermost to innermost by stride.

    On a tie, a size-1 mode goes inside the sized mode it ties with: that is where its
    stride fits a compact chain (torch gives the size-1 mode of a contiguous [4, 1, 8] the
    stride 8, tying with mode 0). Remaining ties keep mode order.
    """
    return sorted(range(len(shape)), key=lambda d: (-strides[d], shape[d] == 1, d))


def canonical_strides(shape: Sequence[int], strides: Sequence[int]) -> tuple[int, ...]:
    """`strides` with every size-1 mode's stride rewritten to fit a compact chain.

    A size-1 mode's stride never affects which elements a tensor addresses, so torch leaves
    it arbitrary (slicing and as_strided keep whatever they had), but CuTe checks every stride
    against the mode order. Each size-1 mode keeps its place in the stride order and gets the
    stride the compact chain gives that place: inner neighbour's stride times its size, or 1
    when it is innermost. Sized modes are unchanged. Raises ValueError on mismatched ranks or
    negative values.
    """
    shape, strides = _check_layout(shape, strides)
    out = list(strides)
    inner_extent = 1  # stride * size of the next-inner mode
    for d in reversed(_outer_to_inner(shape, strides)):
        if shape[d] == 1:
            out[d] = inner_extent
        inner_extent = out[d] * shape[d]
    return tuple(out)


def stride_order(
    shape: Sequence[int], strides: Sequence[int], perm: Sequence[int]
) -> tuple[int, ...]:
    """The CuTe ``stride_order`` of ``t.permute(perm)``, from the UNPERMUTED shape and strides.

    Returns the modes of the permuted tensor from outermost to innermost (the convention of
    ``torch.Tensor.dim_order()`` and of CuTe's ``mark_compact_shape_dynamic``). It is taken
    from the unpermuted layout, after `canonical_strides`, and mapped through `perm`: there
    the order is decided by strides alone, whereas both ``dim_order()`` and a sort of the
    permuted strides place size-1 modes by tie-breaking rules that CuTe then rejects.

    Raises ValueError when `perm` is not a permutation of the modes, the ranks differ, or a
    size or stride is negative.
    """
    shape, strides = _check_layout(shape, strides)
    perm = _check_perm(perm, len(shape))
    order = _outer_to_inner(shape, canonical_strides(shape, strides))
    new_of_old = {old: new for new, old in enumerate(perm)}
    return tuple(new_of_old[d] for d in order)


def cute_view(
    t: torch.Tensor,
    perm: Sequence[int],
    dyn_modes: Sequence[int],
    *,
    align: int = DEFAULT_ALIGN,
) -> Any:
    """A CuTe tensor viewing ``t.permute(perm)``, with modes `dyn_modes` marked dynamic.

    `t`: any dtype CuTe supports, compact in some mode order (a permutation of a contiguous
    tensor); its data pointer must be a multiple of `align` bytes. `dyn_modes` index the
    permuted tensor. The view is made from ``t.detach()`` (DLPack refuses tensors that require
    grad, and the families' backward passes are hand-written), with size-1 strides made
    canonical (same memory). Raises ValueError for a bad perm, a mode out of range or a
    misaligned pointer; errors from CuTe (e.g. a non-compact layout) propagate.
    """
    from cutlass.cute.runtime import from_dlpack

    t = t.detach()
    perm = _check_perm(perm, t.dim())
    bad = [m for m in dyn_modes if not 0 <= m < t.dim()]
    if bad:
        raise ValueError(f"dyn_modes {bad} out of range for a {t.dim()}-mode tensor")
    _check_aligned(t, align)
    strides = canonical_strides(t.shape, t.stride())
    if strides != tuple(t.stride()):
        t = t.as_strided(t.shape, strides, t.storage_offset())
    order = stride_order(t.shape, strides, perm)
    ct = from_dlpack(t.permute(*perm), assumed_align=align)
    for m in dyn_modes:
        ct = ct.mark_compact_shape_dynamic(mode=m, stride_order=order)
    return ct


def _check_aligned(t: torch.Tensor, align: int) -> None:
    ptr = t.data_ptr()
    if ptr % align:
        raise ValueError(
            f"tensor data pointer {ptr:#x} is not {align}-byte aligned (a sliced view?); "
            f"pass a .contiguous() copy"
        )


def retarget(ct: Any, t: torch.Tensor, *, align: int = DEFAULT_ALIGN) -> None:
    """Point cached CuTe view `ct` at `t`'s data: one 64-bit store into its descriptor.

    `t` must have the layout the view was made for (the cache key guarantees it) and a data
    pointer that is a multiple of `align` bytes (ValueError otherwise).
    """
    _check_aligned(t, align)
    ctypes.c_uint64.from_address(ct.__c_pointers__()[0]).value = t.data_ptr()


def release_keepalives(*cts: Any) -> None:
    """Drop each CuTe view's DLPack references to the tensor it was made from.

    Call after ``cute.compile`` and before the entry enters a call cache, on every cached
    view, outputs included. The descriptor pointers are materialized first, so the views
    stay launchable (`retarget` supplies the data pointer). Raises RuntimeError when the
    installed cutlass no longer has the fields in KEEPALIVE_FIELDS: keeping the references
    would silently pin every cached tensor again.
    """
    for ct in cts:
        ct.__c_pointers__()  # builds and caches the descriptor before the source can go
        fields = vars(ct)
        missing = [name for name in KEEPALIVE_FIELDS if name not in fields]
        if missing:
            raise RuntimeError(
                f"{type(ct).__module__}.{type(ct).__qualname__} has no {missing}: this "
                f"cutlass release changed how views keep their source alive; update "
                f"kernel_fun._common.cache.KEEPALIVE_FIELDS before caching views"
            )
        for name in KEEPALIVE_FIELDS:
            fields[name] = None


def out_specs(*tensors: torch.Tensor) -> tuple[tuple[tuple[int, ...], torch.dtype], ...]:
    """``(shape, dtype)`` of each output: what a cache entry keeps instead of the tensors."""
    return tuple((tuple(t.shape), t.dtype) for t in tensors)


def alloc_outs(
    specs: Sequence[tuple[Sequence[int], torch.dtype]], device: torch.device | str
) -> tuple[torch.Tensor, ...]:
    """Fresh, uninitialised, contiguous tensors on `device`, one per ``(shape, dtype)`` spec."""
    import torch

    return tuple(torch.empty(tuple(shape), dtype=dtype, device=device) for shape, dtype in specs)


def stream_handle() -> int:
    """The raw ``cudaStream_t`` of torch's current CUDA stream, as an int.

    Compiled CuTe functions take the stream as an argument, so one cache entry serves every
    stream; a family that keys its cache on the stream too gets a cheap miss (views plus an
    allocation) on a new stream, never a compile.
    """
    import torch

    return int(torch.cuda.current_stream().cuda_stream)
