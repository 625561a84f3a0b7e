"""The written repository: golden config.pbtxt files, python sources, atomic publish."""

import os
from pathlib import Path

import pytest

import pipeline
from pipeline.errors import ConfigError
from pipeline.triton_repo.interface import MODEL_NAMES
from pipeline.triton_repo.repo_writer import MARKER, publish, published_marker
from tests.unit.triton_repo.repo_helpers import write_repo

GOLDEN = Path(__file__).parent / "golden"


def _normalized(text: str, root: Path) -> str:
    """Machine-specific absolute paths -> stable names."""
    return text.replace(str(root.resolve()), "<ROOT>").replace(
        str(Path(pipeline.__file__).resolve().parent.parent), "<PYTHON_PATH>"
    )


@pytest.mark.parametrize("model", MODEL_NAMES)
def test_config_pbtxt_matches_golden(tmp_path, model):
    repo = write_repo(
        tmp_path,
        "deploy.preprocessing_instance_count=2",
        "deploy.max_queue_delay_microseconds=100",
        "deploy.torch.num_threads=1",
    )
    text = _normalized((repo / model / "config.pbtxt").read_text(), tmp_path)
    golden = GOLDEN / f"{model}.pbtxt"
    if os.environ.get("UPDATE_GOLDEN"):
        golden.write_text(text)
    assert text == golden.read_text(), f"regenerate with UPDATE_GOLDEN=1 if intended ({golden})"


def test_python_models_are_copied_from_the_package(tmp_path):
    repo = write_repo(tmp_path)
    sources = Path(pipeline.__file__).parent / "triton_models" / "python_models"
    for model, source in (
        ("preprocessing", "preprocessing.py"),
        ("postprocessing", "postprocessing.py"),
        ("tensorrt_llm_bls", "tensorrt_llm_bls.py"),
        ("tensorrt_llm", "torch_llm.py"),
    ):
        assert (repo / model / "1" / "model.py").read_bytes() == (sources / source).read_bytes()
    assert (repo / "ensemble" / "1").is_dir()


def test_publish_swaps_the_repository_and_keeps_the_readme(tmp_path):
    repo = write_repo(tmp_path)
    target = tmp_path / "model_repo"
    target.mkdir()
    (target / "README.md").write_text("generated, do not edit\n")
    publish(repo, target, {"artifact": "a"})
    assert sorted(p.name for p in target.iterdir()) == sorted([*MODEL_NAMES, "README.md", MARKER])
    assert (target / "README.md").read_text() == "generated, do not edit\n"
    assert published_marker(target) == {"artifact": "a"}
    (target / "ensemble" / "stale").write_text("from the previous deploy")
    publish(repo, target, {"artifact": "b"})
    assert not (target / "ensemble" / "stale").exists()
    assert published_marker(target) == {"artifact": "b"}
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".model_repo")] == []


def test_publish_refuses_a_directory_it_did_not_write(tmp_path):
    repo = write_repo(tmp_path)
    target = tmp_path / "my_models"
    target.mkdir()
    (target / "weights.bin").write_text("precious")
    with pytest.raises(ConfigError, match="holds files the pipeline did not write"):
        publish(repo, target, {"artifact": "a"})
    assert (target / "weights.bin").read_text() == "precious"


def _llm_config(repo: Path):
    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2

    return text_format.Parse(
        (repo / "tensorrt_llm" / "config.pbtxt").read_text(), model_config_pb2.ModelConfig()
    )


def _llm_instances(repo: Path) -> int:
    return sum(group.count for group in _llm_config(repo).instance_group)


@pytest.mark.parametrize(
    ("overrides", "want"),
    [
        ((), 1),  # auto, no GPU here
        (("backend.device=cuda",), 4),  # auto for a GPU engine, even deployed from a CPU box
        (("backend.device=cuda", "deploy.torch.engine_process=false"), 1),
        (("deploy.torch.instances=3",), 3),
    ],
    ids=["auto-cpu", "auto-gpu", "auto-gpu-in-process", "set"],
)
def test_the_torch_model_has_instances_that_share_its_engine_process(tmp_path, overrides, want):
    assert _llm_instances(write_repo(tmp_path, *overrides)) == want


def test_instances_without_an_engine_process_are_refused(tmp_path):
    with pytest.raises(ConfigError, match=r"instances=2 needs deploy.torch.engine_process=true"):
        write_repo(tmp_path, "deploy.torch.instances=2", "deploy.torch.engine_process=false")


def test_engine_steps_per_scheduling_reach_the_model_and_negatives_are_refused(tmp_path):
    cfg = _llm_config(write_repo(tmp_path / "a", "deploy.torch.num_scheduler_steps=4"))
    assert cfg.parameters["num_scheduler_steps"].string_value == "4"
    with pytest.raises(ConfigError, match=r"num_scheduler_steps=-1 must be >= 0"):
        write_repo(tmp_path / "b", "deploy.torch.num_scheduler_steps=-1")
