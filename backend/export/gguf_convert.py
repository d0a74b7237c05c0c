"""GGUF export: where llama.cpp's converter is, how big its file is, what its runner said.

llama.cpp's `convert_hf_to_gguf.py` (and the `conversion/` package it imports) is on no
registry as a package of its own; the llama-cpp-python source package vendors llama.cpp, and
`make gguf` keeps just those files in `<venv>/share/rocboard/llama.cpp/`, with the vendored
gguf-py the converter puts first on its sys.path: it is numbered 0.19.0 like PyPI's `gguf`
but newer (the converter needs its LazyChunkedTensor). PyPI's `gguf` (requirements.txt) is the
reader the tests check the file with. ROCBOARD_GGUF_CONVERTER names another copy.
The converter runs in a child (backend/export/gguf_runner.py, run by path): it imports torch.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

CONVERTER_ENV = "ROCBOARD_GGUF_CONVERTER"
CONVERTER_NAME = "convert_hf_to_gguf.py"
RUNNER = Path(__file__).resolve().parent / "gguf_runner.py"
SUMMARY_MARK = "ROCBOARD-GGUF "
WARNING_MARK = "ROCBOARD-WARNING "
# Bytes per parameter: f16 stores 2; q8_0 stores 32 weights in 34 bytes (a scale and 32 int8).
BYTES_PER_PARAM = {"none": 0.0, "f16": 2.0, "q8_0": 34 / 32}
GET_IT = "make gguf"


def default_converter() -> Path:
    """Where `make gguf` puts the converter: beside this Python's venv."""
    return Path(sys.prefix) / "share" / "rocboard" / "llama.cpp" / CONVERTER_NAME


def find_converter(env: Mapping[str, str] | None = None) -> Path | None:
    """The converter script, when it is there with its conversion/ package beside it."""
    named = (os.environ if env is None else env).get(CONVERTER_ENV, "").strip()
    for candidate in ([Path(named)] if named else []) + [default_converter()]:
        if candidate.is_file() and all((candidate.parent / part / "__init__.py").is_file() for part in ("conversion", "gguf-py/gguf")):
            return candidate.resolve()
    return None


def estimated_bytes(params: int, outtype: str) -> int:
    return int(params * BYTES_PER_PARAM.get(outtype, 0.0))


def gguf_file_name(model_name: str, outtype: str) -> str:
    return f"{model_name}-{outtype}.gguf"


def runner_command(converter: Path, model_dir: Path, outfile: Path, outtype: str) -> list[str]:
    return [sys.executable, str(RUNNER), "--converter", str(converter), "--model", str(model_dir), "--outfile", str(outfile), "--outtype", outtype]


def parse_runner_output(text: str) -> tuple[dict[str, Any] | None, list[str]]:
    """(what the runner read back from the file, the warning ids it gave) from its output."""
    summary = None
    warnings: list[str] = []
    for line in text.splitlines():
        if line.startswith(SUMMARY_MARK):
            try:
                found = json.loads(line[len(SUMMARY_MARK) :])
            except ValueError:
                continue
            summary = found if isinstance(found, dict) else None
        elif line.startswith(WARNING_MARK):
            warning = line[len(WARNING_MARK) :].strip()
            if warning and warning not in warnings:
                warnings.append(warning[:80])
    return summary, warnings
