"""User-triggerable errors; messages name what failed, the value, the key to change, a fix."""


class PipelineError(Exception):
    """Base class: the CLI prints these as one line, without a traceback."""


class ConfigError(PipelineError):
    """A config value is invalid or inconsistent."""


class ArtifactError(PipelineError):
    """An input file or artifact is missing, corrupted or of the wrong kind."""


class StageError(PipelineError):
    """A stage failed while running (subprocess, gate, server)."""


class GateFailed(StageError):
    """A quality gate failed; the artifact is kept but its manifest says status=failed."""
