"""backend=trtllm: TensorRT-LLM 1.2.x engines built by `trtllm-build`, served by the tensorrtllm
Triton backend. TensorRT-LLM cannot be installed here: without it, check_available() fails before
any work and says how to run the stage in its container (`make build BACKEND=trtllm DOCKER=1`).
"""

import logging
import shlex
from pathlib import Path

from pipeline.artifacts import MANIFEST, Manifest
from pipeline.errors import ArtifactError, ConfigError, StageError
from pipeline.hardware import target_sm
from pipeline.specs.pipeline import PipelineSpec
from pipeline.trtllm import preflight
from pipeline.trtllm.build_command import build_command
from pipeline.trtllm.build_runner import run_trtllm_build
from pipeline.trtllm.draft_target import DRAFT_MODEL_NAME, draft_problems
from pipeline.trtllm.engine_config import read_engine_config
from pipeline.trtllm.facts import facts_from_checkpoint, facts_from_spec
from pipeline.trtllm.guided_decoding import TOKENIZER_INFO, write_tokenizer_info
from pipeline.trtllm.timing_cache import TimingCache
from pipeline.trtllm.toolchain import Toolchain, find_toolchain, gpu_mismatch
from pipeline.trtllm.triton_config import ServingTarget, tensorrt_llm_config

log = logging.getLogger(__name__)


