"""What every op family of kernel-fun shares; no op logic lives here.

  support   can this call run on our kernels, and why not: environment switches read per
            call, architecture floors, the CUDA-graph capture gate, once-per-process logging
  compat    the fla symbols and keywords the package calls, as data, and the probe that
            checks them against the installed fla (run from warmup, never at import)
  cache     call-cache helpers for CuTe DSL kernels: views, pointer retargeting, keepalive
            release, fresh outputs

Importing this package imports none of torch, triton, fla or cutlass; the functions that
need them import them when called.
"""
