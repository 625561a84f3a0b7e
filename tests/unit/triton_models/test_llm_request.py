"""tensorrt_llm input tensors -> engine requests, with the tensorrtllm backend's semantics."""

import numpy as np
import pytest
from tokenizers import Tokenizer, models, pre_tokenizers, processors
from transformers import PreTrainedTokenizerFast

from pipeline.triton_models.llm_request import TextEncoder, from_arrays, word_sequences

VOCAB = ["<unk>", "<s>", "</s>", "the", "cat", "sat", "on", "mat", "."]


def request_arrays(**extra) -> dict[str, np.ndarray]:
    """What the ensemble sends for one prompt: batch dim first, scalars as [1, 1]."""
    arrays = {
        "input_ids": np.array([[5, 6, 7, 0]], np.int32),
        "input_lengths": np.array([[3]], np.int32),
        "request_output_len": np.array([[4]], np.int32),
    }
    arrays.update({k: np.asarray(v) for k, v in extra.items()})
    return arrays


def test_prompt_is_cut_to_input_lengths():
    request = from_arrays(request_arrays(), default_exclude_input=True)
    assert request.prompt_token_ids == [5, 6, 7]
    assert request.params.max_tokens == 4
    assert not request.is_streaming and request.is_input_excluded


@pytest.mark.parametrize(
    "extra",
    [
        {},  # nothing sent: top_k = top_p = 0 means greedy in TensorRT-LLM
        {"runtime_top_k": [[1]], "temperature": [[0.7]]},
        {"temperature": [[0.0]], "runtime_top_p": [[0.9]]},
        {"runtime_top_k": [[0]], "runtime_top_p": [[0.0]], "temperature": [[1.3]]},
    ],
)
def test_greedy_cases(extra):
    assert from_arrays(request_arrays(**extra), True).params.is_greedy


def test_sampling_knobs_map_to_the_engine():
    params = from_arrays(
        request_arrays(
            runtime_top_k=np.array([[40]], np.int32),
            runtime_top_p=np.array([[0.0]], np.float32),
            temperature=np.array([[0.7]], np.float32),
            seed=np.array([[123]], np.uint64),
            end_id=np.array([[2]], np.int32),
            pad_id=np.array([[9]], np.int32),
        ),
        True,
    ).params
    assert (params.top_k, params.top_p, params.seed, params.end_id, params.pad_id) == (
        40,
        1.0,
        123,
        2,
        9,
    )
    assert params.temperature == pytest.approx(0.7)


def test_word_list_format():
    # "ab" -> [11, 12], "c" -> [13]: ids row, cumulative ends row padded with -1
    words = np.array([[[11, 12, 13, 0], [2, 3, -1, -1]]], np.int32)
    assert word_sequences(words) == ((11, 12), (13,))
    assert word_sequences(np.array([[[0], [-1]]], np.int32)) == ()


def test_stop_and_bad_words_reach_the_params():
    params = from_arrays(
        request_arrays(
            stop_words_list=np.array([[[11, 12], [2, -1]]], np.int32),
            bad_words_list=np.zeros((1, 2, 0), np.int32),
        ),
        True,
    ).params
    assert params.stop_sequences == ((11, 12),) and params.bad_sequences == ()


def test_streaming_and_prompt_echo_flags():
    request = from_arrays(
        request_arrays(streaming=np.array([[True]]), exclude_input_in_output=np.array([[False]])),
        True,
    )
    assert request.is_streaming and not request.is_input_excluded


@pytest.mark.parametrize(
    "extra, message",
    [
        ({"input_ids": np.array([[1, 2], [3, 4]], np.int32)}, "send one prompt per request"),
        ({"input_lengths": np.array([[9]], np.int32)}, "input_lengths=9 but input_ids holds 4"),
        ({"request_output_len": np.array([[0]], np.int32)}, r"request_output_len=0 \(the"),
        (
            {"temperature": np.array([[0.5, 0.5]], np.float32), "runtime_top_k": [[5]]},
            "temperature: expected one value per request",
        ),
    ],
)
def test_refusals(extra, message):
    with pytest.raises(ValueError, match=message):
        from_arrays(request_arrays(**extra), True)


def test_input_ids_are_required():
    arrays = request_arrays()
    del arrays["input_ids"]
    with pytest.raises(ValueError, match=r"input_ids \(or text_input\) is required"):
        from_arrays(arrays, True)


