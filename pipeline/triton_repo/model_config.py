"""ModelConfig protobuf (tritonclient's model_config_pb2) building blocks and text rendering."""

from collections.abc import Iterable, Mapping

from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from pipeline.triton_repo.interface import TensorSpec

ModelConfig = mc.ModelConfig


def new_config(
    name: str, max_batch_size: int, *, backend: str = "", platform: str = ""
) -> mc.ModelConfig:
    return mc.ModelConfig(
        name=name, backend=backend, platform=platform, max_batch_size=max_batch_size
    )


def add_inputs(cfg: mc.ModelConfig, specs: Iterable[TensorSpec]) -> None:
    for spec in specs:
        tensor = cfg.input.add(
            name=spec.name,
            data_type=mc.DataType.Value(spec.data_type),
            dims=list(spec.dims),
            optional=spec.optional,
            allow_ragged_batch=spec.ragged,
        )
        if spec.scalar:
            tensor.reshape.SetInParent()  # `reshape: { shape: [ ] }`: one value per request


def add_outputs(cfg: mc.ModelConfig, specs: Iterable[TensorSpec]) -> None:
    for spec in specs:
        cfg.output.add(
            name=spec.name, data_type=mc.DataType.Value(spec.data_type), dims=list(spec.dims)
        )


def set_parameters(cfg: mc.ModelConfig, params: Mapping[str, object]) -> None:
    """String parameters; bools as "true"/"false" (what the tensorrtllm backend parses)."""
    for key, value in params.items():
        text = str(value).lower() if isinstance(value, bool) else str(value)
        cfg.parameters[key].string_value = text


def set_dynamic_batching(
    cfg: mc.ModelConfig,
    preferred_batch_sizes: Iterable[int],
    max_queue_delay_microseconds: int,
    max_queue_size: int,
) -> None:
    batching = cfg.dynamic_batching
    batching.SetInParent()
    batching.preferred_batch_size.extend(preferred_batch_sizes)
    batching.max_queue_delay_microseconds = max_queue_delay_microseconds
    batching.default_queue_policy.max_queue_size = max_queue_size


def set_cpu_instances(cfg: mc.ModelConfig, count: int) -> None:
    cfg.instance_group.add(count=count, kind=mc.ModelInstanceGroup.KIND_CPU)


def set_decoupled(cfg: mc.ModelConfig, decoupled: bool) -> None:
    cfg.model_transaction_policy.decoupled = decoupled
    cfg.model_transaction_policy.SetInParent()


def render(cfg: mc.ModelConfig) -> str:
    return text_format.MessageToString(cfg)


def parse(text: str) -> mc.ModelConfig:
    """Parse config.pbtxt text as Triton does; raises text_format.ParseError with line:col."""
    return text_format.Parse(text, mc.ModelConfig())


def type_name(data_type: int) -> str:
    return mc.DataType.Name(data_type)