class TrtllmBackend:
    name = "trtllm"

    def __init__(self, spec: PipelineSpec, toolchain: Toolchain | None = None):
        # toolchain: found on first use; tests pass one to drive build() with a fake trtllm-build
        self._spec = spec
        self._options = spec.build.trtllm
        self._hardware = spec.hardware
        self._failure_log_dir = Path(spec.workdir) / "logs"
        self._toolchain = toolchain

    def _target_sm(self) -> tuple[int | None, list[str]]:
        try:
            return target_sm(self._hardware), []
        except ConfigError as exc:
            return None, [str(exc)]

    def check_available(self) -> None:
        """Config preflight first (fixable anywhere), then the toolchain; all problems at once."""
        sm, problems = self._target_sm()
        problems += preflight.violations(facts_from_spec(self._spec, sm))
        toolchain, missing = (
            (self._toolchain, []) if self._toolchain else find_toolchain(self._options)
        )
        problems += missing
        if toolchain is not None:
            problems += gpu_mismatch(toolchain, self._hardware, sm)
        if problems:
            error = StageError if missing else ConfigError
            raise error(preflight.format_violations(problems))
        self._toolchain = toolchain

    def _require_toolchain(self) -> Toolchain:
        if self._toolchain is None:
            toolchain, missing = find_toolchain(self._options)
            if toolchain is None:
                raise StageError(preflight.format_violations(missing))
            self._toolchain = toolchain
        return self._toolchain

    def build(self, checkpoint_dir: Path, tokenizer_dir: Path, out_dir: Path) -> dict:
        toolchain = self._require_toolchain()
        preflight.check(facts_from_checkpoint(self._spec, checkpoint_dir, toolchain.gpu_sm))
        cache = TimingCache.for_toolchain(self._options.timing_cache_dir, toolchain)
        input_cache = cache.input_path() if self._options.timing_cache else None
        # without the cache, trtllm-build would still write model.cache into the CWD
        staged = cache.staging_path() if self._options.timing_cache else out_dir / "model.cache"
        argv = build_command(self._spec.build, checkpoint_dir, out_dir, input_cache, staged)
        log.info(
            "build: timing cache %s; running %s", "hit" if input_cache else "miss", shlex.join(argv)
        )
        try:
            run_trtllm_build(argv, out_dir / "build.log", self._failure_log_dir)
            engine = read_engine_config(out_dir)
        except BaseException:
            cache.discard(staged)
            raise
        if engine.version != toolchain.trtllm_version:
            cache.discard(staged)
            raise StageError(
                f"build: {out_dir}/config.json says TensorRT-LLM {engine.version}, "
                f"but {toolchain.trtllm_version} is installed; check PATH for a "
                f"stray trtllm-build"
            )
        if self._options.timing_cache:
            timing = cache.commit(staged, input_cache)
        else:
            staged.unlink(missing_ok=True)
            timing = {"enabled": False}
        return {
            "trtllm_version": engine.version,
            "tensorrt_version": toolchain.tensorrt_version,
            "gpu": {"name": toolchain.gpu_name, "sm": toolchain.gpu_sm},
            "container_image": self._options.container_image,
            "trtllm_build_argv": argv,
            "timing_cache": timing,
        }

    def _serving_target(self, engine_dir: Path) -> tuple[ServingTarget, int | None]:
        """Where the engine will run, and the GPU SM it was built on (None: not recorded)."""
        sm, problems = self._target_sm()
        if problems:
            raise ConfigError(problems[0])
        built_sm = None
        if (Path(engine_dir) / MANIFEST).is_file():
            built_sm = (Manifest.read(engine_dir).extra.get("gpu") or {}).get("sm")
        target = ServingTarget(
            self._options.trtllm_version, self._options.container_image, sm, self._hardware
        )
        return target, built_sm

    def triton_llm_model(self, engine_dir: Path, tokenizer_dir: Path, model_dir: Path) -> str:
        """The tensorrtllm-backend model; the tokenizer is only used by pre/postprocessing."""
        engine = read_engine_config(engine_dir)
        target, built_sm = self._serving_target(engine_dir)
        model_dir = Path(model_dir)
        is_guided = self._spec.deploy.trtllm.guided_decoding_backend == "xgrammar"
        # the tokenizer info's place once the repository is published (deploy.repo_dir)
        repo_dir = Path(self._spec.deploy.repo_dir).resolve()
        info_path = str(repo_dir / model_dir.name / TOKENIZER_INFO) if is_guided else ""
        budget, lora = self._spec.build.gpu_weight_budget_gb, self._spec.lora
        text = tensorrt_llm_config(
            engine, self._spec.deploy, target, built_sm, budget, lora, info_path
        )
        (model_dir / "1").mkdir(parents=True, exist_ok=True)
        if is_guided:
            write_tokenizer_info(tokenizer_dir, model_dir)
        # Triton needs a version dir; the engine itself stays where gpt_model_path points
        (model_dir / "1" / ".gitkeep").write_text("")
        (model_dir / "config.pbtxt").write_text(text)
        return text

    def triton_draft_model(self, engine_dir: Path, repo: Path) -> tuple[str, int, int] | None:
        """deploy.trtllm.spec.method=draft_model: the draft engine's `tensorrt_llm_draft` model
        in repo (engine_dir: the target's), and the BLS's settings for it; else None."""
        spec = self._spec.deploy.trtllm.spec
        if spec.method != "draft_model":
            return None
        draft_dir = Path(spec.draft_engine_dir)
        try:
            draft = read_engine_config(draft_dir) if spec.draft_engine_dir else None
        except ArtifactError:
            draft = None
        target_engine = read_engine_config(engine_dir)
        problems = draft_problems(target_engine, draft, self._spec.deploy)
        if problems:
            raise ConfigError(
                f"deploy: backend=trtllm cannot serve the draft model: {'; '.join(problems)}"
            )
        target, built_sm = self._serving_target(draft_dir)
        text = tensorrt_llm_config(
            draft, self._spec.deploy, target, built_sm, model_name=DRAFT_MODEL_NAME
        )
        model_dir = Path(repo) / DRAFT_MODEL_NAME
        (model_dir / "1").mkdir(parents=True, exist_ok=True)
        (model_dir / "1" / ".gitkeep").write_text("")  # the engine stays at gpt_model_path
        (model_dir / "config.pbtxt").write_text(text)
        max_draft_len = int(target_engine.build.get("max_draft_len", 0))
        return DRAFT_MODEL_NAME, spec.num_draft_tokens, max_draft_len
