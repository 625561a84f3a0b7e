"""backend=torch: our PyTorch engine (pipeline.engine). Runs on CPU and CUDA.

build: TensorRT-LLM checkpoint -> self-contained engine dir: config.json (TensorRT-LLM's engine
layout + "backend": "torch"), rank<N>.safetensors (the checkpoint's tensors, unchanged: quantized
layouts are packed for the device when the engine loads), tokenizer/ (the HF tokenizer files),
probe.json (a fixed prompt's greedy tokens and logits, checked each time a server starts the
engine: pipeline.engine.core.engine_probe).
"""

import json
import logging
import shutil
from dataclasses import asdict
from pathlib import Path

import pipeline
from pipeline.checkpoint.trtllm_config import read_checkpoint_config
from pipeline.engine.engine_config import ModelConfig
from pipeline.engine.layers.linear import check_quantization
from pipeline.engine.quant.kv_cache import check_kv_cache
from pipeline.errors import ArtifactError, ConfigError, StageError
from pipeline.specs.pipeline import PipelineSpec

log = logging.getLogger(__name__)

WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf", ".ckpt")
# beam search scores a group's W x 2W candidates on the host each step: wider groups are
# better served by TensorRT-LLM's device kernels
MAX_BEAM_WIDTH = 64


def _build_problems(build) -> list[str]:
    problems = []
    if not 1 <= build.max_beam_width <= MAX_BEAM_WIDTH:
        problems.append(
            f"build.max_beam_width={build.max_beam_width}: the torch engine's beam search "
            f"takes widths 1 to {MAX_BEAM_WIDTH}; set build.max_beam_width in that range (or "
            f"backend=trtllm)"
        )
    if build.kv_cache_type.lower() != "paged":
        problems.append(
            f"build.kv_cache_type={build.kv_cache_type!r}: the torch engine has a "
            f"paged KV cache only; set build.kv_cache_type=paged"
        )
    for key in (
        "max_batch_size",
        "max_input_len",
        "max_seq_len",
        "max_num_tokens",
        "tokens_per_block",
    ):
        if getattr(build, key) < 1:
            problems.append(f"build.{key}={getattr(build, key)} must be >= 1")
    if build.max_input_len > build.max_seq_len:
        problems.append(
            f"build.max_input_len={build.max_input_len} exceeds build.max_seq_len="
            f"{build.max_seq_len}; lower max_input_len or raise max_seq_len"
        )
    budget = build.gpu_weight_budget_gb
    if budget is not None and budget <= 0:
        problems.append(f"build.gpu_weight_budget_gb={budget} must be > 0 (null: all resident)")
    if budget is not None and build.torch.compile:
        problems.append(
            f"build.gpu_weight_budget_gb={budget}: streamed layers run through hooks that "
            f"torch.compile does not trace; set build.torch.compile=false"
        )
    return problems


def check_checkpoint(cfg: dict, checkpoint_dir: Path) -> None:
    """Refuse what the engine cannot run, before copying anything."""
    try:
        ModelConfig.from_pretrained_config(cfg, f"build ({checkpoint_dir})")
    except KeyError as exc:
        raise ArtifactError(
            f"build: {checkpoint_dir}/config.json lacks {exc}; re-run convert with force=true"
        ) from exc
    quantization = cfg.get("quantization") or {}
    check_quantization(quantization)
    check_kv_cache(quantization)
    mapping = cfg.get("mapping") or {}
    for rank in range(int(mapping.get("tp_size", 1)) * int(mapping.get("pp_size", 1))):
        if not (checkpoint_dir / f"rank{rank}.safetensors").is_file():
            raise ArtifactError(
                f"build: {checkpoint_dir}/rank{rank}.safetensors is missing; re-run convert "
                f"with force=true"
            )


def copy_tokenizer(tokenizer_dir: Path, out_dir: Path) -> list[str]:
    """Every top-level file of the HF dir but weights and manifests: the engine dir stands alone."""
    out_dir.mkdir()
    names = []
    for path in sorted(Path(tokenizer_dir).iterdir()):
        if path.is_file() and path.suffix not in WEIGHT_SUFFIXES and path.name != "manifest.json":
            shutil.copyfile(path, out_dir / path.name)
            names.append(path.name)
    if "tokenizer.json" not in names and "tokenizer.model" not in names:
        raise ArtifactError(
            f"build: {tokenizer_dir} has no tokenizer.json / tokenizer.model; "
            f"re-run fetch with force=true"
        )
    return names


