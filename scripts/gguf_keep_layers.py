"""A copy of a GGUF model with only some of its transformer blocks (embedding, output norm and
head kept), renumbered from 0: the model's real weights, fewer of them, in a file small enough to
ship where the whole one does not fit. Keeping the first and the last blocks keeps the text
readable (the last ones map into the vocabulary). Metadata is copied as gguf's own
gguf_new_metadata script copies it, with <arch>.block_count set to the blocks kept.

    python scripts/gguf_keep_layers.py SRC.gguf DST.gguf --layers 0-6,25-29
"""

import argparse
import re
import sys

import gguf


def parse_layers(text: str) -> list[int]:
    """ "0-6,25-29" -> [0, ..., 6, 25, ..., 29]"""
    layers = []
    for part in text.split(","):
        first, _, last = part.partition("-")
        layers += range(int(first), int(last or first) + 1)
    return layers


def keep_layers(src: str, dst: str, layers: list[int]) -> int:
    reader = gguf.GGUFReader(src)
    arch = reader.fields[gguf.Keys.General.ARCHITECTURE].contents()
    count_key = gguf.Keys.LLM.BLOCK_COUNT.format(arch=arch)
    if max(layers) >= reader.fields[count_key].contents():
        raise SystemExit(f"{src} has only {reader.fields[count_key].contents()} blocks")
    renumber = {old: new for new, old in enumerate(layers)}
    writer = gguf.GGUFWriter(dst, arch=arch, endianess=reader.endianess)
    for field in reader.fields.values():
        if field.name == gguf.Keys.General.ARCHITECTURE or field.name.startswith("GGUF."):
            continue
        val_type = field.types[0]
        sub_type = field.types[-1] if val_type == gguf.GGUFValueType.ARRAY else None
        value = len(layers) if field.name == count_key else field.contents()
        writer.add_key_value(field.name, value, val_type, sub_type=sub_type)
    block = re.compile(r"blk\.(\d+)\.")
    kept = [t for t in reader.tensors if not (m := block.match(t.name)) or int(m[1]) in renumber]
    for t in kept:
        name = block.sub(lambda m: f"blk.{renumber[int(m[1])]}.", t.name, count=1)
        writer.add_tensor_info(name, t.data.shape, t.data.dtype, t.data.nbytes, t.tensor_type)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    for t in kept:
        writer.write_tensor_data(t.data, tensor_endianess=reader.endianess)
    writer.close()
    return sum(t.n_bytes for t in kept)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("src")
    parser.add_argument("dst")
    parser.add_argument("--layers", required=True, help="blocks to keep: 0-6,25-29")
    args = parser.parse_args(argv)
    layers = parse_layers(args.layers)
    num_bytes = keep_layers(args.src, args.dst, layers)
    print(f"{args.dst}: {len(layers)} blocks, {num_bytes / 2**20:.1f} MiB of tensors")
    return 0


if __name__ == "__main__":
    sys.exit(main())
