"""EleutherAI lm-eval against the served model: a multiple-choice task over a local dataset (no
network), its per-item log-likelihoods from /v1/completions (echo + logprobs, as lm-eval's
`local-completions` model asks them) equal to those lm-eval's `hf` model computes in-process on
the same weights."""

import json
from operator import itemgetter

import pytest
import requests

from tests.integration.openai_api.conftest import API_KEY

pytestmark = [pytest.mark.triton, pytest.mark.slow]

TASK = "pipeline_capitals"
ITEMS = [
    ("France", ["Paris", "Rome", "Madrid"], 0),
    ("Italy", ["Berlin", "Rome", "Lisbon"], 1),
    ("Spain", ["Madrid", "Oslo", "Vienna"], 0),
    ("Germany", ["Prague", "Warsaw", "Berlin"], 2),
    ("Japan", ["Seoul", "Tokyo", "Beijing"], 1),
    ("Portugal", ["Lisbon", "Athens", "Dublin"], 0),
    ("Norway", ["Helsinki", "Stockholm", "Oslo"], 2),
    ("Egypt", ["Cairo", "Nairobi", "Tunis"], 0),
]
REL = 1e-4


@pytest.fixture(scope="module")
def task_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("lm_eval_task")
    data = root / "capitals.jsonl"
    data.write_text(
        "".join(
            json.dumps({"country": country, "choices": choices, "answer": answer}) + "\n"
            for country, choices, answer in ITEMS
        )
    )
    (root / f"{TASK}.yaml").write_text(
        f"task: {TASK}\n"
        "dataset_path: json\n"
        f"dataset_kwargs:\n  data_files:\n    test: {data}\n"
        "test_split: test\n"
        "output_type: multiple_choice\n"
        'doc_to_text: "Question: What is the capital of {{country}}?\\nAnswer:"\n'
        "doc_to_choice: choices\n"
        "doc_to_target: answer\n"
        "metric_list:\n  - metric: acc\n"
    )
    return root


@pytest.fixture
def offline(monkeypatch):
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("OPENAI_API_KEY", API_KEY)  # local-completions sends it as its bearer


def samples(task_dir, model: str, model_args: str) -> list[dict]:
    import lm_eval
    from lm_eval.tasks import TaskManager

    results = lm_eval.simple_evaluate(
        model=model,
        model_args=model_args,
        tasks=[TASK],
        task_manager=TaskManager(include_path=str(task_dir)),
        batch_size=1,
        log_samples=True,
    )
    return sorted(results["samples"][TASK], key=itemgetter("doc_id"))


def logliks(items: list[dict]) -> list[list[float]]:
    return [[resp[0][0] for resp in item["resps"]] for item in items]


def requests_of_the_task() -> list[tuple[str, str]]:
    """The (context, continuation) pairs the task's multiple_choice docs make: each choice after
    lm-eval's default target_delimiter " "."""
    return [
        (f"Question: What is the capital of {country}?\nAnswer:", f" {choice}")
        for country, choices, _ in ITEMS
        for choice in choices
    ]


@pytest.fixture(scope="module")
def hf_logliks(smollm_hf_dir) -> list[float]:
    """lm-eval's hf model (HFLM) in-process on the same weights."""
    from lm_eval.api.instance import Instance
    from lm_eval.models.huggingface import HFLM

    lm = HFLM(pretrained=str(smollm_hf_dir), dtype="float32", device="cpu", batch_size=1)
    instances = [
        Instance("loglikelihood", {}, pair, i) for i, pair in enumerate(requests_of_the_task())
    ]
    return [loglik for loglik, _ in lm.loglikelihood(instances)]


def test_served_loglikelihoods_equal_lm_evals_hf_model(api, tokenizer, model_name, hf_logliks):
    """The requests lm-eval's local-completions model sends for each (context, continuation)
    (LocalCompletionsAPI._create_payload), read by its own parser (parse_logprobs)."""
    from lm_eval.models.openai_completions import LocalCompletionsAPI

    served = []
    for context, continuation in requests_of_the_task():
        body = {
            "model": model_name,
            "prompt": context + continuation,
            "temperature": 0,
            "max_tokens": 1,
            "logprobs": 1,
            "seed": 1234,
            "echo": True,
        }
        response = requests.post(
            f"{api.url}/v1/completions",
            json=body,
            headers={"Authorization": f"Bearer {API_KEY}"},
            timeout=120,
        )
        assert response.status_code == 200, response.text
        ctxlen = len(tokenizer(context, add_special_tokens=False).input_ids)
        ((loglik, _),) = LocalCompletionsAPI.parse_logprobs(response.json(), ctxlens=[ctxlen])
        served.append(loglik)
    assert served == pytest.approx(hf_logliks, rel=REL)
    assert len(set(served)) == len(served)  # every choice scored on its own


def test_lm_eval_local_completions_equals_its_hf_model(
    api, facts, model_name, task_dir, smollm_hf_dir, hf_logliks, offline
):
    """lm-eval's whole run (simple_evaluate) over the local task, both models."""
    pytest.importorskip("tenacity", reason="lm-eval's API models need lm-eval[api] (tenacity)")
    try:
        import datasets  # noqa: F401 - lm-eval's tasks load their data with it
    except ImportError as exc:
        pytest.skip(f"lm-eval's tasks need the datasets package, which does not import: {exc}")
    model_args = (
        f"model={model_name},base_url={api.url}/v1/completions,"
        f"tokenizer={facts['tokenizer_dir']},tokenizer_backend=huggingface,"
        "tokenized_requests=False,max_retries=1"
    )
    served = samples(task_dir, "local-completions", model_args)
    hf = samples(task_dir, "hf", f"pretrained={smollm_hf_dir},dtype=float32,device=cpu")
    assert [item["doc_id"] for item in served] == [item["doc_id"] for item in hf]
    assert logliks(served) == [pytest.approx(row, rel=REL) for row in logliks(hf)]
    assert [x for row in logliks(hf) for x in row] == pytest.approx(hf_logliks, rel=REL)
