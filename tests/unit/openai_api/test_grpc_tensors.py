"""A response's outputs read from the raw bytes equal tritonclient's InferResult.as_numpy."""

import numpy as np
from tritonclient.grpc import InferResult, service_pb2

from pipeline.openai_api.grpc_tensors import output_list


def response(arrays: dict[str, tuple[str, np.ndarray]]) -> service_pb2.ModelInferResponse:
    result = service_pb2.ModelInferResponse(model_name="tensorrt_llm")
    for name, (datatype, array) in arrays.items():
        result.outputs.add(name=name, datatype=datatype, shape=array.shape)
        result.raw_output_contents.append(array.tobytes())
    return result


def test_outputs_equal_infer_results_numbers():
    arrays = {
        "output_ids": ("INT32", np.array([[[7, 1 << 20, 49151]]], np.int32)),
        "output_log_probs": ("FP32", np.array([[[-0.1, -13.8155, 0.0]]], np.float32)),
        "sequence_length": ("INT64", np.array([[3]], np.int64)),
        "empty": ("INT32", np.zeros((1, 1, 0), np.int32)),
    }
    result = response(arrays)
    for name in arrays:
        expected = InferResult(result).as_numpy(name).reshape(-1).tolist()
        assert output_list(result, name) == expected
        assert [type(v) for v in output_list(result, name)] == [type(v) for v in expected]
    assert output_list(result, "missing") is None


def test_outputs_without_raw_contents_go_through_infer_result():
    result = service_pb2.ModelInferResponse(model_name="tensorrt_llm")
    out = result.outputs.add(name="text_output", datatype="BYTES", shape=[1])
    out.contents.bytes_contents.append(b"hi")
    assert output_list(result, "text_output") == [b"hi"]
