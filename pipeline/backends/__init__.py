"""The two engine backends behind one narrow interface (see base.Backend).

conf/backend/<name>.yaml names the implementation class with `_target_`.
"""

import importlib

from pipeline.backends.base import Backend
from pipeline.errors import ConfigError
from pipeline.specs.pipeline import PipelineSpec


def load_backend(spec: PipelineSpec) -> Backend:
    module_name, _, class_name = spec.backend._target_.rpartition(".")
    try:
        cls = getattr(importlib.import_module(module_name), class_name)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(
            f"backend._target_={spec.backend._target_!r} cannot be imported ({exc}); "
            f"fix conf/backend/{spec.backend.name}.yaml"
        ) from exc
    return cls(spec)
