"""vLLM's parameters and endpoints through the served API on real SmolLM2: n greedy choices,
logit_bias forcing and banning a token, min_p=0 as off, stop_token_ids, many stop strings; the
model card by id with its root (the tokenizer a benchmark tool loads), /tokenize and /detokenize
against the tokenizer, and /openapi.json."""

import requests

from tests.integration.openai_api.conftest import API_KEY, MAX_TOKENS, PROMPTS, QUESTION, chat_text

AUTH = {"Authorization": f"Bearer {API_KEY}"}


def greedy(sdk, model_name, **extra):
    fields = {"prompt": PROMPTS[0], "max_tokens": MAX_TOKENS, "temperature": 0, **extra}
    return sdk.completions.create(model=model_name, **fields)


def test_greedy_n_gives_equal_choices_and_min_p_zero_is_off(sdk, model_name):
    plain = greedy(sdk, model_name).choices[0].text
    out = greedy(sdk, model_name, n=3)
    assert [c.text for c in out.choices] == [plain] * 3
    sampled = dict(temperature=0.9, seed=11, max_tokens=MAX_TOKENS, prompt=PROMPTS[1])
    off = sdk.completions.create(model=model_name, **sampled).choices[0].text
    zero = sdk.completions.create(model=model_name, extra_body={"min_p": 0.0}, **sampled)
    assert zero.choices[0].text == off
    one = sdk.completions.create(model=model_name, extra_body={"min_p": 1.0}, **sampled)
    assert one.choices[0].text == greedy(sdk, model_name, prompt=PROMPTS[1]).choices[0].text


def test_logit_bias_forces_and_bans_tokens(sdk, tokenizer, model_name):
    plain = greedy(sdk, model_name).choices[0].text
    first = tokenizer(plain, add_special_tokens=False).input_ids[0]
    banned = greedy(sdk, model_name, logit_bias={str(first): -100})
    assert tokenizer(banned.choices[0].text, add_special_tokens=False).input_ids[0] != first
    dog = tokenizer(" dog", add_special_tokens=False).input_ids[0]
    forced = greedy(sdk, model_name, logit_bias={str(dog): 100}, max_tokens=4)
    assert forced.choices[0].text == " dog" * 4


def test_stop_token_ids_and_many_stop_strings(sdk, tokenizer, model_name):
    plain = greedy(sdk, model_name).choices[0].text
    ids = tokenizer(plain, add_special_tokens=False).input_ids
    stopped = greedy(sdk, model_name, extra_body={"stop_token_ids": [ids[2]]})
    # the stop token is kept (vLLM's rule for a token that is not special)
    assert stopped.choices[0].text == tokenizer.decode(ids[:3])
    assert stopped.choices[0].finish_reason == "stop"
    stops = [f"never-{i}" for i in range(20)] + [plain.split()[1]]
    many = greedy(sdk, model_name, stop=stops)
    assert many.choices[0].text == plain[: plain.index(plain.split()[1])]


def test_model_card_tokenize_detokenize_and_openapi(api, tokenizer, model_name, facts):
    card = requests.get(f"{api.url}/v1/models/{model_name}", headers=AUTH, timeout=30).json()
    assert card["id"] == model_name and card["root"] == str(facts["tokenizer_dir"])
    assert card["max_model_len"] > 0
    missing = requests.get(f"{api.url}/v1/models/not-{model_name}", headers=AUTH, timeout=30)
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "model_not_found"
    body = {"model": model_name, "prompt": PROMPTS[0]}
    tokens = requests.post(f"{api.url}/tokenize", json=body, headers=AUTH, timeout=30).json()
    assert tokens["tokens"] == tokenizer(PROMPTS[0]).input_ids
    assert tokens["count"] == len(tokens["tokens"]) and tokens["max_model_len"] > 0
    body = {"model": model_name, "messages": QUESTION}
    chat = requests.post(f"{api.url}/tokenize", json=body, headers=AUTH, timeout=30).json()
    expected = tokenizer(chat_text(tokenizer, QUESTION), add_special_tokens=False).input_ids
    assert chat["tokens"] == expected
    body = {"model": model_name, "tokens": tokens["tokens"]}
    text = requests.post(f"{api.url}/detokenize", json=body, headers=AUTH, timeout=30).json()
    assert text == {"prompt": tokenizer.decode(tokens["tokens"], skip_special_tokens=True)}
    doc = requests.get(f"{api.url}/openapi.json", timeout=30).json()
    assert {"/v1/completions", "/v1/models/{model}", "/tokenize", "/version"} <= set(doc["paths"])
    assert requests.get(f"{api.url}/version", timeout=30).json()["version"]
