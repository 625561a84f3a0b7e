"""Guided decoding (structured output) with xgrammar: grammars compiled once per text
(grammar_compiler.py), each guided request's matcher (grammar_state.py), and the token bitmask
filled on the host for the rows that sample under a grammar and applied to their logits
(token_bitmask.py). Modelled on vLLM v1's vllm/v1/structured_output/."""
