#!/usr/bin/env bash
# Everything that needs a GPU, in one call, on a machine that may have no package registry:
#   STAGES="env cconv layer ladder common prodtime" OUT=out bash tools/device.sh  (make device)
# Each stage writes $OUT/<stage>.log; `gpu-test` is all GPU tests at once, `cconv`, `layer`,
# `ladder` and `common` are its parts, for calls that must each end within a time limit.
# Stages joined by `+` run at the same time (e.g. STAGES="cconv+layer+common ladder prodtime"):
# cold caches make the test groups compile-bound on the CPU, so they overlap well; stages
# that time things (ladder, bench, prodtime) belong alone. Joined stages share the one GPU's
# memory: with PYTEST_WORKERS=4, kda+layer+common+cconv needs more than an 80 GB H100 holds
# (the layer group ran out of memory beside processes holding up to 41 GiB); on an H200 it fitted
# (earlier builds). So on a GPU of under 100000 MiB a joined group that holds `layer` runs its
# other members together and then `layer` alone (said on stderr): "kda+layer+common" there
# runs as "kda+common layer".
# Wheels in .whl/ (fla-core, flash-linear-attention, libcst, ruff) are installed into a
# private target first when fla or libcst is missing. Logs, records and JSON land in $OUT; the last lines
# printed are a summary table. A test stage that ran no test (every one skipped, e.g. no
# usable GPU, or none collected) has failed, whatever pytest's exit status. Exit status: 0
# every stage passed, 1 a stage failed, 2 an unknown stage name (checked before anything runs).
# Triton's cache (compiled kernels and autotune picks; fla's kda chain autotunes for minutes on
# a cold machine) travels between machines: parts tc-all.part-* in TRITON_CACHE_IN (default
# .tc, an ignored folder carried with the call) are unpacked into TRITON_CACHE_DIR first, and TRITON_CACHE_SAVE=1 packs the cache into
# $OUT/tc-all.part-* (15 MB parts) at the end, to copy into .tc/ for the next call;
# TRITON_CACHE_SAVE=picks packs only the autotune picks (*.autotune.json), which skip the
# timing of every config but not the compile of the picked one. Before any stage,
# tools/seed_picks.py writes fla's committed picks for this GPU model into the cache
# ($OUT/seed-picks.log; SEED_PICKS=0 skips it), to the same effect without a carried cache.
# On a cold machine the test groups are compile-bound: PYTEST_WORKERS=N runs the cconv, kda,
# layer and common groups in N pytest-xdist processes, and KERNEL_FUN_TEST_FLA_CONFIGS=N
# (package/tests/conftest.py) cuts fla's autotune lists to N configs for the package's tests
# (never for ladder, bench or prodtime, which time fla).
# BENCH_FAMILY (default cconv) picks the family the bench stage benches. BENCH_PLAN instead
# lists benches of any families, each its own shapes and knobs, entries separated by ';':
#   BENCH_PLAN="cconv 007 packed-131072-d2048,prod; kda 004 v128 --knob KDA_WY_WARPS=4"
# (family idea shapes [ladder bench options]); each runs as stage bench-N-FAMILY-IDEA.
# Blank entries are dropped; the plan needs a bench stage in STAGES and replaces BENCH_IDEAS,
# BENCH_FAMILY and BENCH_SHAPES (setting both is refused). Options are split at blanks.
# STAGE_TIMEOUT=S stops any one stage (each bench entry too) after S seconds (rc=124, "stopped
# at STAGE_TIMEOUT"), so the stages after it and the packing of records and logs still run
# inside a call's time limit (only the stage's own process: children it leaves are not).
# The bench stage packs the records written so far ($OUT/records.tar, new-records.txt) after
# every entry, so a run stopped from outside during an entry keeps the earlier ones' records.
# `fsdp2` trains a 2-layer KDA stack under FSDP2 on 2 GPUs, fla vs patched ($OUT/fsdp2.json,
# fsdp2.log).
# Two entry points for checking the summary logic without a GPU:
#   bash tools/device.sh --verdict RC LOG     the outcome line of a pytest run (exit 0 or 1)
#   bash tools/device.sh --summary OUT STAGE...   the summary of OUT/<stage>.rc files
set -uo pipefail