@pytest.fixture(scope="module")
def tokenizer() -> PreTrainedTokenizerFast:
    """A real word-level tokenizer that adds <s> in front, as Llama's adds its BOS."""
    tokenizer = Tokenizer(models.WordLevel({w: i for i, w in enumerate(VOCAB)}, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Split(" ", behavior="removed")
    tokenizer.post_processor = processors.TemplateProcessing(
        single="<s> $A", special_tokens=[("<s>", 1)]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, unk_token="<unk>", bos_token="<s>", eos_token="</s>"
    )


@pytest.fixture(scope="module")
def encoder(tokenizer) -> TextEncoder:
    return TextEncoder(tokenizer, add_special_tokens=True)


def text_arrays(prompt: str, **extra) -> dict[str, np.ndarray]:
    """What the one-step ensemble sends: its own text inputs, strings as bytes."""
    arrays = {
        "text_input": np.array([[prompt.encode()]], np.object_),
        "request_output_len": np.array([[4]], np.int32),
    }
    arrays.update(extra)
    return arrays


def test_text_prompt_is_tokenized_with_the_tokenizers_ids(encoder):
    request = from_arrays(text_arrays("the cat sat"), True, encoder)
    assert request.prompt_token_ids == [1, 3, 4, 5]  # <s> the cat sat
    # no end_id/pad_id sent: preprocessing's defaults (eos; pad falls back to eos)
    assert (request.params.end_id, request.params.pad_id) == (2, 2)
    sent = from_arrays(text_arrays("the cat", end_id=np.array([[8]], np.int32)), True, encoder)
    assert sent.params.end_id == 8


def test_stop_and_bad_words_as_text_join_the_id_lists(encoder):
    words = np.array([[b"on the", b"", b"mat"]], np.object_)
    params = from_arrays(
        text_arrays(
            "the cat",
            stop_words=words,
            bad_words=np.array([[b"sat"]], np.object_),
            stop_words_list=np.array([[[11, 12], [2, -1]]], np.int32),
        ),
        True,
        encoder,
    ).params
    assert params.stop_sequences == ((11, 12), (6, 3), (7,))
    assert params.bad_sequences == ((5,),)


@pytest.mark.parametrize(
    "arrays, message",
    [
        (
            text_arrays("the", input_ids=np.array([[3]], np.int32)),
            "send input_ids or text_input, not both",
        ),
        (
            {**text_arrays("x"), "text_input": np.array([[b"the"], [b"cat"]], np.object_)},
            "text_input: batch size 2: send one prompt per request",
        ),
    ],
)
def test_text_refusals(encoder, arrays, message):
    with pytest.raises(ValueError, match=message):
        from_arrays(arrays, True, encoder)


def test_empty_text_is_refused_unless_special_tokens_make_a_prompt(tokenizer, encoder):
    # as preprocessing: "" with add_special_tokens is the BOS alone
    assert from_arrays(text_arrays(""), True, encoder).prompt_token_ids == [1]
    with pytest.raises(ValueError, match="text_input tokenizes to no tokens"):
        from_arrays(text_arrays(""), True, TextEncoder(tokenizer, add_special_tokens=False))


def test_text_needs_a_tokenizer():
    with pytest.raises(ValueError, match="text_input needs the model's tokenizer_dir"):
        from_arrays(text_arrays("the cat"), True)


def test_text_is_encoded_as_transformers_encodes_it_without_touching_its_tokenizer(tokenizer):
    # a tokenizer.json may carry truncation: transformers' encode turns it off for a text
    backend = Tokenizer.from_str(tokenizer.backend_tokenizer.to_str())
    backend.enable_truncation(max_length=2)
    truncating = PreTrainedTokenizerFast(
        tokenizer_object=backend, unk_token="<unk>", bos_token="<s>", eos_token="</s>"
    )
    encoder = TextEncoder(truncating, add_special_tokens=True)
    assert truncating.backend_tokenizer.truncation is not None  # before any encode
    for text in ("the cat sat on the mat .", "cat", "dog mat"):
        assert encoder.prompt(text) == truncating.encode(text)
        assert encoder.words([text]) == (tuple(truncating.encode(text, add_special_tokens=False)),)
    assert len(encoder.prompt("the cat sat on the mat .")) == 8  # <s> + 7 words: not cut


@pytest.mark.parametrize(
    "extra, message",
    [
        ({"temperature": np.array([[np.nan]], np.float32)}, "temperature=nan is not a finite"),
        ({"temperature": np.array([[-1.0]], np.float32)}, r"temperature=-1.0 is outside \[0.0,"),
        ({"temperature": np.array([[np.inf]], np.float32)}, "temperature=inf is not a finite"),
        ({"runtime_top_p": np.array([[1.5]], np.float32)}, r"runtime_top_p=1.5 .*top_p"),
        ({"runtime_top_k": np.array([[-3]], np.int32)}, r"runtime_top_k=-3 .* is outside \[0,"),
        ({"request_output_len": np.array([[-2]], np.int32)}, r"request_output_len=-2 .*max_tokens"),
        ({"end_id": np.array([[-2]], np.int32)}, r"end_id=-2 is outside \[-1,"),
        ({"input_lengths": np.array([[0]], np.int32)}, r"input_lengths=0 is outside \[1,"),
    ],
)
def test_out_of_range_values_are_refused_naming_input_value_and_range(extra, message):
    # temperature -1 was taken as greedy, NaN reached the sampler and stopped the engine
    with pytest.raises(ValueError, match=message):
        from_arrays(request_arrays(**extra), default_exclude_input=True)


@pytest.mark.parametrize(
    "words, message",
    [
        (np.array([[1, 2, 3]], np.int32), r"shape \[1, 3\] is not \[2, N\]"),
        (np.array([[[4, 5], [3, -1]]], np.int32), "end offset 3 after 0 is not in"),
        (np.array([[4, 5, 6], [2, 1, -1]], np.int32), "end offset 1 after 2"),
    ],
)
def test_malformed_word_lists_are_refused(words, message):
    with pytest.raises(ValueError, match=message):
        word_sequences(words, "bad_words_list")


def test_upstream_sampling_inputs_reach_the_engine():
    request = from_arrays(
        request_arrays(
            repetition_penalty=[[1.2]],
            presence_penalty=[[0.5]],
            frequency_penalty=[[-0.25]],
            min_tokens=[[3]],
            return_log_probs=[[True]],
            len_penalty=[[0.7]],  # beam search only: accepted, changes nothing
            beam_width=[[1]],
            num_return_sequences=[[3]],
            seed=np.array([[2**64 - 2]], np.uint64),
            return_num_input_tokens=[[True]],
        ),
        default_exclude_input=True,
    )
    p = request.params
    assert (p.repetition_penalty, p.presence_penalty, p.frequency_penalty) == (1.2, 0.5, -0.25)
    assert (p.min_tokens, p.logprobs, p.prompt_ignore_length) == (3, 0, 0)
    assert request.num_sequences == 3 and request.wants_num_input_tokens
    assert [s.seed for s in request.sequence_params()] == [2**64 - 2, 2**64 - 1, 0]
    plain = from_arrays(request_arrays(), default_exclude_input=True)
    assert plain.params.logprobs is None and not plain.params.has_penalties


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        (
            {"beam_width": [[2]], "beam_search_diversity_rate": [[0.5]]},
            "beam_search_diversity_rate=0.5 (no diverse beam search",
        ),
        ({"lora_task_id": np.array([[7]], np.uint64)}, "lora_task_id=7 (no LoRA adapters"),
        (
            {"embedding_bias_weights": np.ones((1, 2), np.float32)},
            "embedding_bias_weights=<[1, 2] float32> (no embedding bias",
        ),
        ({"prompt_embedding_table": np.ones((1, 2, 4), np.float16)}, "prompt_embedding_table"),
        ({"draft_input_ids": [[3, 4]]}, "draft_input_ids=<[1, 2] int64> (no client draft tokens"),
        ({"lookahead_window_size": [[3]]}, "lookahead_window_size=3 (no speculative decoding"),
        ({"encoder_output_lengths": [[3]]}, "encoder_output_lengths=3 (no encoder-decoder"),
        ({"runtime_top_p_decay": [[0.5]]}, "runtime_top_p_decay=0.5 (no top-p decay"),
    ],
)
def test_inputs_the_torch_engine_cannot_serve_are_named(extra, named):
    with pytest.raises(ValueError, match="not supported by backend=torch") as info:
        from_arrays(request_arrays(**extra), default_exclude_input=True)
    assert named in str(info.value)


