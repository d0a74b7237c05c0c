"""How big an export is: the base model's size read from its safetensors headers (never the
tensors), the merged model's and the GGUF file's bytes, and the memory there is to merge in.
"""

from __future__ import annotations

import json
import os
import struct
from dataclasses import dataclass
from pathlib import Path

from backend.export import gguf_convert as gguf_tools

GIB = 1024**3
MIB = 1024**2
# safetensors dtypes -> bytes per element (the format's own names).
SAFETENSORS_DTYPE_BYTES = {
    "F64": 8, "I64": 8, "U64": 8, "F32": 4, "I32": 4, "U32": 4, "F16": 2, "BF16": 2, "I16": 2, "U16": 2,
    "I8": 1, "U8": 1, "BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1,
}  # fmt: skip
FLOAT_DTYPES = {"F32": "float32", "BF16": "bfloat16", "F16": "float16"}
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
HEADER_MAX_BYTES = 100 * MIB  # a safetensors header is JSON; larger is not one
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf", ".h5", ".msgpack", ".ckpt", ".onnx")
OTHER_FILES_MAX = 200  # files beside the weights counted (tokenizer and configs)


@dataclass(frozen=True)
class ModelSize:
    params: int  # parameters counted in the safetensors headers (0: unknown)
    dtype: str  # float32 | bfloat16 | float16: the base's, which the merged model keeps
    weight_bytes: int  # the base's weight files on disk
    other_bytes: int  # tokenizer and config files beside them
    from_headers: bool  # False: estimated from the file sizes


def size_text(size: float) -> str:
    for unit, scale in (("GiB", GIB), ("MiB", MIB), ("KiB", 1024)):
        if size >= scale:
            return f"{size / scale:.1f} {unit}"
    return f"{int(size)} B"


def parse_safetensors_header(data: bytes) -> tuple[int, dict[str, int]]:
    """(parameters, bytes per safetensors dtype) from a safetensors header's JSON."""
    header = json.loads(data.decode("utf-8"))
    if not isinstance(header, dict):
        raise ValueError("not a JSON object")
    params = 0
    by_dtype: dict[str, int] = {}
    for name, entry in header.items():
        if name == "__metadata__" or not isinstance(entry, dict):
            continue
        count = 1
        for dim in entry.get("shape") or []:
            count *= int(dim)
        params += count
        dtype = str(entry.get("dtype", ""))
        by_dtype[dtype] = by_dtype.get(dtype, 0) + count * SAFETENSORS_DTYPE_BYTES.get(dtype, 4)
    return params, by_dtype


def read_safetensors_header(path: Path) -> bytes:
    """The JSON header of a safetensors file: an 8-byte little-endian length, then the JSON."""
    with open(path, "rb") as handle:
        head = handle.read(8)
        if len(head) != 8:
            raise ValueError("shorter than a safetensors header")
        (length,) = struct.unpack("<Q", head)
        if not 2 <= length <= HEADER_MAX_BYTES:
            raise ValueError(f"header length {length} is not a safetensors one")
        data = handle.read(length)
        if len(data) != length:
            raise ValueError("the header is cut short")
        return data


def _config_dtype(base_dir: Path) -> str | None:
    try:
        with open(base_dir / "config.json", "rb") as handle:
            config = json.loads(handle.read(4 * MIB))
    except (OSError, ValueError):
        return None
    if not isinstance(config, dict):
        return None
    value = config.get("torch_dtype") or config.get("dtype")
    return value if value in DTYPE_BYTES else None


def read_model_size(base_dir: Path) -> ModelSize:
    """The base model's size from its safetensors headers (the tensors are never read); from the
    file sizes when there are none or they cannot be read."""
    weight_bytes = other_bytes = 0
    safetensors: list[Path] = []
    counted = 0
    for entry in sorted(os.scandir(base_dir), key=lambda e: e.name):
        if not entry.is_file(follow_symlinks=True):
            continue
        size = entry.stat(follow_symlinks=True).st_size
        if entry.name.endswith(WEIGHT_SUFFIXES):
            weight_bytes += size
            if entry.name.endswith(".safetensors"):
                safetensors.append(Path(entry.path))
        elif counted < OTHER_FILES_MAX:
            other_bytes += size
            counted += 1
    params = 0
    by_dtype: dict[str, int] = {}
    from_headers = bool(safetensors)
    for path in safetensors:
        try:
            found, dtypes = parse_safetensors_header(read_safetensors_header(path))
        except (OSError, ValueError):
            from_headers = False
            break
        params += found
        for key, value in dtypes.items():
            by_dtype[key] = by_dtype.get(key, 0) + value
    floats = {FLOAT_DTYPES[k]: v for k, v in by_dtype.items() if k in FLOAT_DTYPES}
    dtype = _config_dtype(base_dir) or (max(floats, key=lambda name: floats[name]) if floats else "float32")
    if not from_headers:
        params = weight_bytes // DTYPE_BYTES[dtype]
    return ModelSize(params, dtype, weight_bytes, other_bytes, from_headers)


def plan_sizes(size: ModelSize, gguf: str) -> tuple[int, int]:
    """(merged model bytes, GGUF bytes): the merged model keeps the base's dtype."""
    merged = size.params * DTYPE_BYTES[size.dtype] if size.params else size.weight_bytes
    return merged, gguf_tools.estimated_bytes(size.params, gguf) + (size.other_bytes if gguf != "none" else 0)


def available_ram() -> int:
    import psutil

    return int(psutil.virtual_memory().available)
