"""Tuned serving knobs as a Hydra config overlay: conf/tuned/serving.yaml under the tune
artifact (a global-package file that sets the knobs at their config keys), and the same as
command-line overrides."""

from pathlib import Path

import yaml


def nested(overrides: dict[str, object]) -> dict:
    """{"deploy.torch.instances": 2} -> {"deploy": {"torch": {"instances": 2}}}."""
    out: dict = {}
    for key, value in overrides.items():
        node = out
        *parents, leaf = key.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return out


def write_overlay(
    out_dir: Path, final_dir: Path, overrides: dict[str, object], header: str
) -> dict:
    """The overlay file (written under out_dir, read from final_dir once the artifact is in
    place) and the two ways to deploy with it."""
    path = out_dir / "conf" / "tuned" / "serving.yaml"
    conf_dir = final_dir / "conf"
    path.parent.mkdir(parents=True)
    comment = "".join(f"# {line}\n" for line in header.splitlines())
    body = yaml.safe_dump(nested(overrides), sort_keys=False)
    path.write_text(f"# @package _global_\n{comment}{body}")
    line = " ".join(f"{k}={v}" for k, v in overrides.items())
    return {
        "path": str(conf_dir / "tuned" / "serving.yaml"),
        "overrides": line,
        "make_deploy": f'make deploy ARGS="{line}"',
        "with_overlay": f"python -m pipeline deploy 'hydra.searchpath=[file://{conf_dir}]' "
        f"+tuned=serving",
    }
