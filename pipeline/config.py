"""Hydra config <-> frozen specs. The only place (with cli.py) that sees a DictConfig.

The spec dataclasses hold every key and its default: spec_defaults() turns them into the config
node that conf/config.yaml lists first, so the option files under conf/ hold only what a preset
changes. Unknown keys, wrong types and out-of-range values are collected over the whole tree and
raised as one ConfigError (the node is untyped for that reason: a typed Hydra schema would stop
at the first bad override).
"""

import dataclasses
import os
import re
import types
import typing
from pathlib import Path
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import DictConfig, OmegaConf

from pipeline.errors import ConfigError
from pipeline.hardware import target_sm
from pipeline.specs.pipeline import PipelineSpec

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
    "tune",
    "study",
)


# model.dtype's value that to_specs resolves for the hardware (auto_dtype)
AUTO_DTYPE = "auto"
# the config name conf/config.yaml's defaults list starts from
SPEC_DEFAULTS = "spec_defaults"


def _plain(value: Any) -> Any:
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    return value


def spec_defaults(cls: type = PipelineSpec) -> dict:
    """`cls` as a config node: each field's default, a nested spec's own defaults, and "???"
    (Hydra's missing value: a preset or the command line sets it) where a field has none."""
    hints = typing.get_type_hints(cls)
    node: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if dataclasses.is_dataclass(hints[f.name]):
            node[f.name] = spec_defaults(hints[f.name])
        elif f.default is not dataclasses.MISSING:
            node[f.name] = _plain(f.default)
        elif f.default_factory is not dataclasses.MISSING:
            node[f.name] = _plain(f.default_factory())
        else:
            node[f.name] = "???"
    return node


def register_spec_defaults() -> None:
    """Store spec_defaults() where Hydra finds it (again is harmless: the same node)."""
    ConfigStore.instance().store(name=SPEC_DEFAULTS, node=spec_defaults())


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


# model.name is one directory under workdir: no separator, no leading dot (no "..", no hidden
# temp-dir names), short enough for the stage dirs under it
MODEL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")


def _at_least_one(value: int) -> str | None:
    return None if value >= 1 else f"{value}, must be 1 or more"


def _model_name_problem(name: str) -> str | None:
    if MODEL_NAME.fullmatch(name):
        return None
    return (
        f"{name!r} is not a plain directory name (artifacts go to <workdir>/<model.name>/); "
        f"use {MODEL_NAME.pattern}: letters, digits, '.', '_' and '-', starting with a letter "
        f"or digit"
    )


def _workdir_problem(workdir: str) -> str | None:
    """Why the stages could not write under `workdir` (checked before Hydra makes its log dir)."""
    path = Path(workdir).absolute()
    existing = path
    while not existing.exists() and not existing.is_symlink():
        existing = existing.parent
    where = repr(workdir) if existing == path else f"{workdir!r} cannot be made: {existing}"
    if not existing.is_dir():
        kind = "a file" if existing.is_file() else "not a directory"
        return f"{where} is {kind}; set workdir to a directory (or a path that does not exist yet)"
    if not os.access(existing, os.W_OK | os.X_OK):
        return (
            f"{where} is not writable by this user (read-only); set workdir to a writable "
            f"directory, or make it writable"
        )
    return None


# checked once the key has the right type (a wrong type is reported by _to_spec)
VALUE_CHECKS = (
    ("parallel.tp_size", int, _at_least_one),
    ("parallel.pp_size", int, _at_least_one),
    ("model.name", str, _model_name_problem),
    ("workdir", str, _workdir_problem),
)


def _value_problems(container: dict) -> list[str]:
    problems = []
    for path, tp, check in VALUE_CHECKS:
        node: Any = container
        for key in path.split("."):
            node = node.get(key) if isinstance(node, dict) else None
        if node is not None and _check_scalar(node, tp) and (problem := check(node)):
            problems.append(f"{path}: {problem}")
    return problems


def to_specs(cfg: DictConfig | dict) -> PipelineSpec:
    """Resolve interpolations and build every spec, reporting all problems at once."""
    if isinstance(cfg, DictConfig):
        # without the hydra node: its interpolations (job number, run dir) need a running job
        cfg = OmegaConf.masked_copy(cfg, [k for k in cfg if k != "hydra"])
        container = OmegaConf.to_container(cfg, resolve=True)
    else:
        container = {k: v for k, v in cfg.items() if k != "hydra"}
    errors: list[str] = []
    spec = _to_spec(PipelineSpec, container, "", errors)
    errors += _value_problems(container)
    if errors:
        raise ConfigError(
            "config: " + "; ".join(errors) + " (fix the YAML under conf/ or the "
            "command-line override)"
        )
    if spec.stage not in STAGE_NAMES:
        raise ConfigError(f"config: unknown stage {spec.stage!r}; stages: {', '.join(STAGE_NAMES)}")
    if spec.model.dtype == AUTO_DTYPE:
        model = dataclasses.replace(spec.model, dtype=auto_dtype(spec))
        spec = dataclasses.replace(spec, model=model)
    return spec


def auto_dtype(spec: PipelineSpec) -> str:
    """model.dtype=auto: float32 where the torch engine runs on the CPU (bf16 matmuls are far
    slower there), bfloat16 for a GPU (backend=trtllm, or hardware naming or finding one)."""
    if spec.backend.name == "trtllm":
        return "bfloat16"
    if spec.backend.device == "cpu" or target_sm(spec.hardware) is None:
        return "float32"
    return "bfloat16"


register_spec_defaults()  # before any compose: cli.py and the tests import this module
