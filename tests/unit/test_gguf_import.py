"""gguf_import: transformers' three passes over a GGUF file share one parse."""

import gguf
import numpy as np
import pytest

from pipeline.gguf_import import _parsed_once


@pytest.fixture()
def tiny_gguf(tmp_path):
    path = tmp_path / "tiny.gguf"
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_block_count(1)
    writer.add_tensor("token_embd.weight", np.zeros((4, 8), np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def test_one_reader_and_one_name_map_inside_then_gguf_as_it_was(tiny_gguf):
    reader_class, name_map = gguf.GGUFReader, gguf.get_tensor_name_map
    with pytest.raises(RuntimeError, match="boom"), _parsed_once():
        first = gguf.GGUFReader(tiny_gguf)
        assert gguf.GGUFReader(str(tiny_gguf)) is first  # by path, however it is spelled
        assert gguf.GGUFReader(tiny_gguf, "c") is not first  # another mode is another reader
        assert [t.name for t in first.tensors] == ["token_embd.weight"]
        arch = gguf.MODEL_ARCH.LLAMA
        assert gguf.get_tensor_name_map(arch, 1) is gguf.get_tensor_name_map(arch, 1)
        raise RuntimeError("boom")  # a failed load gives gguf back too
    assert (gguf.GGUFReader, gguf.get_tensor_name_map) == (reader_class, name_map)
    assert gguf.GGUFReader(tiny_gguf) is not gguf.GGUFReader(tiny_gguf)
