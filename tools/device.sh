#!/usr/bin/env bash
# Everything that needs a GPU, in one call, on a machine that may have no package registry:
#   STAGES="env gpu-test bench prodtime" OUT=out bash tools/device.sh     (or: make device)
# Wheels in .whl/ (fla-core, flash-linear-attention, libcst, ruff) are installed into a
# private target first when present. Logs, records and JSON land in $OUT; the last lines
# printed are a summary table.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-out}
mkdir -p "$OUT"
STAGES=${STAGES:-"env gpu-test bench prodtime"}
PY=${PY:-python3}
BENCH_IDEAS=${BENCH_IDEAS:-"000 001"}
BENCH_SHAPES=${BENCH_SHAPES:-all}
export PYTHONUNBUFFERED=1

if compgen -G ".whl/*.whl" >/dev/null; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/kf-site .whl/*.whl || exit 1
  export PYTHONPATH="/tmp/kf-site${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONPATH="$PWD:$PWD/package/src:$PYTHONPATH"

declare -A RESULT
run_stage() {  # name, command...
  local name=$1
  shift
  local t0=$SECONDS
  echo "=== $name: $*"
  "$@" >"$OUT/$name.log" 2>&1
  local rc=$?
  RESULT[$name]="rc=$rc $((SECONDS - t0))s"
  tail -n 25 "$OUT/$name.log"
}

for stage in $STAGES; do
  case $stage in
    env)
      run_stage env bash -c "nvidia-smi; $PY -c 'import kernel_fun, json; print(json.dumps(kernel_fun.versions()))'; ls -a; git rev-parse HEAD 2>&1 | head -1"
      ;;
    gpu-test)
      run_stage gpu-test "$PY" -m pytest -q -m gpu -rs -p no:cacheprovider \
        --junitxml "$OUT/gpu-test.xml" tests package/tests
      ;;
    bench)
      before=$(mktemp)
      find ladder/kernels -path '*/records/*.json' | sort >"$before"
      for idea in $BENCH_IDEAS; do
        run_stage "bench-$idea" "$PY" -m ladder bench cconv "$idea" --shapes "$BENCH_SHAPES"
      done
      find ladder/kernels -path '*/records/*.json' | sort | comm -13 "$before" - >"$OUT/new-records.txt"
      tar -cf "$OUT/records.tar" -T "$OUT/new-records.txt"
      ;;
    vendor-drift)
      run_stage vendor-drift bash -c "$PY tools/vendor.py cconv --dry-run && $PY tools/drift.py"
      ;;
    prodtime)
      run_stage prodtime "$PY" tools/prodtime.py --out "$OUT/prodtime.json"
      ;;
    *)
      echo "unknown stage $stage (env gpu-test bench vendor-drift prodtime)" >&2
      exit 2
      ;;
  esac
done

echo "=== summary"
for stage in "${!RESULT[@]}"; do
  printf '  %-14s %s\n' "$stage" "${RESULT[$stage]}"
done
