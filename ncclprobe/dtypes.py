"""Bytes per element of the element types ncclprobe meets, by torch's name: the one table the
probes (message shapes), the profile reader (collective sizes from element counts) and diagnose
(the bytes a decode step moves) read.

Other programs' spellings of the same types (NCCL's `f32`, kernel and C++ names, model configs'
`fp8`) are mapped to these names where they are read, never given sizes of their own.
"""

from __future__ import annotations

ELEMENT_BYTES = {
    "float64": 8,
    "float32": 4,
    "bfloat16": 2,
    "float16": 2,
    "float8_e4m3fn": 1,
    "float8_e5m2": 1,
    "int64": 8,
    "uint64": 8,
    "int32": 4,
    "uint32": 4,
    "int8": 1,
    "uint8": 1,
}
# model configs' short names (`torch_dtype`, quantization configs)
ALIASES = {"fp8": "float8_e4m3fn", "float8": "float8_e4m3fn"}


def element_bytes(name: str) -> int | None:
    """Bytes per element of `name` (torch's spelling, or an alias); None when unknown."""
    return ELEMENT_BYTES.get(ALIASES.get(name, name))