def test_inputs_that_ask_for_nothing_pass():
    """preprocessing always sends an embedding bias ([1, 0] when none) and the ensemble passes
    false flags on."""
    arrays = request_arrays(
        embedding_bias=np.zeros((1, 0), np.float32),
        prompt_table_extra_ids=np.zeros((1, 3), np.uint64),
        return_context_logits=[[False]],
        beam_width=[[1]],
    )
    assert from_arrays(arrays, default_exclude_input=True).params.max_tokens == 4


def test_beam_inputs_reach_the_engine():
    """beam_width, len_penalty and early_stopping (a bool: TensorRT-LLM's 1 / 0)."""
    arrays = request_arrays(beam_width=[[3]], len_penalty=[[0.5]], early_stopping=[[False]])
    p = from_arrays(arrays, default_exclude_input=True).params
    assert (p.beam_width, p.length_penalty, p.early_stopping) == (3, 0.5, 0)
    plain = from_arrays(request_arrays(), default_exclude_input=True).params
    assert (plain.beam_width, plain.length_penalty, plain.early_stopping) == (1, 1.0, 1)
    assert from_arrays(arrays, True).num_beams_returned == 0  # unsent: every beam
    best = from_arrays(request_arrays(beam_width=[[3]], num_return_sequences=[[2]]), True)
    assert (best.num_sequences, best.num_beams_returned) == (1, 2)
    with pytest.raises(ValueError, match="send at most 3"):
        from_arrays(request_arrays(beam_width=[[3]], num_return_sequences=[[4]]), True)


