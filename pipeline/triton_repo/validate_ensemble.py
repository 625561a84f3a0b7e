"""Ensemble rules Triton enforces only at load time (core ensemble_utils.cc), checked up front."""

from pipeline.triton_repo.interface import RESULT_OUTPUTS
from pipeline.triton_repo.model_config import type_name


def _signature(tensor) -> tuple[str, tuple[int, ...]]:
    return type_name(tensor.data_type), tuple(tensor.dims)


def _dims_agree(a: tuple[int, ...], b: tuple[int, ...]) -> bool:
    return len(a) == len(b) and all(x == y or -1 in (x, y) for x, y in zip(a, b, strict=True))


def _producers(ensemble, configs: dict, errors: list[str]) -> dict[str, tuple]:
    """Ensemble tensor -> (dtype, dims), from the ensemble inputs and every step's outputs."""
    tensors = {t.name: _signature(t) for t in ensemble.input}
    for step in ensemble.ensemble_scheduling.step:
        model = configs.get(step.model_name)
        if model is None:
            continue
        outputs = {t.name: _signature(t) for t in model.output}
        for model_tensor, ensemble_tensor in step.output_map.items():
            if model_tensor not in outputs:
                errors.append(
                    f"ensemble: step {step.model_name!r} maps output {model_tensor!r}, "
                    f"which {step.model_name} does not declare"
                )
            elif ensemble_tensor in tensors:
                errors.append(
                    f"ensemble: tensor {ensemble_tensor!r} is produced more than once "
                    f"(again by {step.model_name}.{model_tensor})"
                )
            else:
                tensors[ensemble_tensor] = outputs[model_tensor]
    return tensors


def _check_step(step, model, tensors: dict, errors: list[str]) -> None:
    inputs = {t.name: t for t in model.input}
    for model_tensor, ensemble_tensor in step.input_map.items():
        where = f"ensemble: step {step.model_name!r} input {model_tensor!r} <- {ensemble_tensor!r}"
        if model_tensor not in inputs:
            errors.append(f"{where}: {step.model_name} has no such input")
        elif ensemble_tensor not in tensors:
            errors.append(f"{where}: no ensemble input or earlier step output of that name")
        else:
            want, got = _signature(inputs[model_tensor]), tensors[ensemble_tensor]
            if want[0] != got[0]:
                errors.append(f"{where}: dtype {got[0]} but {step.model_name} wants {want[0]}")
            elif not _dims_agree(want[1], got[1]):
                errors.append(
                    f"{where}: dims {list(got[1])} but {step.model_name} wants {list(want[1])}"
                )
    missing = [n for n, t in inputs.items() if not t.optional and n not in step.input_map]
    if missing:
        errors.append(
            f"ensemble: step {step.model_name!r} leaves required inputs {missing} unmapped"
        )


def check_ensemble(configs: dict) -> list[str]:
    ensemble = configs.get("ensemble")
    if ensemble is None:
        return []
    errors: list[str] = []
    steps = ensemble.ensemble_scheduling.step
    if not steps:
        errors.append("ensemble: no ensemble_scheduling steps")
    for step in steps:
        if step.model_name not in configs:
            errors.append(
                f"ensemble: step names model {step.model_name!r}, which is not in the repository"
            )
    tensors = _producers(ensemble, configs, errors)
    for step in steps:
        if step.model_name in configs:
            _check_step(step, configs[step.model_name], tensors, errors)
            model_batch = configs[step.model_name].max_batch_size
            if ensemble.max_batch_size > model_batch:
                errors.append(
                    f"ensemble: max_batch_size {ensemble.max_batch_size} > "
                    f"{step.model_name}'s {model_batch}; Triton refuses to load it"
                )
    produced = [v for step in steps for v in step.output_map.values()]
    for output in ensemble.output:
        if produced.count(output.name) != 1:
            errors.append(
                f"ensemble: output {output.name!r} is produced "
                f"{produced.count(output.name)} times (needs exactly 1)"
            )
        elif output.name in tensors and _signature(output)[0] != tensors[output.name][0]:
            errors.append(
                f"ensemble: output {output.name!r} is {_signature(output)[0]} but its "
                f"producer gives {tensors[output.name][0]}"
            )
    return errors


def check_bls_interface(configs: dict) -> list[str]:
    """Clients must not care whether they call `ensemble` or `tensorrt_llm_bls`: the BLS takes
    every ensemble input (and, as upstream's, its own multimodal and draft-model inputs) and gives
    the ensemble's outputs."""
    ensemble, bls = configs.get("ensemble"), configs.get("tensorrt_llm_bls")
    if ensemble is None or bls is None:
        return []
    errors = []
    for kind in ("input", "output"):
        want = {t.name: _signature(t) for t in getattr(ensemble, kind)}
        got = {t.name: _signature(t) for t in getattr(bls, kind)}
        if kind == "input":
            got = {name: sig for name, sig in got.items() if name in want}
        if want != got:
            diff = sorted(set(want.items()) ^ set(got.items()))
            errors.append(f"tensorrt_llm_bls: {kind}s differ from the ensemble's ({diff})")
    return errors


def check_text_source(configs: dict, backend: str) -> list[str]:
    """Who reads text_input and makes text_output: pre/postprocessing (upstream) or tensorrt_llm
    itself (backend=torch)."""
    ensemble = configs.get("ensemble")
    if ensemble is None:
        return []
    steps = ensemble.ensemble_scheduling.step
    producers = {tensor: step.model_name for step in steps for tensor in step.output_map.values()}
    # the tensorrt_llm model's own results (log probs, indices, counters) come from it, as
    # upstream's ensemble maps them; with a postprocessing step they come in responses of their own
    results = {spec.name for spec in RESULT_OUTPUTS}
    from_steps = sorted(
        {producers[t.name] for t in ensemble.output if t.name in producers.keys() - results}
    )
    errors = []
    if len(from_steps) > 1:
        errors.append(
            f"ensemble: its outputs come from steps {from_steps}; one step must make them all "
            f"(each of its responses is one client response)"
        )
    # (what the ensemble relies on tensorrt_llm for, the verb, the step that would do it instead)
    roles = []
    if any(s.model_name == "tensorrt_llm" and "text_input" in s.input_map.values() for s in steps):
        roles.append(("takes the ensemble's text_input", "tokenize", "preprocessing"))
    if producers.get("text_output") == "tensorrt_llm":
        roles.append(("gives the ensemble text_output", "detokenize", "postprocessing"))
    llm = configs.get("tensorrt_llm")
    for role, verb, step in roles:
        if backend != "torch":
            errors.append(
                f"ensemble: tensorrt_llm {role}, but backend={backend}'s tensorrt_llm cannot "
                f"{verb}; keep the {step} step"
            )
        if llm is not None and "tokenizer_dir" not in llm.parameters:
            errors.append(f"tensorrt_llm: {role} but has no tokenizer_dir parameter")
    return errors
