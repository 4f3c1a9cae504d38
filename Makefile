# kernel-fun: one entry point for every workflow. `make help` lists the targets.
SHELL := /bin/bash
.DEFAULT_GOAL := help

# The venv's python when there is one, else the interpreter on PATH (the H200 image).
PY ?= $(shell test -x .venv/bin/python && echo .venv/bin/python || echo python3)
export PYTHONPATH := $(CURDIR):$(CURDIR)/package/src$(if $(PYTHONPATH),:$(PYTHONPATH))

FAMILY ?= cconv
IDEA ?=
COMMIT ?=
RECORD ?=
DRY_RUN ?=
JSON ?=
STAGES ?=
SHAPES ?= all
KNOBS ?=
STRICT ?=
OUT ?= out
# Yes/no switches (DRY_RUN, STRICT, JSON): on for 1/yes/true/on, off when unset, 0, no, ...
on = $(filter 1 yes true on,$(shell echo '$(1)' | tr A-Z a-z))

.PHONY: help setup test gpu-test lint vendor drift bench board winner wheel prodtime fsdp2 device clean

help:  ## list the targets
	@grep -E '^[a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-10s %s\n", $$1, $$2}'

setup:  ## create .venv with everything the CPU tests need (keeps an installed torch/triton)
	bash tools/setup.sh

test:  ## every CPU test, one pytest-xdist worker per core (GPU-marked tests are deselected; `make gpu-test` runs them)
	$(PY) -m pytest -q -m "not gpu" -n auto --dist loadfile tests package/tests

gpu-test:  ## every GPU test, incl. an end-to-end prod bench (needs a CUDA GPU, sm90+); fails if none ran
	@mkdir -p $(OUT); set -o pipefail; \
	$(PY) -m pytest -q -m gpu -rs tests package/tests 2>&1 | tee $(OUT)/gpu-test.log; \
	bash tools/device.sh --verdict $$? $(OUT)/gpu-test.log

lint:  ## ruff check + format check
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .

vendor:  ## promote FAMILY's winner into package/ (IDEA=NNN RECORD=id COMMIT=sha DRY_RUN=1 optional)
	$(PY) tools/vendor.py $(FAMILY) $(if $(IDEA),--idea $(IDEA)) $(if $(RECORD),--record $(RECORD)) $(if $(COMMIT),--commit $(COMMIT)) $(if $(call on,$(DRY_RUN)),--dry-run)

drift:  ## is the package what vendor makes of its recorded source? (STRICT=1: stale, or a winner not vendored, is fatal)
	$(PY) tools/drift.py $(if $(call on,$(STRICT)),--strict) $(if $(call on,$(JSON)),--json)

bench:  ## bench IDEA of FAMILY on the GPU (SHAPES=prod|sweep|all|name,name; KNOBS="K=v K2=a,b" sweeps)
	$(PY) -m ladder bench $(FAMILY) $(IDEA) --shapes $(SHAPES)$(if $(KNOBS), $(addprefix --knob ,$(KNOBS)))

board:  ## rank FAMILY's ideas from committed records
	$(PY) -m ladder board $(FAMILY)

winner:  ## print FAMILY's promotable winner
	$(PY) -m ladder winner $(FAMILY)

wheel:  ## build the kernel-fun wheel into dist/ from a clean copy of package/, and check it
	$(PY) tools/wheelcheck.py build --outdir dist

prodtime:  ## fla vs kernel_fun at the production call and in a KDA layer step (GPU)
	$(PY) tools/prodtime.py --out $(OUT)/prodtime.json

fsdp2:  ## 2-layer KDA stack under FSDP2 on 2 GPUs, fla vs patch_fla(): same loss curve? (torchrun)
	@$(PY) -c "import sys, torch; n = torch.cuda.device_count(); sys.exit(0 if n >= 2 else f'make fsdp2: {n} CUDA GPU(s) visible, 2 needed: run it on a machine with 2 GPUs; tests/test_fsdp2_kda.py checks the plumbing on the CPU (--backend gloo --stand-in)')"
	$(PY) -m torch.distributed.run --standalone --nproc_per_node 2 tools/fsdp2_kda.py --out $(OUT)/fsdp2.json

device:  ## GPU stages in one call, logs and records under OUT (STAGES="env cconv layer ...")
	OUT=$(OUT) PY=$(PY) $(if $(STAGES),STAGES="$(STAGES)") bash tools/device.sh

clean:  ## remove build outputs, caches and egg-info (not .venv)
	rm -rf dist build package/build package/src/*.egg-info .pytest_cache .ruff_cache
