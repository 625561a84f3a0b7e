"""The wheel's packages, beyond what pyproject.toml can say: the Hydra config under conf/ ships
inside the package as pipeline/conf (a checkout keeps it at the top, where it is edited;
pipeline.cli reads it from either place), without the per-machine conf/local/."""

from setuptools import find_namespace_packages, setup

CONF = ["pipeline.conf"] + [
    f"pipeline.conf.{group}"
    for group in find_namespace_packages(where="conf", exclude=["local", "local.*"])
]

setup(
    packages=[*find_namespace_packages(include=["pipeline", "pipeline.*"]), *CONF],
    package_dir={"pipeline.conf": "conf"},
    package_data={"pipeline.engine.kernels": ["*.cu"]} | {name: ["*.yaml"] for name in CONF},
)