def test_encoder_decoder_and_beam_inputs_are_taken_and_unused():
    """As the tensorrtllm backend with a decoder-only engine and beam width 1: upstream's
    preprocessing always sends a decoder prompt."""
    arrays = request_arrays(
        decoder_input_ids=np.array([[2]], np.int32),
        decoder_input_lengths=[[1]],
        decoder_text_input=np.array([[b"Bonjour"]], object),
        early_stopping=[[True]],
        beam_search_diversity_rate=[[0.5]],
    )
    plain = from_arrays(request_arrays(), default_exclude_input=True)
    assert from_arrays(arrays, default_exclude_input=True) == plain


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        ({"repetition_penalty": [[0.0]]}, "repetition_penalty=0.0 is outside [1e-06, 1000000.0]"),
        ({"presence_penalty": [[np.inf]]}, "presence_penalty=inf is not a finite number"),
        ({"min_tokens": [[-1]]}, "min_tokens=-1 is outside [0,"),
        ({"num_return_sequences": [[0]]}, "num_return_sequences=0 is outside [1,"),
        ({"len_penalty": [[np.nan]]}, "the ensemble's length_penalty"),
    ],
)
def test_out_of_range_values_are_named(extra, named):
    with pytest.raises(ValueError) as info:
        from_arrays(request_arrays(**extra), default_exclude_input=True)
    assert named in str(info.value)


def test_a_missing_output_length_is_named_as_missing():
    arrays = request_arrays()
    del arrays["request_output_len"]
    with pytest.raises(ValueError, match="missing required input request_output_len"):
        from_arrays(arrays, default_exclude_input=True)


@pytest.mark.parametrize("name", ["text_input", "bad_words", "stop_words"])
def test_text_that_is_not_utf8_is_named(encoder, name):
    arrays = text_arrays("Hi")
    arrays[name] = np.array([[b"\xff\xfe"]], np.object_)
    with pytest.raises(ValueError, match=f"{name}: byte 0 is not valid UTF-8"):
        from_arrays(arrays, True, encoder)


def test_embedding_bias_and_min_p_reach_the_sampling_params():
    bias = np.zeros((1, len(VOCAB)), np.float32)
    bias[0, 4], bias[0, 7] = 100.0, -100.0
    arrays = request_arrays(
        embedding_bias=bias, min_p=np.array([[0.25]], np.float32), temperature=[[0.7]]
    )
    p = from_arrays(arrays, default_exclude_input=True).params
    assert p.logit_bias == ((4, 100.0), (7, -100.0)) and p.min_p == 0.25
    for name, value in (("min_p", 1.5), ("embedding_bias", np.full((1, 3), 101.0, np.float32))):
        with pytest.raises(ValueError, match=f"{name}=.* is outside"):
            from_arrays(
                request_arrays(**{name: np.asarray(value, np.float32).reshape(1, -1)}), True
            )


def test_guided_decoding_inputs_become_the_requests_guide():
    schema = '{"type": "object"}'
    guided = from_arrays(
        request_arrays(
            guided_decoding_guide_type=np.array([[b"json_schema"]], object),
            guided_decoding_guide=np.array([[schema.encode()]], object),
        ),
        default_exclude_input=True,
    )
    assert (guided.params.guide.type, guided.params.guide.text) == ("json_schema", schema)
    any_json = from_arrays(
        request_arrays(guided_decoding_guide_type=np.array([[b"json"]], object)),
        default_exclude_input=True,
    )
    assert any_json.params.guide.type == "json"
    assert from_arrays(request_arrays(), default_exclude_input=True).params.guide is None


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        ({"guided_decoding_guide_type": [[b"structural_tag"]]}, "'structural_tag' is not served"),
        ({"guided_decoding_guide": [[b"\\d+"]]}, "without guided_decoding_guide_type"),
        ({"guided_decoding_guide_type": [[b"regex"]]}, "needs its text"),
        (
            {"guided_decoding_guide_type": [[b"json_schema"]], "guided_decoding_guide": [[b"{"]]},
            "the schema is not JSON",
        ),
    ],
)
def test_bad_guided_decoding_inputs_are_named(extra, named):
    extra = {k: np.array(v, object) for k, v in extra.items()}
    with pytest.raises(ValueError, match=named):
        from_arrays(request_arrays(**extra), default_exclude_input=True)
