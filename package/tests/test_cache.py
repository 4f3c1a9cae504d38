"""kernel_fun._common.cache: the pure mode-order logic on CPU, the CuTe parts where cutlass is."""

from __future__ import annotations

import ctypes
import gc
import itertools
import random
import re
import weakref

import pytest
import torch
from kernel_fun._common import cache

CUTLASS_REASON = (
    "nvidia-cutlass-dsl is not installed (an optional extra, kernel-fun[cu12]/[cu13]); "
    "the CuTe view tests need it"
)


# ---------------------------------------------------------------- stride_order (pure)


def _is_compact_chain(shape, strides, order) -> bool:
    """Does `order` (outermost first) walk a compact layout: innermost stride 1, and each
    mode's stride the product of the next-inner mode's stride and size?"""
    expected = 1
    for d in reversed(order):
        if strides[d] != expected:
            return False
        expected = strides[d] * shape[d]
    return True


@pytest.mark.parametrize(
    ("shape", "strides", "perm", "expected"),
    [
        # plain row-major and column-major
        ((2, 3, 4), (12, 4, 1), (0, 1, 2), (0, 1, 2)),
        ((4, 2), (1, 4), (0, 1), (1, 0)),
        # the permuted view's modes are what come back
        ((2, 3, 4), (12, 4, 1), (2, 0, 1), (1, 2, 0)),
        # a size-1 mode whose stride makes it outermost: dim_order() misplaces it
        ((512, 128, 2, 1), (256, 1, 128, 131072), (0, 1, 2, 3), (3, 0, 2, 1)),
        # a size-1 mode tying with a sized mode goes inside it (torch's contiguous [1, 4, 8]
        # after a transpose)
        ((1, 4, 8), (8, 8, 1), (0, 1, 2), (1, 0, 2)),
        ((4, 1, 8), (8, 8, 1), (0, 1, 2), (0, 1, 2)),
        # a size-1 mode with a stride that fits nowhere keeps its place by stride
        ((4, 1, 8), (8, 3, 1), (0, 1, 2), (0, 1, 2)),
        # all modes size 1
        ((1, 1, 1), (7, 3, 9), (0, 1, 2), (0, 1, 2)),
    ],
)
def test_stride_order_cases(shape, strides, perm, expected):
    assert cache.stride_order(shape, strides, perm) == expected


def test_stride_order_matches_torch_dim_order_without_size_one_modes():
    rng = random.Random(0)
    for _ in range(200):
        ndim = rng.randint(1, 4)
        shape = [rng.randint(2, 5) for _ in range(ndim)]
        storage_perm = list(range(ndim))
        rng.shuffle(storage_perm)
        t = torch.empty([shape[d] for d in storage_perm]).permute(
            *[storage_perm.index(d) for d in range(ndim)]
        )
        perm = list(range(ndim))
        rng.shuffle(perm)
        got = cache.stride_order(t.shape, t.stride(), perm)
        assert got == tuple(t.permute(*perm).dim_order())


def test_stride_order_with_size_one_modes_is_a_compact_chain_over_the_same_memory():
    rng = random.Random(1)
    for _ in range(300):
        ndim = rng.randint(1, 5)
        sizes = [rng.choice([1, 1, 2, 3, 5]) for _ in range(ndim)]
        storage_perm = list(range(ndim))
        rng.shuffle(storage_perm)
        t = torch.arange(max(1, torch.Size(sizes).numel())).reshape(
            [sizes[d] for d in storage_perm]
        )
        t = t.permute(*[storage_perm.index(d) for d in range(ndim)])
        strides = list(t.stride())
        for d in range(ndim):  # torch leaves a size-1 mode's stride arbitrary
            if t.shape[d] == 1:
                strides[d] = rng.randint(0, 99)
        t = t.as_strided(t.shape, strides)
        canon = cache.canonical_strides(t.shape, t.stride())
        same = t.as_strided(t.shape, canon)
        assert torch.equal(same, t)  # same elements: only size-1 strides changed
        assert all(c == s for c, s, n in zip(canon, t.stride(), t.shape) if n != 1)
        perm = list(range(ndim))
        rng.shuffle(perm)
        order = cache.stride_order(t.shape, t.stride(), perm)
        pshape = [t.shape[p] for p in perm]
        pcanon = [canon[p] for p in perm]
        assert sorted(order) == list(range(ndim))
        assert _is_compact_chain(pshape, pcanon, order), (tuple(t.shape), strides, perm, order)


