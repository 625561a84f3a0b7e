"""Models of a published shape without its weights: engine speed, memory and communication do
not depend on the weights' values, so the study and the GPU benchmarks measure these shapes
with random weights.

    shapes   the Llama-family configs measured (Llama-3.1-8B, SmolLM2-135M, a tiny test shape)
    weights  random weights for one rank of a TP / PP split, drawn as the engine loads them
"""
