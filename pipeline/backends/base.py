"""What every engine backend provides. The pipeline's stages talk to backends only through this."""

from pathlib import Path
from typing import Protocol


class Backend(Protocol):
    name: str

    def check_available(self) -> None:
        """Raise a PipelineError saying how to get this backend, before any work is done."""

    def build(self, checkpoint_dir: Path, tokenizer_dir: Path, out_dir: Path) -> dict:
        """Build an engine dir into out_dir from a TensorRT-LLM checkpoint.

        out_dir/config.json follows TensorRT-LLM's engine layout: {"version", "pretrained_config",
        "build_config"} (+ "backend"). Returns extra manifest fields (e.g. timing-cache hit).
        """

    def triton_llm_model(self, engine_dir: Path, tokenizer_dir: Path, model_dir: Path) -> str:
        """Write the `tensorrt_llm` model files into model_dir; return its config.pbtxt.

        Same public inputs/outputs for both backends (those of the tensorrtllm backend), so the
        shared preprocessing/postprocessing/ensemble/BLS models work unchanged on either.
        """

    def triton_draft_model(self, engine_dir: Path, repo: Path) -> tuple[str, int, int] | None:
        """When the deployment has a draft model (draft-target speculative decoding), write it
        into repo/<its name> (engine_dir: the target's) and return its name, the default
        num_draft_tokens of a request and the target's max_draft_len (tensorrt_llm_bls's
        parameters); else None."""
