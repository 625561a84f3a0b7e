"""TensorRT-LLM 1.2.x engine flow, written against docs/trtllm_reference.md (it cannot run here).

build_command: BuildSpec -> trtllm-build argv.  preflight (+ facts, rules): every invariant checked
before any work.  toolchain: what is installed (versions, GPU).  timing_cache: the TensorRT timing
cache kept across builds.  build_runner: the subprocess and its log.  engine_config: an engine dir's
config.json.  triton_config: the `tensorrt_llm` model's config.pbtxt.  container: run a stage in the
TensorRT-LLM image (`make <stage> DOCKER=1`).  image: is that image here, holding the configured
version.
"""
