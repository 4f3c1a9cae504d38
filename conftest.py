"""Shared pytest policy: tests marked `gpu` run only where a CUDA GPU of sm90 or newer is."""

from __future__ import annotations

import pytest


def _gpu_skip_reason() -> str | None:
    try:
        import torch
    except ImportError:
        return "torch is not installed"
    if not torch.cuda.is_available():
        return "no CUDA GPU on this machine (GPU tests run through `make gpu-test` on the H200)"
    major, minor = torch.cuda.get_device_capability()
    if major < 9:
        return f"GPU is sm{major}{minor}; these kernels need sm90 or newer"
    return None


def pytest_collection_modifyitems(config, items):
    gpu_items = [it for it in items if "gpu" in it.keywords]
    if not gpu_items:
        return
    reason = _gpu_skip_reason()
    if reason is None:
        return
    marker = pytest.mark.skip(reason=reason)
    for it in gpu_items:
        it.add_marker(marker)
