"""The whole pipeline's spec: one frozen group spec per Hydra config group, and the top-level
keys. Built once by pipeline.config from the composed config; stages take it whole (a stage calls
the stages before it), libraries take the groups they read."""

from dataclasses import dataclass

from pipeline.specs.backend import BackendSpec
from pipeline.specs.bench import BenchSpec
from pipeline.specs.build import BuildSpec
from pipeline.specs.deploy import DeploySpec
from pipeline.specs.lora import LoraSpec
from pipeline.specs.model import ModelSpec
from pipeline.specs.parallel import ParallelSpec
from pipeline.specs.quant import QuantSpec
from pipeline.specs.serve import ServeSpec
from pipeline.specs.study import StudySpec
from pipeline.specs.tune import TuneSpec


@dataclass(frozen=True, slots=True)
class PipelineSpec:
    stage: str  # set by the CLI's positional argument
    model: ModelSpec
    quant: QuantSpec
    build: BuildSpec
    deploy: DeploySpec
    bench: BenchSpec
    backend: BackendSpec
    parallel: ParallelSpec
    serve: ServeSpec = ServeSpec()  # frontends beside tritonserver (serve, demo)
    tune: TuneSpec = TuneSpec()  # measured-feedback search (tune)
    study: StudySpec = StudySpec()  # batch x parallelism study (study)
    lora: LoraSpec = LoraSpec()  # LoRA adapters served over the base model (deploy, serve)
    workdir: str = "artifacts"  # artifacts live under <workdir>/<model>/<stage>-<config hash>/
    # target GPU for precision checks: auto | cpu | a100 | l40s | h100 | h200 | b200 ...
    hardware: str = "auto"
    force: bool = False  # re-run a stage even when its inputs and config are unchanged
    verbose: bool = False
