"""The status a model's error message gets on the OpenAI API: a down engine is 503."""

from pipeline.openai_api.triton_llm import _model_error
from pipeline.request.errors import ENGINE_UNAVAILABLE


def test_an_engine_that_is_down_is_503_a_bad_request_400_the_rest_502():
    down = _model_error(
        f"tensorrt_llm: {ENGINE_UNAVAILABLE}: it failed and is not started again (x)"
    )
    assert down.status == 503 and not down.is_request_error
    assert _model_error("tensorrt_llm: request: max_tokens=0 is outside [1, 8]").status == 400
    assert _model_error("tensorrt_llm: engine process exited (code -9)").status == 502
