"""usage.prompt_tokens_details.cached_tokens through the served path: the engine's count of
prompt tokens its prefix cache held reaches the OpenAI answer (non-streamed and streamed)."""

import pytest

from tests.integration.openai_api.conftest import MAX_TOKENS

pytestmark = [pytest.mark.triton, pytest.mark.slow]

SYSTEM = (
    "You are a careful assistant for a small library. Answer in one short sentence, name the "
    "shelf where the book is kept, and never invent titles that the catalogue does not list."
)


def messages(question: str) -> list[dict]:
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}]


def test_a_repeated_system_prompt_reports_cached_tokens(sdk, model_name):
    first = sdk.chat.completions.create(
        model=model_name, messages=messages("Where is Moby Dick?"), max_tokens=MAX_TOKENS
    )
    assert first.usage.prompt_tokens_details.cached_tokens == 0
    again = sdk.chat.completions.create(
        model=model_name, messages=messages("Do you have atlases?"), max_tokens=MAX_TOKENS
    )
    cached = again.usage.prompt_tokens_details.cached_tokens
    # the shared system prompt's full blocks (16 tokens each in the served engine)
    assert 32 <= cached < again.usage.prompt_tokens and cached % 16 == 0
    chunks = list(
        sdk.chat.completions.create(
            model=model_name,
            messages=messages("Where are the cookbooks?"),
            max_tokens=MAX_TOKENS,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    assert chunks[-1].usage.prompt_tokens_details.cached_tokens >= 32
