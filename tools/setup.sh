#!/usr/bin/env bash
# Create .venv and install what the tests need, without ever replacing a torch or triton that
# is already importable (training images bring their own CUDA builds).
#   PYTHON=python3.12 bash tools/setup.sh      # choose the interpreter (default: python3)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
VENV=${VENV:-.venv}

if [ ! -x "$VENV/bin/python" ]; then
  # --system-site-packages: a torch/triton installed with the interpreter stays visible.
  "$PY" -m venv --system-site-packages "$VENV"
fi
VPY="$VENV/bin/python"
"$VPY" -m pip install -q --upgrade pip

have() { "$VPY" -c "import $1" >/dev/null 2>&1; }

if ! have torch; then
  # A pinned version: with the CPU wheel index or a local wheel directory pip takes the
  # CPU build; from PyPI alone any torch requirement pulls a multi-GB CUDA build.
  "$VPY" -m pip install -q "torch==2.13.0"
fi
if ! have triton; then
  # Only the interpreter (TRITON_INTERPRET=1) runs here; the version the H200 image carries.
  "$VPY" -m pip install -q "triton==3.6.0"
fi

# Pin what is installed now so nothing below can move it.
CONSTRAINTS=$(mktemp)
trap 'rm -f "$CONSTRAINTS"' EXIT
"$VPY" - >"$CONSTRAINTS" <<'PYEOF'
import importlib.metadata as md
for dist in ("torch", "triton"):
    try:
        print(f"{dist}=={md.version(dist)}")
    except md.PackageNotFoundError:
        pass
PYEOF

"$VPY" -m pip install -q -c "$CONSTRAINTS" -r requirements-dev.txt
"$VPY" -m pip install -q -c "$CONSTRAINTS" --no-build-isolation -e package 2>/dev/null \
  || "$VPY" -m pip install -q -c "$CONSTRAINTS" -e package
"$VPY" - <<'PYEOF'
from importlib.metadata import version
import torch, triton, fla, libcst, kernel_fun
print(f"setup done: torch {torch.__version__}, triton {triton.__version__}, "
      f"fla {fla.__version__}, libcst {version('libcst')}, kernel_fun {kernel_fun.__version__}")
PYEOF
