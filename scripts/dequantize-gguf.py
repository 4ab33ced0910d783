#!/usr/bin/env python3
"""Write a copy of a GGUF file whose quantized weights are F16 or BF16.

    python3 scripts/dequantize-gguf.py IN.gguf OUT.gguf f16|bf16

Dev-time only. It checks the 16-bit float paths on real weights where llama.cpp's
quantizer (`scripts/requantize.py`) is not at hand — a GPU machine with Python and
numpy but no llama.cpp. Every quantized tensor is dequantized by gguf-py (PyPI `gguf`,
llama.cpp's own Python package) and stored in the 16-bit type. F32 tensors (norms,
biases) stay F32. The metadata is copied, with `general.file_type` set to match.
"""

import sys

import gguf
import numpy as np

KINDS = {
    "f16": (gguf.GGMLQuantizationType.F16, gguf.LlamaFileType.MOSTLY_F16),
    "bf16": (gguf.GGMLQuantizationType.BF16, gguf.LlamaFileType.MOSTLY_BF16),
}
KEEP = {gguf.GGMLQuantizationType.F32, gguf.GGMLQuantizationType.F16, gguf.GGMLQuantizationType.BF16}


def main() -> None:
    if len(sys.argv) != 4 or sys.argv[3] not in KINDS:
        sys.exit(__doc__)
    src, dst, kind = sys.argv[1], sys.argv[2], sys.argv[3]
    qtype, file_type = KINDS[kind]
    reader = gguf.GGUFReader(src)
    arch = reader.fields[gguf.Keys.General.ARCHITECTURE].contents()
    writer = gguf.GGUFWriter(dst, arch)
    for field in reader.fields.values():
        if field.name == gguf.Keys.General.ARCHITECTURE or field.name.startswith("GGUF."):
            continue  # written by GGUFWriter itself
        vtype = field.types[0]
        sub_type = field.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
        value = int(file_type) if field.name == gguf.Keys.General.FILE_TYPE else field.contents()
        writer.add_key_value(field.name, value, vtype, sub_type=sub_type)
    for t in reader.tensors:
        if t.tensor_type in KEEP:
            writer.add_tensor(t.name, np.asarray(t.data), raw_dtype=t.tensor_type)
            continue
        floats = gguf.quants.dequantize(np.asarray(t.data), t.tensor_type)
        writer.add_tensor(t.name, gguf.quants.quantize(floats, qtype), raw_dtype=qtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    print(f"{dst}: {len(reader.tensors)} tensors, quantized ones as {kind}")


if __name__ == "__main__":
    main()
