"""scripts.profile_report: kernel classes, per-step numbers and the one-step cut of a trace."""

import pytest

from scripts import profile_report as report

# names as CUPTI reports them (H100, torch 2.x), and our Triton kernels'
KERNELS = {
    "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_execute_segment_k_off_kernel": (
        "gemm"
    ),
    "nvjet_tst_128x64_64x8_1x2_h_bz_coopA_NTT": "gemm",
    "void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_bf16_64x64_64x4_tn_align8>": "gemm",
    "void gemv2T_kernel_val<int, int, __nv_bfloat16, __nv_bfloat16, float, 128, 16, 4>": "gemm",
    "_varlen_attention_kernel": "attention_prefill",
    "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4>>": (
        "attention_prefill"
    ),
    "fmha_cutlassF_bf16_aligned_64x64_rf_sm80": "attention_prefill",
    "_decode_kernel": "attention_decode",
    "_merge_kernel": "attention_decode",
    "_rotary_store_kv_kernel": "kv_store",
    "void at::native::gpu_kernel_impl_nocast<at::native::index_copy_kernel_impl<long>>": (
        "kv_store"
    ),
    "_rmsnorm_kernel": "norm_rotary_act",
    "_silu_and_mul_kernel": "norm_rotary_act",
    "triton_per_fused_add_mean_mul_pow_rsqrt_0": "norm_rotary_act",
    "void at::native::reduce_kernel<512, 1, ReduceOp<float, ArgMaxOps<float>, long>>": "sampling",
    "void at::native::cunn_SoftMaxForward<4, float, float, float, SoftMaxForwardEpilogue>": (
        "sampling"
    ),
    "void at::native::bitonicSortKVInPlace<-2, -1, 16, 16, float, long>": "sampling",
    "Memcpy HtoD (Pinned -> Device)": "memcpy",
    "Memcpy DtoH (Device -> Pageable)": "memcpy",
    "void at::native::vectorized_elementwise_kernel<4, CUDAFunctor_add<c10::BFloat16>>": "other",
    "void at::native::indexSelectLargeIndex<c10::BFloat16, long, unsigned int, 2, 2, -2, true>": (
        "other"
    ),
    "Memset (Device)": "other",
}


@pytest.mark.parametrize(("name", "expected"), KERNELS.items())
def test_classify_kernel(name, expected):
    assert report.classify_kernel(name) == expected


def test_every_class_is_reported():
    classes = {name for name, _ in report.KERNEL_CLASSES} | {"other"}
    assert set(report.KERNEL_CLASS_NAMES) == classes


def event(name, cat, ts, dur, ph="X"):
    return {"ph": ph, "cat": cat, "name": name, "ts": ts, "dur": dur}


# two steps at 100-200 and 300-400 us; the driver syncs after each, outside the step range
TRACE = [
    {"ph": "M", "name": "process_name", "ts": 0, "args": {"name": "python"}},
    event(report.STEP_RANGE, "user_annotation", 100, 100),
    event("engine.forward", "user_annotation", 110, 40),
    event("engine.sample", "user_annotation", 160, 30),
    event("cudaLaunchKernel", "cuda_runtime", 120, 5),
    event("cuLaunchKernel", "cuda_driver", 130, 5),
    event("cudaStreamSynchronize", "cuda_runtime", 170, 10),
    event("aten::_local_scalar_dense", "cpu_op", 165, 20),
    event("cudaDeviceSynchronize", "cuda_runtime", 205, 10),
    event("gemm_kernel", "kernel", 125, 30),
    event("_rmsnorm_kernel", "kernel", 140, 20),  # overlaps the gemm: busy counts it once
    event("Memcpy DtoH (Device -> Pageable)", "gpu_memcpy", 175, 2),
    event(report.STEP_RANGE, "user_annotation", 300, 100),
    event("engine.forward", "user_annotation", 310, 20),
    event("cudaGraphLaunch", "cuda_runtime", 315, 5),
    event("_decode_kernel", "kernel", 320, 60),
    event("cudaDeviceSynchronize", "cuda_runtime", 405, 10),
]


def test_summarize_trace_gives_per_step_means_inside_step_ranges():
    s = report.summarize_trace(TRACE)
    assert s["num_profiled_steps"] == 2
    assert s["cpu_ms"]["engine.forward"] == pytest.approx(0.030)
    assert s["cpu_ms"]["engine.sample"] == pytest.approx(0.015)
    assert s["cpu_ms"]["engine.schedule"] == 0  # a range the engine does not mark yet
    assert s["gpu_busy_ms"] == pytest.approx((35 + 2 + 60) / 2e3)
    assert s["gpu_ms"]["gemm"] == pytest.approx(0.015)
    assert s["gpu_ms"]["attention_decode"] == pytest.approx(0.030)
    assert s["gpu_ms"]["memcpy"] == pytest.approx(0.001)
    assert s["num_kernels"] == 1.5
    assert s["num_launches"] == 1.5  # two kernel launches + one graph launch, over two steps
    assert s["num_graph_launches"] == 0.5
    assert s["num_syncs"] == 0.5  # the driver's cudaDeviceSynchronize is outside the steps
    assert s["sync_events"]["aten::_local_scalar_dense"] == 0.5
    assert s["sync_events"]["Memcpy DtoH"] == 0.5


def test_one_step_trace_keeps_metadata_and_that_steps_span():
    cut = report.one_step_trace({"schemaVersion": 1, "traceEvents": TRACE}, 0)
    assert cut["schemaVersion"] == 1
    names = [e["name"] for e in cut["traceEvents"]]
    assert names[0] == "process_name"
    assert "cudaDeviceSynchronize" in names and "_decode_kernel" not in names
    assert names.count(report.STEP_RANGE) == 1
    last = report.one_step_trace({"traceEvents": TRACE}, 1)["traceEvents"]
    assert {e["name"] for e in last} >= {"_decode_kernel", "cudaGraphLaunch"}