pytest_verdict() {  # rc log -> "rc=N", plus why when pytest ran no test (then N is never 0)
  local rc=$1 log=$2 line word n ran=0
  line=$(grep -E '([0-9]+ (passed|failed|skipped|deselected|errors?|xfailed|xpassed|warnings?)|no tests ran).* in [0-9.]+s' "$log" 2>/dev/null | tail -n 1)
  for word in passed failed error errors xfailed xpassed; do
    n=$(grep -oE "[0-9]+ $word\b" <<<"$line" | head -n 1)
    n=${n%% *}
    ran=$((ran + ${n:-0}))
  done
  if ((ran > 0)); then
    echo "rc=$rc"
    return
  fi
  line=$(sed -E 's/^=+ //; s/ =+$//' <<<"$line")
  echo "rc=$((rc == 0 ? 1 : rc)) ran no tests (${line:-no pytest summary line in the log})"
}

summarize() {  # out stage... -> the summary table; returns 0 when every stage passed
  local out=$1 stage f status=0
  shift
  echo "=== summary"
  for stage in "$@"; do
    for f in "$out/$stage".rc "$out/$stage"-*.rc; do
      [[ -f $f ]] || continue
      printf '  %-14s %s\n' "$(basename "$f" .rc)" "$(cat "$f")"
      [[ $(cat "$f") == "rc=0 "* ]] || status=1
    done
  done
  return $status
}

case ${1:-} in
  --verdict)
    v=$(pytest_verdict "$2" "$3")
    echo "$v"
    [[ $v == "rc=0" ]]
    exit $?
    ;;
  --summary)
    shift
    summarize "$@"
    exit $?
    ;;
esac

cd "$(dirname "$0")/.."
OUT=${OUT:-out}
STAGES=${STAGES:-"env cconv"}  # one call per stage group: a cold one can take minutes
PY=${PY:-python3}
BENCH_ONE=${BENCH_IDEAS+BENCH_IDEAS}${BENCH_FAMILY+ BENCH_FAMILY}${BENCH_SHAPES+ BENCH_SHAPES}
BENCH_IDEAS=${BENCH_IDEAS:-"000 001"}
BENCH_SHAPES=${BENCH_SHAPES:-all}
BENCH_FAMILY=${BENCH_FAMILY:-cconv}
export PYTHONUNBUFFERED=1
export TRITON_CACHE_DIR=${TRITON_CACHE_DIR:-/tmp/kf-triton-cache}

