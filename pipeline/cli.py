"""The only Hydra entry point: `python -m pipeline <stage> [key=value ...]` (or `pipeline ...`)."""

import importlib
import logging
import os
import sys
from pathlib import Path

import hydra
from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from pipeline.config import STAGE_NAMES, to_specs
from pipeline.errors import PipelineError
from pipeline.specs.pipeline import PipelineSpec

log = logging.getLogger("pipeline")
# an installed wheel carries conf/ inside the package (setup.py); a checkout keeps it beside it
_HERE = Path(__file__).resolve().parent
CONF_DIR = str(_HERE / "conf" if (_HERE / "conf").is_dir() else _HERE.parent / "conf")


def run_stage(spec: PipelineSpec) -> Path:
    module_name = f"pipeline.stages.{spec.stage}"
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name != module_name:
            raise
        raise PipelineError(f"{spec.stage}: this stage is not implemented yet") from None
    return module.run(spec)


def _exit_with(exc: PipelineError) -> None:
    if os.environ.get("PIPELINE_TRACEBACK"):
        raise exc
    log.error("%s", exc)
    sys.exit(1)


class ConfigCheck(Callback):
    """Validates the config before Hydra makes its log dir under workdir: a workdir that is a file
    or read-only is then one line with the fix, not Hydra's traceback from mkdir."""

    def on_run_start(self, config: DictConfig, **kwargs) -> None:
        try:
            to_specs(config)
        except PipelineError as exc:
            _exit_with(exc)

    on_multirun_start = on_run_start


# how the CLI registers ConfigCheck with Hydra (an override, so conf/ stays plain config)
CONFIG_CHECK = f"+hydra.callbacks.config_check._target_={__name__}.{ConfigCheck.__name__}"


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
        _exit_with(exc)


def _argv_with_stage(argv: list[str]) -> list[str]:
    """Turn the positional stage into the `stage=` override Hydra understands."""
    out = []
    for arg in argv:
        if arg in STAGE_NAMES and not any(a.startswith("stage=") for a in out):
            out.append(f"stage={arg}")
        else:
            out.append(arg)
    return out


def _overrides_checked_together(argv: list[str]) -> list[str]:
    """`key=value` overrides of values as `++key=value` (set, or add when missing): Hydra stops
    at the first key that the config lacks, so each one reaches to_specs, which names every
    unknown key at once. Config group choices (`model=hub`), Hydra's own keys and overrides
    that already carry a prefix are left as they are."""
    groups = {p.name for p in Path(CONF_DIR).iterdir() if p.is_dir()}
    out = []
    for arg in argv:
        key, has_value, _ = arg.partition("=")
        is_value_key = key[:1].isalpha() and not any(c in key for c in "@/")
        if has_value and is_value_key and key not in groups and key.split(".")[0] != "hydra":
            arg = f"++{arg}"
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
    argv = _overrides_checked_together(_argv_with_stage(argv))
    # next to the other overrides: argparse takes them as one run of positionals
    at = next((i for i, arg in enumerate(argv) if "=" in arg), len(argv))
    sys.argv = [sys.argv[0], *argv[:at], CONFIG_CHECK, *argv[at:]]
    _hydra_main()


if __name__ == "__main__":
    main()
