"""NvmlSource against a fake NVML library that, like the real one, refuses calls once the last
nvmlShutdown ran: a sweep through the server holds no other NVML user (no torch CUDA) in the
bench process, and its timeline is written after the sampler closed."""

from types import SimpleNamespace

import pynvml
import pytest

from pipeline.profiler.nvml_source import NvmlSource


@pytest.fixture
def fake_nvml(monkeypatch):
    state = {"refs": 0}

    def live(value):
        def call(*args):
            if state["refs"] == 0:
                raise pynvml.NVMLError(pynvml.NVML_ERROR_UNINITIALIZED)
            return value(*args) if callable(value) else value

        return call

    fakes = {
        "nvmlInit": lambda: state.update(refs=state["refs"] + 1),
        "nvmlShutdown": lambda: state.update(refs=state["refs"] - 1),
        "nvmlDeviceGetCount": live(2),
        "nvmlDeviceGetHandleByIndex": live(lambda i: f"h{i}"),
        "nvmlDeviceGetName": live(lambda h: f"GPU-{h}"),
        "nvmlDeviceGetMemoryInfo": live(lambda h: SimpleNamespace(total=80 << 30, used=1 << 30)),
        "nvmlSystemGetDriverVersion": live("580.1"),
        "nvmlDeviceGetUtilizationRates": live(lambda h: SimpleNamespace(gpu=42)),
        "nvmlDeviceGetPcieThroughput": live(lambda h, counter: 1000),
    }
    for name, fake in fakes.items():
        monkeypatch.setattr(pynvml, name, fake)
    return state


def test_describe_still_answers_after_close(fake_nvml):
    source = NvmlSource()
    sample = source.sample()
    assert sample["gpu1"] == {
        "util_pct": 42.0,
        "mem_used_bytes": float(1 << 30),
        "pcie_tx_bytes_s": 1024000.0,
        "pcie_rx_bytes_s": 1024000.0,
    }
    source.close()
    assert fake_nvml["refs"] == 0
    facts = source.describe()
    assert facts["driver"] == "580.1"
    assert [d["name"] for d in facts["devices"]] == ["GPU-h0", "GPU-h1"]
    assert facts["devices"][0]["memory_total_bytes"] == 80 << 30
