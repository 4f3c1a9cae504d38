"""cconv: depthwise causal conv1d (width W <= 4) with silu, as fla's causal_conv1d."""
