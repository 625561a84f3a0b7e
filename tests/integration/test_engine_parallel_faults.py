"""What a multi-rank engine does when its mapping or a rank goes wrong (CPU, gloo): a mapping the
model cannot take is refused naming the key and the fix; a rank that dies or stalls fails the
engine within seconds, naming the rank or collective_timeout_s; a killed rank 0 takes its
workers with it."""

import signal
import subprocess
import sys
import time

import psutil
import pytest
import torch
from tokenizers import Tokenizer, models
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from pipeline.backends.torch_backend import build_engine_dir
from pipeline.checkpoint.hf_to_trtllm import convert
from pipeline.checkpoint.trtllm_config import pretrained_config
from pipeline.engine import LLMEngine, SamplingParams
from pipeline.engine.engine_config import ModelConfig
from pipeline.engine.parallel.mapping import check_devices
from pipeline.errors import ConfigError
from pipeline.specs.build import BuildSpec

pytestmark = pytest.mark.slow

SHAPE = dict(
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    vocab_size=128,
    max_position_embeddings=256,
)
PARAMS = SamplingParams(max_tokens=8, ignore_eos=True)
PROMPTS = [[5, 17, 3, 99], [100, 2, 7]]


def test_a_mapping_the_model_cannot_take_names_the_key_and_the_fix():
    hf = {"architectures": ["LlamaForCausalLM"], **SHAPE}
    with pytest.raises(ConfigError, match=r"num_attention_heads=4 is not divisible by tp_size=3"):
        ModelConfig.from_pretrained_config(pretrained_config(hf, "float32", 3, 1), "engine x")
    with pytest.raises(
        ConfigError, match=r"pp_size=3 exceeds num_hidden_layers=2.*parallel\.pp_size"
    ):
        ModelConfig.from_pretrained_config(pretrained_config(hf, "float32", 1, 3), "engine x")
    with pytest.raises(ConfigError, match=r"needs 2 GPUs but 1 are visible.*parallel\.tp_size"):
        check_devices(2, "cuda", 0, 1)
    check_devices(2, "cuda", 0, 2)  # enough
    check_devices(4, "cpu", 0, 0)  # CPU ranks need no GPU


@pytest.fixture(scope="module")
def tp2_engine_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("faults")
    torch.manual_seed(0)
    LlamaForCausalLM(LlamaConfig(**SHAPE)).eval().save_pretrained(root / "hf")
    vocab = {f"t{i}": i for i in range(SHAPE["vocab_size"])}
    tokenizer = Tokenizer(models.WordLevel(vocab, "t0"))
    PreTrainedTokenizerFast(tokenizer_object=tokenizer, eos_token="t1").save_pretrained(root / "hf")
    for path in (root / "ckpt", root / "engine"):
        path.mkdir()
    convert(root / "hf", root / "ckpt", "float32", 2, 1)
    build = BuildSpec(max_batch_size=4, max_input_len=32, max_seq_len=64, max_num_tokens=64)
    build_engine_dir(build, root / "ckpt", root / "hf", root / "engine")
    return root / "engine"


def test_a_rank_that_dies_mid_run_fails_the_engine_naming_it(tp2_engine_dir):
    engine = LLMEngine.from_engine_dir(tp2_engine_dir, device="cpu")
    try:
        engine.generate(PROMPTS, PARAMS)
        pid = engine.model_runner.workers.pids[1]
        psutil.Process(pid).kill()
        start = time.monotonic()
        with pytest.raises(RuntimeError, match=rf"rank 1 \(pid {pid}\) exited with code -9"):
            engine.generate(PROMPTS, PARAMS)
        assert time.monotonic() - start < 30
    finally:
        engine.close()


def test_a_stalled_rank_fails_the_engine_after_collective_timeout_s(tp2_engine_dir):
    engine = LLMEngine.from_engine_dir(tp2_engine_dir, device="cpu", collective_timeout_s=3)
    worker = psutil.Process(engine.model_runner.workers.pids[1])
    try:
        engine.generate(PROMPTS, PARAMS)
        worker.send_signal(signal.SIGSTOP)
        start = time.monotonic()
        with pytest.raises(RuntimeError, match=r"collective_timeout_s=3"):
            engine.generate(PROMPTS, PARAMS)
        assert time.monotonic() - start < 30
    finally:
        worker.send_signal(signal.SIGCONT)
        engine.close()
    assert not worker.is_running() or worker.status() == psutil.STATUS_ZOMBIE


DRIVER = """
import sys, time
from pipeline.engine import LLMEngine
engine = LLMEngine.from_engine_dir(sys.argv[1], device="cpu")
print(engine.model_runner.workers.pids[1], flush=True)
time.sleep(600)
"""


def test_a_killed_rank_0_takes_its_workers_with_it(tp2_engine_dir):
    driver = subprocess.Popen(
        [sys.executable, "-c", DRIVER, str(tp2_engine_dir)], stdout=subprocess.PIPE, text=True
    )
    try:
        worker = psutil.Process(int(driver.stdout.readline()))
        driver.kill()
        driver.wait()
        deadline = time.monotonic() + 30
        while worker.is_running() and worker.status() != psutil.STATUS_ZOMBIE:
            assert time.monotonic() < deadline, "the worker outlived rank 0"
            time.sleep(0.2)
    finally:
        driver.kill()
