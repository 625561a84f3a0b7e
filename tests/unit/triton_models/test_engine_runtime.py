"""The served engine and the direct bench's engine get the same runtime settings for a spec: the
real writer's config.pbtxt parameters, read back as the python model reads them, equal what the
bench and the tuner pass to their in-process engine."""

import ast
import dataclasses
from pathlib import Path

import pytest

from pipeline.engine.engine_config import RuntimeOptions
from pipeline.specs.deploy import SpecDecodeOptions
from pipeline.triton_models import engine_runtime as er
from tests.conftest import make_spec
from tests.unit.triton_repo.repo_helpers import read_config, write_repo

CASES = {
    "defaults": ((), ("guaranteed_no_evict", None, True, None, None, 0.0, None)),
    "every knob set": (
        (
            "deploy.batch_scheduler_policy=max_utilization",
            "deploy.torch.num_kv_blocks=64",
            "deploy.torch.enable_chunked_prefill=false",
            "deploy.torch.num_scheduler_steps=4",
            "deploy.torch.enable_prefix_caching=false",
            "deploy.torch.host_kv_cache_gb=2.5",
            "deploy.torch.spec.method=prompt_lookup",
            "deploy.torch.spec.num_draft_tokens=3",
        ),
        (
            "max_utilization",
            64,
            False,
            4,
            False,
            2.5,
            dataclasses.asdict(SpecDecodeOptions(method="prompt_lookup", num_draft_tokens=3)),
        ),
    ),
}
OPTIONS = (
    "scheduler_policy",
    "num_kv_blocks",
    "enable_chunked_prefill",
    "num_scheduler_steps",
    "enable_prefix_caching",
    "host_kv_cache_gb",
    "speculation",
)


@pytest.mark.parametrize("case", CASES)
def test_served_parameters_and_direct_runtime_agree(case, tmp_path):
    overrides, expected = CASES[case]
    served = read_config(write_repo(tmp_path, *overrides), "tensorrt_llm")
    params = {key: value.string_value for key, value in served.parameters.items()}
    served_runtime = er.runtime_from_parameters(params)
    direct_runtime = er.engine_runtime(make_spec("bench", *overrides, workdir=tmp_path).deploy)
    assert served_runtime == direct_runtime == dict(zip(OPTIONS, expected, strict=True))
    RuntimeOptions(**direct_runtime)  # every key is an engine runtime option


def test_a_bench_kv_budget_replaces_the_deployed_one(tmp_path):
    deploy = make_spec("bench", "deploy.torch.num_kv_blocks=64", workdir=tmp_path).deploy
    assert er.engine_runtime(deploy, num_kv_blocks=4)["num_kv_blocks"] == 4
    assert er.engine_runtime(deploy)["num_kv_blocks"] == 64


PYTHON_MODEL = Path(er.__file__).parent / "python_models" / "torch_llm.py"


def test_the_python_model_reads_its_runtime_through_this_module():
    # it runs inside tritonserver (its own imports, no pipeline spec): the source is what is
    # checked, that it parses no runtime parameter by hand
    tree = ast.parse(PYTHON_MODEL.read_text())
    calls = {ast.unparse(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)}
    assert "runtime_from_parameters" in calls
    read = {
        ast.unparse(n.slice)
        for n in ast.walk(tree)
        if isinstance(n, ast.Subscript) and ast.unparse(n.value) == "params"
    }
    assert "'engine_dir'" in read  # what the check below looks at
    assert not {repr(name) for name in er.PARAMETERS} & read
