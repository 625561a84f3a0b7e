"""Weight offload pieces on the CPU: which layers a budget streams, the packed host store, and a
model whose streamed layers really run from the staging buffers the streamer fills."""

import pytest
import torch

from pipeline.backends.torch_backend import _build_problems
from pipeline.engine.engine_config import ModelConfig, load_engine_config
from pipeline.engine.execution import weight_store
from pipeline.engine.execution.layer_streamer import LayerStreamer
from pipeline.engine.execution.offload_plan import GB, streamed_layers
from pipeline.engine.layers.batch_metadata import BatchMetadata
from pipeline.engine.models.llama import LlamaForCausalLM
from pipeline.errors import ConfigError
from pipeline.specs.build import BuildSpec, TorchBuildOptions
from pipeline.synthetic.shapes import TINY
from pipeline.synthetic.weights import SyntheticWeights, checkpoint_config, write_engine
from scripts.model_shapes import write_tokenizer

CPU = torch.device("cpu")
SHAPE = {**TINY, "num_hidden_layers": 6}
LAYER_BYTES = 4 * (128 * 64 + 64 * 64 + 2 * 128 * 64 + 64 * 128)  # fp32 linears of SHAPE


def test_plan_streams_the_layers_past_the_budget_spread_over_the_stage():
    assert streamed_layers(10, 100, 1000 / GB) == []  # all fit
    # 7 layers' worth: 5 resident + 2 staging buffers, 5 of 10 streamed, every other layer
    assert streamed_layers(10, 100, 700 / GB) == [1, 3, 5, 7, 9]
    assert streamed_layers(10, 100, 250 / GB) == list(range(10))  # only the staging fits
    with pytest.raises(ConfigError, match=r"gpu_weight_budget_gb=1.5e-07: below the 2 staging"):
        streamed_layers(10, 100, 150 / GB)


def test_store_keeps_strides_and_every_reference_sees_the_staged_bytes():
    weight = torch.randn(6, 4).t()  # non-contiguous
    scale = torch.tensor(0.5)
    alias = scale  # as a norm holds its FP8 linear's activation scale
    expected = [weight.clone(), scale.clone()]
    slots, size = weight_store.layout([weight, scale])
    assert size == 2 * weight_store.ALIGN and slots[1].offset == weight_store.ALIGN
    host = torch.empty(size, dtype=torch.uint8)
    weight_store.pack(slots, host)
    assert weight.stride() == (1, 4) and torch.equal(weight, expected[0])
    staging = torch.zeros(size, dtype=torch.uint8)
    weight_store.rebind(slots, staging)
    assert alias.item() == 0.0 and weight.abs().sum() == 0  # staging not filled yet
    staging.copy_(host)
    assert torch.equal(weight, expected[0]) and alias.item() == expected[1].item()


def tiny_model(streamer: LayerStreamer | None) -> LlamaForCausalLM:
    cfg = checkpoint_config(SHAPE, "float32", 1, 1, None)
    model_cfg = ModelConfig.from_pretrained_config(cfg, "test")
    weights = SyntheticWeights(cfg, 0, CPU)
    place = streamer.place if streamer else None
    model = LlamaForCausalLM(model_cfg, weights, torch.float32, CPU, 64, place_layer=place)
    if streamer is not None:
        streamer.attach(model)
    return model


def prefill(model: LlamaForCausalLM) -> torch.Tensor:
    meta = BatchMetadata.for_prompts(2, 8, 8, CPU)
    kv = torch.zeros(6, 2, 2, 8, SHAPE["num_key_value_heads"], 16)
    ids = torch.arange(16) * 7 % SHAPE["vocab_size"]
    with torch.inference_mode():
        return model.compute_logits(model(ids, meta, kv))


def test_streamed_layers_run_from_the_staging_buffers_the_streamer_fills():
    expected = prefill(tiny_model(None))
    streamer = LayerStreamer(6, 4.5 * LAYER_BYTES / GB, CPU)  # 2 resident, 4 streamed
    model = tiny_model(streamer)
    assert streamer.streamed == [0, 2, 3, 5] and streamer.layer_bytes == LAYER_BYTES
    assert streamer.streamed_bytes == 4 * LAYER_BYTES
    for staging in streamer._staging:  # stale bytes: each forward copies every streamed layer
        staging.fill_(255)
    assert torch.equal(prefill(model), expected)
    # the layers read the staging buffers: garbage there, without the streamer's copies, shows
    streamed = model.layers[streamer.streamed[0]].mlp.proj.weight
    assert streamed.untyped_storage().data_ptr() == streamer._staging[0].data_ptr()
    resident = model.layers[1].mlp.proj.weight
    assert resident.untyped_storage().data_ptr() != streamer._staging[1].data_ptr()
    streamer._staging[0].zero_()
    assert streamed.abs().sum() == 0


def test_budget_with_compile_or_not_positive_is_refused(tmp_path):
    cfg = checkpoint_config(SHAPE, "float32", 1, 1, None)
    tokenizer = write_tokenizer(SHAPE["vocab_size"], tmp_path / "tokenizer")
    engine = write_engine(cfg, BuildSpec(gpu_weight_budget_gb=1.0), tokenizer, tmp_path / "e")
    assert load_engine_config(engine, "cpu", {}).gpu_weight_budget_gb == 1.0  # the build's
    assert load_engine_config(engine, "cpu", {"gpu_weight_budget_gb": 0.5}).gpu_weight_budget_gb
    with pytest.raises(ConfigError, match=r"gpu_weight_budget_gb=1 streams layers with hooks"):
        load_engine_config(engine, "cpu", {"compile": True})
    with pytest.raises(ConfigError, match=r"gpu_weight_budget_gb=0 must be > 0"):
        load_engine_config(engine, "cpu", {"gpu_weight_budget_gb": 0})
    compiled = BuildSpec(gpu_weight_budget_gb=2.0, torch=TorchBuildOptions(compile=True))
    assert any("torch.compile does not trace" in p for p in _build_problems(compiled))
    assert any("must be > 0" in p for p in _build_problems(BuildSpec(gpu_weight_budget_gb=-1.0)))
