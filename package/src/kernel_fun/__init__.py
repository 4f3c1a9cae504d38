"""kernel-fun: faster drop-in replacements for flash-linear-attention ops."""

__version__ = "0.3.0.dev0"