KNOWN="env gpu-test cconv kda layer ladder common bench drift prodtime fsdp2"
usage() {
  echo "device.sh: $1" >&2
  exit 2
}
[[ -n ${STAGES// /} ]] || usage "STAGES is empty (known stages: $KNOWN)"
for group in $STAGES; do  # every name is checked before anything runs
  [[ $group != +* && $group != *+ && $group != *++* ]] \
    || usage "empty stage in group '$group' of STAGES=\"$STAGES\" (join names with single +)"
  IFS=+ read -r -a members <<<"$group"
  for stage in "${members[@]}"; do
    if [[ " $KNOWN " != *" $stage "* ]]; then
      usage "unknown stage '$stage' in STAGES=\"$STAGES\" (known: $KNOWN)"
    fi
  done
done
case ${TRITON_CACHE_SAVE:-0} in
  0 | 1 | picks) ;;
  *) usage "TRITON_CACHE_SAVE=$TRITON_CACHE_SAVE: give 1 (the whole cache), picks (autotune picks only) or 0" ;;
esac
if [[ -n ${STAGE_TIMEOUT:-} && ! ${STAGE_TIMEOUT} =~ ^[1-9][0-9]*$ ]]; then
  usage "STAGE_TIMEOUT=$STAGE_TIMEOUT: give a positive number of seconds"
fi
PLAN=()  # BENCH_PLAN's entries (blank ones dropped), checked before anything runs
if [[ -n ${BENCH_PLAN+x} ]]; then
  [[ $BENCH_PLAN != *[$'\n\r']* ]] \
    || usage "BENCH_PLAN holds a line break: separate its entries with ';' on one line"
  [[ " $STAGES " == *[\ +]bench[\ +]* ]] \
    || usage "BENCH_PLAN is set but STAGES=\"$STAGES\" has no bench stage to run it"
  [[ -z $BENCH_ONE ]] \
    || usage "BENCH_PLAN and ${BENCH_ONE# } are both set: the plan names each bench's family, idea and shapes"
  IFS=';' read -r -a entries <<<"$BENCH_PLAN"
  for entry in "${entries[@]}"; do
    read -r -a words <<<"$entry"
    ((${#words[@]})) || continue
    ((${#words[@]} >= 3)) && [[ ${words[0]} =~ ^[a-z][a-z0-9_]*$ && ${words[1]} =~ ^[0-9A-Za-z][0-9A-Za-z-]*$ ]] \
      || usage "BENCH_PLAN entry '$entry': give 'family idea shapes [options]', entries separated by ';'"
    PLAN+=("$entry")
  done
  ((${#PLAN[@]})) || usage "BENCH_PLAN='$BENCH_PLAN' has no entry ('family idea shapes [options]')"
fi
if [[ -n ${PYTEST_WORKERS:-} ]]; then
  [[ $PYTEST_WORKERS =~ ^[1-9][0-9]*$ ]] \
    || usage "PYTEST_WORKERS=$PYTEST_WORKERS: give a positive number of pytest-xdist processes"
  "$PY" -c "import xdist" 2>/dev/null \
    || usage "PYTEST_WORKERS needs pytest-xdist, which $PY cannot import (unset PYTEST_WORKERS)"
fi
mkdir -p "$OUT"
OUT_ABS=$(cd "$OUT" && pwd)

if ! "$PY" -c "import fla, libcst" >/dev/null 2>&1 && compgen -G ".whl/*.whl" >/dev/null; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/kf-site .whl/*.whl || exit 1
  export PYTHONPATH="/tmp/kf-site${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONPATH="$PWD:$PWD/package/src${PYTHONPATH:+:$PYTHONPATH}"

rm -f "$OUT"/*.rc  # outcomes of an earlier run in the same OUT

TRITON_CACHE_IN=${TRITON_CACHE_IN:-.tc}
if compgen -G "$TRITON_CACHE_IN/tc-all.part-*" >/dev/null; then  # a previous machine's cache
  # unpacked aside and moved in only whole: a cut-off archive must not leave a truncated
  # kernel in the cache for Triton to load later
  unpacked=$(mktemp -d)
  if cat "$TRITON_CACHE_IN"/tc-all.part-* | tar -xzf - -C "$unpacked" --strip-components=1; then
    mkdir -p "$TRITON_CACHE_DIR"
    cp -a "$unpacked"/. "$TRITON_CACHE_DIR"/
    echo "device.sh: unpacked $(find "$unpacked" -type f | wc -l) cache files from $TRITON_CACHE_IN" >&2
  else
    echo "device.sh: $TRITON_CACHE_IN holds no readable cache (parts missing, stale or" \
      "corrupt: copy all of one save's tc-all.part-* and nothing else); starting cold" >&2
  fi
  rm -rf "$unpacked"
fi
# fla's committed autotune picks for this GPU model (docs/results/*-fla-picks-*.json), written
# into Triton's cache so that fla skips its tuning at those keys; SEED_PICKS=0 leaves the
# cache as it is. The end of the call says whether any seeded key was tuned again.
if [[ ${SEED_PICKS:-1} != 0 && -f tools/seed_picks.py ]]; then
  "$PY" tools/seed_picks.py >"$OUT/seed-picks.log" 2>&1 \
    || echo "device.sh: seeding fla's picks failed ($OUT/seed-picks.log); fla tunes as usual" >&2
  grep -E 'seeded [0-9]+ keys|nothing seeded' "$OUT/seed-picks.log" | sed 's/^/device.sh: /' >&2
fi

DONE=()
run_stage() {  # name, command...; the outcome goes to $OUT/<name>.rc (stages may run at once)
  local name=$1
  shift
  local t0=$SECONDS
  echo "=== $name: $*"
  local limit=()
  if [[ -n ${STAGE_TIMEOUT:-} ]]; then
    # --foreground: the stage stays in this script's process group, so a signal that stops
    # the run (a call's own time limit, Ctrl-C) reaches it as before
    limit=(timeout --foreground -k 10 "$STAGE_TIMEOUT")
  fi
  "${limit[@]}" "$@" >"$OUT/$name.log" 2>&1
  local rc=$?
  local outcome="rc=$rc"
  if [[ ${PYTEST_STAGE:-0} == 1 ]]; then  # a test stage that ran no test has failed
    outcome=$(pytest_verdict "$rc" "$OUT/$name.log")
  fi
  if [[ -n ${STAGE_TIMEOUT:-} ]] && ((rc == 124 || rc == 137)) && ((SECONDS - t0 >= STAGE_TIMEOUT)); then
    echo "device.sh: stopped at STAGE_TIMEOUT=${STAGE_TIMEOUT}s" >>"$OUT/$name.log"
    outcome="rc=$rc stopped at STAGE_TIMEOUT=${STAGE_TIMEOUT}s"
  fi
  local secs="$((SECONDS - t0))s"
  # "rc=N 12s[ why]": the summary and its exit status read the leading rc=N
  local code=${outcome%% *}
  echo "$code $secs${outcome#"$code"}" >"$OUT/$name.rc"
  echo "=== $name done: $(cat "$OUT/$name.rc")"
  tail -n 25 "$OUT/$name.log"
}

one_stage() {
  local stage=$1
  case $stage in
    env)
      run_stage env bash -c "nvidia-smi && $PY -c 'import kernel_fun, json; print(json.dumps(kernel_fun.versions()))'"
      ;;
    gpu-test)  # all of it: what `make gpu-test` runs (several minutes of compiling/autotuning)
      PYTEST_STAGE=1 run_stage gpu-test "$PY" -m pytest -q -m gpu -rs -p no:cacheprovider \
        --junitxml "$OUT/gpu-test.xml" tests package/tests
      ;;
    cconv | kda | layer | ladder | common)  # the same tests, one group per call
      case $stage in
        cconv) files="package/tests/test_cconv_gpu.py package/tests/test_cconv_box_gpu.py" ;;
        kda) files=package/tests/test_kda_gpu.py ;;
        layer) files=package/tests/test_kda_layer_gpu.py ;;
        ladder) files=tests/test_ladder_gpu.py ;;
        common) files="package/tests/test_cache.py package/tests/test_support.py package/tests/test_versions.py" ;;
      esac
      workers=()  # PYTEST_WORKERS=N: N pytest-xdist processes (compile-bound groups, not ladder)
      if [[ -n ${PYTEST_WORKERS:-} && $stage != ladder ]]; then
        workers=(-n "$PYTEST_WORKERS")
      fi
      # shellcheck disable=SC2086
      PYTEST_STAGE=1 run_stage "$stage" "$PY" -m pytest -q -m gpu -rs -p no:cacheprovider \
        "${workers[@]}" --junitxml "$OUT/$stage.xml" $files
      ;;
    bench)  # records need LADDER_COMMIT/LADDER_DIRTY when the tree has no usable .git
      before=$(mktemp)
      find ladder/kernels -path '*/records/*.json' | sort >"$before"
      export LADDER_RESCUE_DIR=${LADDER_RESCUE_DIR:-$OUT_ABS/rescue}  # records that failed to write
      pack_records() {  # after every entry: a call stopped in a later one keeps these
        find ladder/kernels -path '*/records/*.json' | sort | comm -13 "$before" - >"$OUT/new-records.txt"
        tar -cf "$OUT/records.tar.part" -T "$OUT/new-records.txt" && mv -f "$OUT/records.tar.part" "$OUT/records.tar"
      }
      if ((${#PLAN[@]})); then
        n=0
        for entry in "${PLAN[@]}"; do
          read -r -a words <<<"$entry"
          n=$((n + 1))
          run_stage "bench-$n-${words[0]}-${words[1]}" "$PY" -m ladder bench "${words[0]}" \
            "${words[1]}" --shapes "${words[2]}" "${words[@]:3}"
          pack_records
        done
      else
        for idea in $BENCH_IDEAS; do
          run_stage "bench-$idea" "$PY" -m ladder bench "$BENCH_FAMILY" "$idea" --shapes "$BENCH_SHAPES"
          pack_records
        done
      fi
      pack_records
      ;;
    drift)
      run_stage drift "$PY" tools/drift.py
      ;;
    prodtime)
      run_stage prodtime "$PY" tools/prodtime.py --out "$OUT/prodtime.json"
      ;;
    fsdp2)  # 2 processes, one GPU each: fla vs patch_fla() under FSDP2 (needs 2 GPUs)
      run_stage fsdp2 "$PY" -m torch.distributed.run --standalone --nproc_per_node 2 \
        tools/fsdp2_kda.py --out "$OUT/fsdp2.json"
      ;;
    *)  # unreachable: names are checked above
      return 2
      ;;
  esac
}

LAYER_APART_BELOW_MIB=100000  # an 80 GB H100 reports 81559 MiB, an H200 143771
gpu_mib() {  # the smallest total memory of the GPUs nvidia-smi lists, in MiB; empty if unknown
  local out
  command -v nvidia-smi >/dev/null 2>&1 || return 0
  out=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits 2>/dev/null) || return 0
  sed 's/[[:space:]]//g' <<<"$out" | grep -E '^[0-9]+$' | sort -n | head -n 1
}
split_layer() {  # group -> the group, or "others layer" when layer must run apart on this GPU
  local group=$1 mib rest
  [[ $group == *+* && "+$group+" == *+layer+* ]] || { echo "$group"; return; }
  mib=$(gpu_mib)
  [[ -n $mib ]] && ((mib < LAYER_APART_BELOW_MIB)) || { echo "$group"; return; }
  rest=$(tr '+' '\n' <<<"$group" | grep -vx layer | paste -sd+ -)
  echo "device.sh: on this ${mib} MiB GPU the layer group runs after $rest, not beside it" \
    "(beside the other groups it ran out of memory on an 80 GB card)" >&2
  echo "$rest layer"
}
GROUPS_RUN=()
for group in $STAGES; do
  read -r -a parts <<<"$(split_layer "$group")"
  GROUPS_RUN+=("${parts[@]}")
done
for group in "${GROUPS_RUN[@]}"; do
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

if [[ ${SEED_PICKS:-1} != 0 && -f tools/seed_picks.py ]]; then
  "$PY" tools/seed_picks.py --verify >>"$OUT/seed-picks.log" 2>&1
  grep -E 'seeded keys used|nothing seeded in' "$OUT/seed-picks.log" | tail -n 1 | sed 's/^/device.sh: /' >&2
fi

if [[ ${TRITON_CACHE_SAVE:-0} != 0 ]]; then
  rm -f "$OUT"/tc-all.part-*  # an earlier save's parts would join this one's archive
  if [[ ! -d $TRITON_CACHE_DIR ]]; then
    echo "device.sh: TRITON_CACHE_SAVE=$TRITON_CACHE_SAVE: no cache at $TRITON_CACHE_DIR to pack" >&2
  else
    pattern='*'  # 1: the whole cache
    # picks: the autotune picks alone (kilobytes): the next machine compiles each picked
    # config once instead of timing every config, and the parts stay far below the
    # files-back limits
    [[ $TRITON_CACHE_SAVE == picks ]] && pattern='*.autotune.json'
    (cd "$(dirname "$TRITON_CACHE_DIR")" \
      && find "$(basename "$TRITON_CACHE_DIR")" -type f -name "$pattern" -print0 \
      | tar -czf - --null -T -) | split -b 15m - "$OUT/tc-all.part-"
    n=$(find "$TRITON_CACHE_DIR" -type f -name "$pattern" | wc -l)
    echo "device.sh: packed $n cache files ($TRITON_CACHE_SAVE) into $OUT/tc-all.part-*" >&2
  fi
fi

summarize "$OUT" "${DONE[@]}"
exit $?  # 0: every stage passed; 1: a stage failed (its log says why); 2: usage