def test_canonical_strides_leave_sized_modes_alone():
    assert cache.canonical_strides((3, 5), (7, 2)) == (7, 2)
    assert cache.canonical_strides((4, 1, 8), (8, 3, 1)) == (8, 8, 1)
    assert cache.canonical_strides((8, 1), (1, 0)) == (1, 1)
    assert cache.canonical_strides((1, 8), (5, 1)) == (8, 1)


@pytest.mark.parametrize(
    ("shape", "strides", "perm", "match"),
    [
        ((2, 3), (3, 1), (0, 0), "permutation"),
        ((2, 3), (3, 1), (0, 1, 2), "permutation"),
        ((2, 3), (3,), (0, 1), "ranks"),
        ((2, 3), (3, -1), (0, 1), "negative"),
    ],
)
def test_stride_order_rejects_bad_input(shape, strides, perm, match):
    with pytest.raises(ValueError, match=match):
        cache.stride_order(shape, strides, perm)


# ---------------------------------------------------------------- outputs (CPU)


def test_out_specs_and_alloc_outs_give_fresh_tensors_of_the_same_layout():
    y = torch.randn(2, 5, 3, dtype=torch.bfloat16)
    dw = torch.randn(3, 4)
    specs = cache.out_specs(y, dw)
    assert specs == (((2, 5, 3), torch.bfloat16), ((3, 4), torch.float32))
    first = cache.alloc_outs(specs, "cpu")
    second = cache.alloc_outs(specs, torch.device("cpu"))
    for a, b, ref in zip(first, second, (y, dw)):
        assert a.shape == ref.shape and a.dtype == ref.dtype and a.is_contiguous()
        assert a.device.type == "cpu"
        assert a.data_ptr() != b.data_ptr() != ref.data_ptr()  # never shared across calls


# ---------------------------------------------------------------- keepalive release (no cutlass)


class _FakeView:
    """Stands in for a CuTe view: a descriptor pointer and, optionally, keepalive fields."""

    def __init__(self, fields):
        self.materialized = False
        for name in fields:
            setattr(self, name, object())

    def __c_pointers__(self):
        self.materialized = True
        return [0]


def test_release_keepalives_nulls_the_fields_after_materializing():
    views = [_FakeView(cache.KEEPALIVE_FIELDS) for _ in range(2)]
    cache.release_keepalives(*views)
    for v in views:
        assert v.materialized
        assert all(getattr(v, name) is None for name in cache.KEEPALIVE_FIELDS)


@pytest.mark.parametrize("kept", [(), ("_dlpack_data",), ("_dltensor_wrapper",)])
def test_release_keepalives_fails_loudly_when_the_fields_are_gone(kept):
    with pytest.raises(RuntimeError, match="KEEPALIVE_FIELDS"):
        cache.release_keepalives(_FakeView(kept))


# ---------------------------------------------------------------- CuTe views (needs cutlass)


def _strided(shape, strides):
    need = 1 + sum((n - 1) * s for n, s in zip(shape, strides))
    return torch.zeros(need + 64).as_strided(shape, strides)


TRICKY = [
    ((512, 128, 2, 1), (256, 1, 128, 131072), (0, 1, 2, 3)),
    ((512, 128, 2, 1), (256, 1, 128, 131072), (3, 2, 0, 1)),
    ((1, 4, 8), (8, 8, 1), (0, 1, 2)),
    ((4, 1, 8), (8, 3, 1), (2, 0, 1)),
    ((4, 1, 1, 8), (8, 2, 5, 1), (0, 1, 2, 3)),
    ((2, 1, 3, 1), (3, 3, 1, 1), (3, 1, 0, 2)),
    ((4, 1), (1, 5), (0, 1)),
]


