"""Read and write the safetensors format with torch alone (no runtime dependency).

The format: 8 bytes little-endian header length, a JSON header mapping each tensor name to
{dtype, shape, data_offsets [begin, end)} relative to the end of the header (plus an optional
"__metadata__" of string to string), then the raw little-endian tensor bytes.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import torch

from ncclprobe.errors import UsageProblem

DTYPES = {
    "F64": torch.float64,
    "F32": torch.float32,
    "F16": torch.float16,
    "BF16": torch.bfloat16,
    "I64": torch.int64,
    "I32": torch.int32,
    "I16": torch.int16,
    "I8": torch.int8,
    "U8": torch.uint8,
    "BOOL": torch.bool,
}
NAMES = {dtype: name for name, dtype in DTYPES.items()}


def read_header(path: Path) -> tuple[dict, int]:
    """(header dict, byte offset of the data section)."""
    try:
        with open(path, "rb") as fh:
            (length,) = struct.unpack("<Q", fh.read(8))
            if (
                length > path.stat().st_size - 8
            ):  # not safetensors: the first 8 bytes are text, not a size
                raise ValueError(f"its header claims {length} bytes, more than the file holds")
            header = json.loads(fh.read(length))
    except (OSError, struct.error, ValueError) as exc:
        raise UsageProblem(f"{path} is not a readable safetensors file: {exc}") from None
    return header, 8 + length


def load(path: str | Path, device="cpu") -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """All tensors of a file (on `device`) and its string metadata."""
    path = Path(path)
    header, start = read_header(path)
    tensors = {}
    with open(path, "rb") as fh:  # one tensor in memory at a time: checkpoints can be large
        for name, info in header.items():
            if name == "__metadata__":
                continue
            if info["dtype"] not in DTYPES:
                raise UsageProblem(f"{path}: tensor {name} has unsupported dtype {info['dtype']}")
            begin, end = info["data_offsets"]
            fh.seek(start + begin)
            raw = bytearray(fh.read(end - begin))
            dtype = DTYPES[info["dtype"]]
            flat = torch.frombuffer(raw, dtype=dtype) if raw else torch.empty(0, dtype=dtype)
            tensors[name] = flat.reshape(info["shape"]).to(device)
    return tensors, dict(header.get("__metadata__", {}))


def save(
    path: str | Path,
    tensors: dict[str, torch.Tensor],
    metadata: dict[str, str] | None = None,
    *,
    replace: bool = False,
) -> None:
    """Write a safetensors file whole or not at all (`ncclprobe.safe_output.atomic_file`): an existing
    file is replaced only with `replace`."""
    from ncclprobe.safe_output import atomic_file

    header: dict = {"__metadata__": dict(metadata or {})}
    blobs, offset = [], 0
    for name, tensor in tensors.items():
        blob = tensor.detach().contiguous().cpu().reshape(-1).view(torch.uint8).numpy().tobytes()
        header[name] = {
            "dtype": NAMES[tensor.dtype],
            "shape": list(tensor.shape),
            "data_offsets": [offset, offset + len(blob)],
        }
        blobs.append(blob)
        offset += len(blob)
    encoded = json.dumps(header, separators=(",", ":")).encode()
    encoded += b" " * (-len(encoded) % 8)  # the spec pads the header to 8-byte alignment
    with atomic_file(path, force=replace, binary=True, what="safetensors file") as fh:
        fh.write(struct.pack("<Q", len(encoded)))
        fh.write(encoded)
        for blob in blobs:
            fh.write(blob)
