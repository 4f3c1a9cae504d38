"""GPU test speed-up, opt-in: KERNEL_FUN_TEST_FLA_CONFIGS=N keeps at most N configs in each of
fla's autotuned kernels, so a cold machine compiles N configurations per kernel and key
instead of fla's whole list (up to 48; fla's kda chain then compiles for minutes per new
shape). Correctness tests do not depend on which configuration fla picks; timings do, so
the ladder and prodtime never use it. Kept: the N configs with the fewest pipeline stages,
then the fewest warps (the least shared memory and registers, so the most likely to fit);
the autotuner still benchmarks among them and drops any that fail to compile."""

from __future__ import annotations

import os

import pytest
from kernel_fun._testing import FLA_CONFIGS_ENV as ENV
from kernel_fun._testing import trim_fla_autotune


def pytest_configure(config):
    raw = os.environ.get(ENV, "").strip()
    if not raw:
        return
    if not raw.isdigit() or int(raw) < 1:
        raise pytest.UsageError(f"{ENV}={raw!r}: give a positive number of configs, e.g. 3")
    n = int(raw)
    here = os.path.dirname(os.path.abspath(__file__))
    outside = [a for a in config.args if not os.path.abspath(a.split("::")[0]).startswith(here)]
    if outside:  # the ladder's GPU tests time fla: its lists must stay whole there
        raise pytest.UsageError(
            f"{ENV} is for package/tests only (fla's timings elsewhere need its whole autotune "
            f"lists); run those paths separately: {outside}"
        )
    try:
        import fla  # noqa: F401
    except ImportError:
        return
    trimmed = trim_fla_autotune(n)
    config._kernel_fun_trimmed = trimmed  # for the report header


def pytest_report_header(config):
    trimmed = getattr(config, "_kernel_fun_trimmed", None)
    if trimmed:
        cut = sum(1 for b, a in trimmed.values() if a < b)
        return f"{ENV}: fla's autotune lists cut to <= {os.environ[ENV]} configs ({cut} kernels)"
    return None