def _view_shape(ct) -> list[str]:
    """The mode sizes of a CuTe view as its repr prints them ("?" for a dynamic mode)."""
    match = re.search(r" o \(([^)]*)\):", str(ct))
    assert match is not None, str(ct)
    return match.group(1).split(",")


@pytest.mark.parametrize(("shape", "strides", "perm"), TRICKY)
def test_cute_view_accepts_every_mode_dynamic_on_tricky_layouts(shape, strides, perm):
    pytest.importorskip("cutlass", reason=CUTLASS_REASON)
    t = _strided(shape, strides)
    permuted = [str(n) for n in t.permute(*perm).shape]
    for m, _ in enumerate(shape):
        got = _view_shape(cache.cute_view(t, perm, (m,)))
        assert got == [("?" if i == m else n) for i, n in enumerate(permuted)]
    assert _view_shape(cache.cute_view(t, perm, tuple(range(len(shape))))) == ["?"] * len(shape)


def test_cute_view_of_a_tensor_that_requires_grad():
    pytest.importorskip("cutlass", reason=CUTLASS_REASON)
    w = torch.randn(16, 4, requires_grad=True)
    assert cache.cute_view(w, (1, 0), (1,)) is not None


def test_cute_view_rejects_bad_modes_and_misalignment():
    pytest.importorskip("cutlass", reason=CUTLASS_REASON)
    t = torch.zeros(8, 8)
    with pytest.raises(ValueError, match="dyn_modes"):
        cache.cute_view(t, (0, 1), (2,))
    with pytest.raises(ValueError, match="aligned"):
        cache.cute_view(t.view(-1)[1:], (0,), (0,))


def test_retarget_rewrites_the_descriptor_data_pointer():
    pytest.importorskip("cutlass", reason=CUTLASS_REASON)
    a, b = torch.zeros(64, 32), torch.ones(64, 32)
    ct = cache.cute_view(a, (0, 1), (0,))
    word = ctypes.c_uint64.from_address(ct.__c_pointers__()[0])
    assert word.value == a.data_ptr()
    cache.retarget(ct, b)
    assert word.value == b.data_ptr()
    with pytest.raises(ValueError, match="aligned"):
        cache.retarget(ct, b.view(-1)[1:])
    assert word.value == b.data_ptr()  # a refused retarget writes nothing


def test_release_keepalives_frees_the_exporting_storage():
    pytest.importorskip("cutlass", reason=CUTLASS_REASON)
    np = pytest.importorskip("numpy")
    arr = np.zeros((64, 32), dtype=np.float32)  # weakref-able owner of the storage
    owner = weakref.ref(arr)
    t = torch.from_numpy(arr)
    del arr
    ct = cache.cute_view(t, (1, 0), (1,))
    pointers = ct.__c_pointers__()
    del t
    gc.collect()
    assert owner() is not None  # the view pins the first call's storage ...
    cache.release_keepalives(ct)
    gc.collect()
    assert owner() is None  # ... until released
    assert ct.__c_pointers__() == pointers  # and the view stays launchable


def test_every_permutation_of_a_contiguous_tensor_views():
    pytest.importorskip("cutlass", reason=CUTLASS_REASON)
    t = torch.zeros(2, 3, 1, 4)
    for perm in itertools.permutations(range(4)):
        assert cache.cute_view(t, perm, (0, 3)) is not None


# ---------------------------------------------------------------- streams (GPU)


@pytest.mark.gpu
def test_stream_handle_follows_the_current_stream():
    assert cache.stream_handle() == torch.cuda.current_stream().cuda_stream
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        assert cache.stream_handle() == side.cuda_stream
    assert cache.stream_handle() != side.cuda_stream


@pytest.mark.gpu
def test_alloc_outs_on_the_gpu():
    specs = cache.out_specs(torch.empty(3, 7, dtype=torch.bfloat16))
    (y,) = cache.alloc_outs(specs, "cuda")
    assert y.is_cuda and y.shape == (3, 7) and y.dtype == torch.bfloat16
