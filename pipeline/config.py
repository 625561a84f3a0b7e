"""Hydra config -> frozen specs. The only place (with cli.py) that sees a DictConfig.

Unknown keys and wrong types are collected over the whole tree and raised as one ConfigError.
"""

import dataclasses
import types
import typing
from dataclasses import dataclass
from typing import Any

from omegaconf import DictConfig, OmegaConf

from pipeline.errors import ConfigError
from pipeline.specs.backend import BackendSpec
from pipeline.specs.bench import BenchSpec
from pipeline.specs.build import BuildSpec
from pipeline.specs.deploy import DeploySpec
from pipeline.specs.model import ModelSpec
from pipeline.specs.parallel import ParallelSpec
from pipeline.specs.quant import QuantSpec

STAGE_NAMES = (
    "fetch",
    "convert",
    "quantize",
    "build",
    "deploy",
    "serve",
    "bench",
    "profile",
    "sweep",
    "regress",
    "demo",
)


@dataclass(frozen=True, slots=True)
class PipelineSpec:
    stage: str
    model: ModelSpec
    quant: QuantSpec
    build: BuildSpec
    deploy: DeploySpec
    bench: BenchSpec
    backend: BackendSpec
    parallel: ParallelSpec
    workdir: str = "artifacts"
    hardware: str = "auto"
    force: bool = False
    verbose: bool = False


def _check_scalar(value: Any, tp: Any) -> bool:
    if tp is Any:
        return True
    if tp is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if tp is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, tp)


def _convert(tp: Any, value: Any, path: str, errors: list[str]) -> Any:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        return _convert(inner[0], value, path, errors)
    if dataclasses.is_dataclass(tp):
        return _to_spec(tp, value, path, errors)
    if origin is list:
        if not isinstance(value, list):
            errors.append(f"{path}: expected a list, got {value!r}")
            return value
        (item,) = typing.get_args(tp)
        return tuple(_convert(item, v, f"{path}[{i}]", errors) for i, v in enumerate(value))
    if origin is tuple:
        if not isinstance(value, list | tuple):
            errors.append(f"{path}: expected a list, got {value!r}")
            return value
        item = typing.get_args(tp)[0]
        return tuple(_convert(item, v, f"{path}[{i}]", errors) for i, v in enumerate(value))
    if origin is dict:
        if not isinstance(value, dict):
            errors.append(f"{path}: expected a mapping, got {value!r}")
        return dict(value) if isinstance(value, dict) else value
    if not _check_scalar(value, tp):
        errors.append(f"{path}: expected {tp.__name__}, got {value!r}")
        return value
    return float(value) if tp is float else value


def _to_spec(cls: type, node: Any, path: str, errors: list[str]) -> Any:
    if not isinstance(node, dict):
        errors.append(f"{path}: expected a mapping for {cls.__name__}, got {node!r}")
        return None
    num_errors = len(errors)
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    for key in node:
        if key not in fields:
            known = ", ".join(sorted(fields))
            errors.append(f"{path}.{key}: unknown key (known keys: {known})".lstrip("."))
    kwargs = {}
    for name, f in fields.items():
        key_path = f"{path}.{name}".lstrip(".")
        if name in node:
            kwargs[name] = _convert(hints[name], node[name], key_path, errors)
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            errors.append(f"{key_path}: missing required key")
    if len(errors) > num_errors:
        return None
    try:
        return cls(**kwargs)
    except TypeError as exc:
        errors.append(f"{path}: {exc}")
        return None


def to_specs(cfg: DictConfig | dict) -> PipelineSpec:
    """Resolve interpolations and build every spec, reporting all problems at once."""
    container = OmegaConf.to_container(cfg, resolve=True) if isinstance(cfg, DictConfig) else cfg
    container = {k: v for k, v in container.items() if k != "hydra"}
    errors: list[str] = []
    spec = _to_spec(PipelineSpec, container, "", errors)
    if errors:
        raise ConfigError(
            "config: " + "; ".join(errors) + " (fix the YAML under conf/ or the "
            "command-line override)"
        )
    if spec.stage not in STAGE_NAMES:
        raise ConfigError(f"config: unknown stage {spec.stage!r}; stages: {', '.join(STAGE_NAMES)}")
    return spec
