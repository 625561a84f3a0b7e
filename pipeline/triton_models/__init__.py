"""What runs inside tritonserver's python stub at serve time: the python models' sources
(python_models/, copied into the repository as <model>/1/model.py, with input_checks.py and
bls_names.py beside them) and, for backend=torch, the engine service they host (llm_service,
engine_supervisor, llm_request, live_request, detokenizer, hop_log, drain).

The repository writer (pipeline.triton_repo, deploy time) copies and configures these; nothing
here imports it. engine_runtime is the one codec both sides share: deploy writes the engine's
runtime settings as config.pbtxt parameters, the model reads them back.
"""

from pathlib import Path

SERVED = Path(__file__).parent  # the sources the repository writer copies from
