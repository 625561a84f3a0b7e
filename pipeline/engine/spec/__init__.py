"""Speculative decoding: proposers of draft tokens and the engine's driver of them."""
