"""A response's output tensor as a flat list, read from the gRPC message's raw bytes.

tritonclient's InferResult.as_numpy makes a numpy array (and a shape list) per output; a stream
reads one or two outputs of every response, a few tokens each, so the frontend unpacks the raw
little-endian bytes into Python numbers itself (memoryview.cast on this little-endian host, as
numpy.frombuffer reads them), and leaves other layouts to InferResult."""

import sys

from tritonclient.grpc import InferResult, service_pb2

# Triton datatype -> struct format of one element (the numbers a stream reads)
_FORMATS = {"INT32": "i", "INT64": "q", "FP32": "f", "FP64": "d", "UINT64": "Q"}
_IS_LITTLE_ENDIAN = sys.byteorder == "little"  # Triton's raw contents are little-endian


def output_list(result: service_pb2.ModelInferResponse, name: str) -> list | None:
    """The output `name` of result, flattened; None when the response has no such output."""
    for index, output in enumerate(result.outputs):
        if output.name != name:
            continue
        fmt = _FORMATS.get(output.datatype)
        if fmt is None or not _IS_LITTLE_ENDIAN or index >= len(result.raw_output_contents):
            return InferResult(result).as_numpy(name).reshape(-1).tolist()
        return memoryview(result.raw_output_contents[index]).cast(fmt).tolist()
    return None
