"""The Triton model repository: five models with the tensorrtllm backend's public interface.

preprocessing -> tensorrt_llm -> postprocessing, chained by `ensemble` (and by the python BLS model
`tensorrt_llm_bls`). Both engine backends write their own `tensorrt_llm`; the other four models and
their python sources (pipeline.triton_models.python_models) are shared. The torch backend's
`tensorrt_llm` tokenizes and detokenizes itself (deploy.torch.tokenize, deploy.torch.detokenize):
its ensemble is tensorrt_llm alone, so a request's way in crosses one python stub and a streamed
response runs no postprocessing model (interface.ensemble_steps). Configs are built as
`ModelConfig` protobufs (model_config.py), validated as a whole (validate*.py), then swapped in
atomically (repo_writer.py).

This package writes the repository at deploy time; what runs inside the server at serve time is
pipeline.triton_models. Named triton_repo to keep it apart from the OpenAI Triton kernel language.
"""
