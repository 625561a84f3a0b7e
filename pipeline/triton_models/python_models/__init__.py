"""Python-backend model sources, copied into the repository as <model>/1/model.py.

They run inside Triton's python stub (they import triton_python_backend_utils), never imported by
the pipeline. preprocessing/postprocessing/tensorrt_llm_bls need only numpy and transformers, so
they also run in the Triton + TensorRT-LLM container; torch_llm imports this checkout's pipeline.
"""
