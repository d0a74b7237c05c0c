"""Runs llama.cpp's convert_hf_to_gguf.py on a merged model, then reads the file back.

Run as a child by path (it imports torch): python gguf_runner.py --converter PATH --model DIR
--outfile FILE --outtype f16|q8_0. Prints `ROCBOARD-WARNING <id>` for what the page should say
and, last, `ROCBOARD-GGUF {json}`: what gguf.GGUFReader (llama.cpp's own reader) found in the
file. The tokenizer fallback: llama.cpp recognises a BPE tokenizer's pre-tokenizer by a hash
of how it splits a test text; an unknown one stops the converter. Only then is llama.cpp's
`default` pre-tokenizer used, with a warning: text may be split differently in llama.cpp.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from pathlib import Path

WARNING_MARK = "ROCBOARD-WARNING "
SUMMARY_MARK = "ROCBOARD-GGUF "
UNKNOWN_PRE = "BPE pre-tokenizer was not recognized"


def load_converter(path: Path):
    # Run by path, this folder is sys.path[0]: nothing here may shadow the `gguf` package.
    here = str(Path(__file__).resolve().parent)
    sys.path[:] = [entry for entry in sys.path if entry and Path(entry).resolve() != Path(here)]
    sys.path.insert(0, str(path.parent))  # for its conversion/ package
    spec = importlib.util.spec_from_file_location("convert_hf_to_gguf", path)
    if spec is None or spec.loader is None:  # not a .py file: find_converter never names one
        raise ImportError(f"cannot load the converter {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def allow_default_pre_tokenizer() -> None:
    from conversion import base

    for cls in vars(base).values():
        original = getattr(cls, "get_vocab_base_pre", None) if isinstance(cls, type) else None
        if original is None or "get_vocab_base_pre" not in vars(cls):
            continue

        def guarded(self, tokenizer, _original=original):
            try:
                return _original(self, tokenizer)
            except NotImplementedError as error:
                if UNKNOWN_PRE not in str(error):
                    raise
                print(WARNING_MARK + "default-pre-tokenizer", flush=True)
                return "default"

        cls.get_vocab_base_pre = guarded


def summary_of(outfile: Path) -> dict:
    from gguf import GGUFReader

    reader = GGUFReader(str(outfile))

    def field_value(name: str):
        found = reader.fields.get(name)
        return found.contents() if found is not None else None

    tokens = field_value("tokenizer.ggml.tokens") or []
    return {
        "architecture": field_value("general.architecture"),
        "file_type": field_value("general.file_type"),
        "tensors": len(reader.tensors),
        "tokens": len(tokens),
        "pre_tokenizer": field_value("tokenizer.ggml.pre"),
        "bytes": outfile.stat().st_size,
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--converter", required=True, type=Path)
    parser.add_argument("--model", required=True, type=Path)
    parser.add_argument("--outfile", required=True, type=Path)
    parser.add_argument("--outtype", required=True, choices=["f16", "q8_0"])
    args = parser.parse_args(argv)
    converter = load_converter(args.converter)
    allow_default_pre_tokenizer()
    sys.argv = [str(args.converter), str(args.model), "--outfile", str(args.outfile), "--outtype", args.outtype]
    converter.main()
    print(SUMMARY_MARK + json.dumps(summary_of(args.outfile)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
