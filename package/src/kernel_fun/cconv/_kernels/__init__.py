"""Kernels of the cconv family, promoted from the research ladder by tools/vendor.py."""

from .strip import cconv_bwd, cconv_fwd

__all__ = ["cconv_fwd", "cconv_bwd"]
