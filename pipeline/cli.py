"""The only Hydra entry point: `python -m pipeline <stage> [key=value ...]` (or `pipeline ...`)."""

import importlib
import logging
import os
import sys
from pathlib import Path

import hydra
from omegaconf import DictConfig

from pipeline.config import STAGE_NAMES, to_specs
from pipeline.errors import PipelineError

log = logging.getLogger("pipeline")
CONF_DIR = str(Path(__file__).resolve().parent.parent / "conf")


def run_stage(spec) -> Path:
    module_name = f"pipeline.stages.{spec.stage}"
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name != module_name:
            raise
        raise PipelineError(f"{spec.stage}: this stage is not implemented yet") from None
    return module.run(spec)


@hydra.main(version_base="1.3", config_path=CONF_DIR, config_name="config")
def _hydra_main(cfg: DictConfig) -> None:
    try:
        spec = to_specs(cfg)
        if spec.verbose:
            logging.getLogger().setLevel(logging.DEBUG)
        out = run_stage(spec)
        if out is not None:
            print(f"{spec.stage}: {out}")
    except PipelineError as exc:
        if os.environ.get("PIPELINE_TRACEBACK"):
            raise
        log.error("%s", exc)
        sys.exit(1)


def _argv_with_stage(argv: list[str]) -> list[str]:
    """Turn the positional stage into the `stage=` override Hydra understands."""
    out = []
    for arg in argv:
        if arg in STAGE_NAMES and not any(a.startswith("stage=") for a in out):
            out.append(f"stage={arg}")
        else:
            out.append(arg)
    return out


def main() -> None:
    argv = sys.argv[1:]
    if not argv or argv[0] in ("-h", "--help") and len(argv) == 1:
        print(
            f"usage: pipeline <stage> [key=value ...] [--multirun]\nstages: "
            f"{', '.join(STAGE_NAMES)}\nconfig help: pipeline <stage> --help"
        )
        sys.exit(0 if argv else 2)
    first = argv[0]
    if "=" not in first and not first.startswith("-") and first not in STAGE_NAMES:
        print(f"error: unknown stage {first!r}; stages: {', '.join(STAGE_NAMES)}", file=sys.stderr)
        sys.exit(2)
    sys.argv = [sys.argv[0], *_argv_with_stage(argv)]
    _hydra_main()


if __name__ == "__main__":
    main()
