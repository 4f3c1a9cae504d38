#!/usr/bin/env bash
# Everything that needs a GPU, in one call, on a machine that may have no package registry:
#   STAGES="env cconv layer ladder common prodtime" OUT=out bash tools/device.sh  (make device)
# Each stage writes $OUT/<stage>.log; `gpu-test` is all GPU tests at once, `cconv`, `layer`,
# `ladder` and `common` are its parts, for calls that must each end within a time limit.
# Stages joined by `+` run at the same time (e.g. STAGES="cconv+layer+common ladder prodtime"):
# cold caches make the test groups compile-bound on the CPU, so they overlap well; stages
# that time things (ladder, bench, prodtime) belong alone.
# Wheels in .whl/ (fla-core, flash-linear-attention, libcst, ruff) are installed into a
# private target first when fla or libcst is missing. Logs, records and JSON land in $OUT; the last lines
# printed are a summary table. Exit status: 0 every stage passed, 1 a stage failed, 2 an
# unknown stage name (checked before anything runs).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-out}
mkdir -p "$OUT"
STAGES=${STAGES:-"env cconv"}  # one call per stage group: a cold one can take minutes
PY=${PY:-python3}
BENCH_IDEAS=${BENCH_IDEAS:-"000 001"}
BENCH_SHAPES=${BENCH_SHAPES:-all}
export PYTHONUNBUFFERED=1

KNOWN="env gpu-test cconv layer ladder common bench drift prodtime"
for group in $STAGES; do  # every name is checked before anything runs
  IFS=+ read -r -a members <<<"$group"
  for stage in "${members[@]}"; do
    if [[ " $KNOWN " != *" $stage "* ]]; then
      echo "device.sh: unknown stage '$stage' in STAGES=\"$STAGES\" (known: $KNOWN)" >&2
      exit 2
    fi
  done
done

if ! "$PY" -c "import fla, libcst" >/dev/null 2>&1 && compgen -G ".whl/*.whl" >/dev/null; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/kf-site .whl/*.whl || exit 1
  export PYTHONPATH="/tmp/kf-site${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONPATH="$PWD:$PWD/package/src${PYTHONPATH:+:$PYTHONPATH}"

rm -f "$OUT"/*.rc  # outcomes of an earlier run in the same OUT

DONE=()
run_stage() {  # name, command...; the outcome goes to $OUT/<name>.rc (stages may run at once)
  local name=$1
  shift
  local t0=$SECONDS
  echo "=== $name: $*"
  "$@" >"$OUT/$name.log" 2>&1
  local rc=$?
  echo "rc=$rc $((SECONDS - t0))s" >"$OUT/$name.rc"
  echo "=== $name done: rc=$rc $((SECONDS - t0))s"
  tail -n 25 "$OUT/$name.log"
}

one_stage() {
  local stage=$1
  case $stage in
    env)
      run_stage env bash -c "nvidia-smi && $PY -c 'import kernel_fun, json; print(json.dumps(kernel_fun.versions()))'"
      ;;
    gpu-test)  # all of it: what `make gpu-test` runs (several minutes of compiling/autotuning)
      run_stage gpu-test "$PY" -m pytest -q -m gpu -rs -p no:cacheprovider \
        --junitxml "$OUT/gpu-test.xml" tests package/tests
      ;;
    cconv | layer | ladder | common)  # the same tests, one group per call
      case $stage in
        cconv) files=package/tests/test_cconv_gpu.py ;;
        layer) files=package/tests/test_kda_layer_gpu.py ;;
        ladder) files=tests/test_ladder_gpu.py ;;
        common) files="package/tests/test_cache.py package/tests/test_support.py package/tests/test_versions.py" ;;
      esac
      # shellcheck disable=SC2086
      run_stage "$stage" "$PY" -m pytest -q -m gpu -rs -p no:cacheprovider \
        --junitxml "$OUT/$stage.xml" $files
      ;;
    bench)  # records need LADDER_COMMIT/LADDER_DIRTY when the tree has no usable .git
      before=$(mktemp)
      find ladder/kernels -path '*/records/*.json' | sort >"$before"
      for idea in $BENCH_IDEAS; do
        run_stage "bench-$idea" "$PY" -m ladder bench cconv "$idea" --shapes "$BENCH_SHAPES"
      done
      find ladder/kernels -path '*/records/*.json' | sort | comm -13 "$before" - >"$OUT/new-records.txt"
      tar -cf "$OUT/records.tar" -T "$OUT/new-records.txt"
      ;;
    drift)
      run_stage drift "$PY" tools/drift.py
      ;;
    prodtime)
      run_stage prodtime "$PY" tools/prodtime.py --out "$OUT/prodtime.json"
      ;;
    *)  # unreachable: names are checked above
      return 2
      ;;
  esac
}

for group in $STAGES; do
  IFS=+ read -r -a members <<<"$group"
  if ((${#members[@]} == 1)); then
    one_stage "${members[0]}" || exit 2
  else
    pids=()
    for stage in "${members[@]}"; do
      one_stage "$stage" &
      pids+=($!)
    done
    for pid in "${pids[@]}"; do wait "$pid" || exit 2; done
  fi
  DONE+=("${members[@]}")
done

echo "=== summary"
status=0
for stage in "${DONE[@]}"; do
  for f in "$OUT/$stage".rc "$OUT/$stage"-*.rc; do
    [[ -f $f ]] || continue
    printf '  %-14s %s\n' "$(basename "$f" .rc)" "$(cat "$f")"
    [[ $(cat "$f") == "rc=0 "* ]] || status=1
  done
done
exit $status  # 0: every stage passed; 1: a stage failed (its log says why); 2: usage
