"""generate drives the models that take the ensemble's inputs, and names them when refusing."""

import pytest

from pipeline.client import cli


def test_generate_refuses_a_model_it_cannot_drive_naming_those_it_can(capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.main(["--model", "tensorrt_llm", "generate", "Hi"])
    err = capsys.readouterr().err
    assert exit_.value.code == 2
    assert "(ensemble, tensorrt_llm_bls), not 'tensorrt_llm'" in err
