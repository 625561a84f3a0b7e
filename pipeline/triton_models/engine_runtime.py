"""The torch engine's runtime settings as deployed, built from the deploy spec here only.

The served `tensorrt_llm` model carries them as config.pbtxt parameters (runtime_parameters) and
its python model reads them back (runtime_from_parameters); the direct bench and the serving
tuner pass engine_runtime to their in-process engine. So "served vs direct" runs engines that
schedule alike. The deploy spec's 0 ("auto", "from the build limits") is the engine's None.
Imported by the python model inside tritonserver: nothing here may need more than the stdlib.
"""

import dataclasses
import json
from collections.abc import Callable, Mapping


def _count(text: str) -> int | None:
    return int(text) or None  # 0: the engine decides


def _flag(text: str) -> bool:
    return text == "true"  # model_config.set_parameters writes bools as "true"/"false"


def _optional_flag(text: str) -> bool | None:
    return {"true": True, "false": False}.get(text)  # "0": the engine decides


def _json(text: str) -> dict | None:
    return json.loads(text) or None  # 0: off


# config.pbtxt parameter -> (LLMEngine runtime option, how the python model parses its string)
PARAMETERS: dict[str, tuple[str, Callable[[str], object]]] = {
    "batch_scheduler_policy": ("scheduler_policy", str),
    "num_kv_blocks": ("num_kv_blocks", _count),
    "enable_chunked_prefill": ("enable_chunked_prefill", _flag),
    "num_scheduler_steps": ("num_scheduler_steps", _count),
    "enable_prefix_caching": ("enable_prefix_caching", _optional_flag),
    "host_kv_cache_gb": ("host_kv_cache_gb", float),
    "speculation": ("speculation", _json),
}


def engine_runtime(deploy, num_kv_blocks: int = 0) -> dict:
    """LLMEngine.from_engine_dir(**runtime) for the DeploySpec `deploy`; num_kv_blocks > 0
    replaces its KV budget (a bench sweep probing capacity)."""
    return {
        "scheduler_policy": deploy.batch_scheduler_policy,
        "num_kv_blocks": num_kv_blocks or deploy.torch.num_kv_blocks or None,
        "enable_chunked_prefill": deploy.torch.enable_chunked_prefill,
        "num_scheduler_steps": deploy.torch.num_scheduler_steps or None,
        "enable_prefix_caching": deploy.torch.enable_prefix_caching,
        "host_kv_cache_gb": float(deploy.torch.host_kv_cache_gb),
        "speculation": _speculation(deploy.torch.spec),
    }


def _speculation(spec) -> dict | None:
    """deploy.torch.spec as the engine's speculation option (None: off)."""
    return None if spec.method == "none" else dataclasses.asdict(spec)


def runtime_parameters(deploy) -> dict[str, object]:
    """engine_runtime(deploy) as the served model's parameters (None written as 0)."""
    runtime = engine_runtime(deploy)
    return {
        name: 0 if runtime[option] is None else _text(runtime[option])
        for name, (option, _) in PARAMETERS.items()
    }


def _text(value: object) -> object:
    return json.dumps(value) if isinstance(value, dict) else value


def runtime_from_parameters(params: Mapping[str, str]) -> dict:
    """The python model's string parameters back to engine_runtime's dict."""
    return {option: parse(params[name]) for name, (option, parse) in PARAMETERS.items()}