def build_engine_dir(
    build,
    checkpoint_dir: Path,
    tokenizer_dir: Path,
    out_dir: Path,
    probe_device: str | None = "auto",
) -> dict:
    """The torch engine dir of a checkpoint under the engine limits of `build` (a BuildSpec):
    what `python -m pipeline build backend=torch` writes, for callers that have no pipeline spec
    (the GPU benchmark tools). probe_device: where the engine runs its probe once written; None
    for an engine whose weights are not in its files (synthetic weights), which has none."""
    checkpoint_dir = Path(checkpoint_dir)
    cfg = read_checkpoint_config(checkpoint_dir, "build")
    check_checkpoint(cfg, checkpoint_dir)
    max_positions = cfg.get("max_position_embeddings")
    if max_positions and build.max_seq_len > max_positions:
        log.warning(
            "build: max_seq_len=%d exceeds the model's max_position_embeddings=%d; "
            "positions past it are extrapolated",
            build.max_seq_len,
            max_positions,
        )
    for path in sorted(checkpoint_dir.glob("rank*.safetensors")):  # one file a rank
        shutil.copyfile(path, out_dir / path.name)
    tokenizer_files = copy_tokenizer(tokenizer_dir, out_dir / "tokenizer")
    build_config = {
        "max_batch_size": build.max_batch_size,
        "max_input_len": build.max_input_len,
        "max_seq_len": build.max_seq_len,
        "max_num_tokens": build.max_num_tokens,
        "max_beam_width": build.max_beam_width,
        "kv_cache_type": "PAGED",
        "kv_cache_dtype": cfg["dtype"],
        "plugin_config": {
            "tokens_per_block": build.tokens_per_block,
            "paged_kv_cache": True,
            "remove_input_padding": True,
        },
        "torch": asdict(build.torch),
        "gpu_weight_budget_gb": build.gpu_weight_budget_gb,
    }
    engine = {
        "version": pipeline.__version__,
        "backend": "torch",
        "pretrained_config": cfg,
        "build_config": build_config,
    }
    (out_dir / "config.json").write_text(json.dumps(engine, indent=2))
    probe = {} if probe_device is None else _record_probe(out_dir, probe_device, build)
    quant_algo = (cfg.get("quantization") or {}).get("quant_algo")
    log.info("build: torch engine (%s, quant_algo=%s) -> %s", cfg["dtype"], quant_algo, out_dir)
    return {
        "dtype": cfg["dtype"],
        "quant_algo": quant_algo,
        "tokenizer_files": tokenizer_files,
        "probe": {k: probe[k] for k in ("token_ids", "device", "dtype") if k in probe},
    }


def _record_probe(engine_dir: Path, device: str, build) -> dict:
    """Load the engine just written (a KV cache for one sequence, no CUDA graphs or compile:
    the probe prefills on a scratch cache of its own) and record its probe."""
    from pipeline.engine import LLMEngine
    from pipeline.engine.core.engine_probe import record_probe

    runtime = {
        "max_batch_size": 1,
        "num_kv_blocks": -(-build.max_seq_len // build.tokens_per_block),
        "use_cuda_graph": False,
        "compile": False,
    }
    engine = LLMEngine.from_engine_dir(engine_dir, device=device, **runtime)
    try:
        return record_probe(engine, engine_dir)
    finally:
        engine.close()


class TorchBackend:
    name = "torch"

    def __init__(self, spec: PipelineSpec):
        self._build = spec.build
        self._deploy = spec.deploy
        self._device = spec.backend.device
        self._lora = spec.lora

    def check_available(self) -> None:
        try:
            import torch  # noqa: F401
        except ImportError as exc:
            raise StageError(
                "build: backend=torch needs PyTorch; run `make setup` (or pip "
                "install torch) in the pipeline's venv"
            ) from exc
        problems = _build_problems(self._build)
        if problems:
            raise ConfigError("build: " + "; ".join(problems))

    def build(self, checkpoint_dir: Path, tokenizer_dir: Path, out_dir: Path) -> dict:
        return build_engine_dir(self._build, checkpoint_dir, tokenizer_dir, out_dir, self._device)

    def triton_llm_model(self, engine_dir: Path, tokenizer_dir: Path, model_dir: Path) -> str:
        from pipeline.triton_repo import torch_llm_model

        return torch_llm_model.write(
            engine_dir,
            tokenizer_dir,
            model_dir,
            deploy=self._deploy,
            device=self._device,
            lora=self._lora,
        )

    def triton_draft_model(self, engine_dir: Path, repo: Path) -> None:
        """No draft model of its own: the engine drafts in-process (deploy.torch.spec)."""
        return None
