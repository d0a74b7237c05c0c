"""`python app.py check FILE.yaml`: the import view's findings, on the command line.

    python app.py check FILE.yaml [--preset NAME] [--fix [--output OUT.yaml]] [--no-llamafactory]
    python -m backend.check_cli FILE.yaml ...   (the same, without app.py)

Prints one line per finding (severity, key, problem, fix). With --fix, writes the file with
every mechanical fix applied to FILE.fixed.yaml (or --output) and then reports what is left;
the input file is never overwritten. The fixed file is the one the page's "Apply fixes" gives
with the same preset (the same function: backend/config/yaml_import.py fix_yaml_text; the
Import tab shows the preset it checks against), comments kept where the fixes could be
written line by line. Exit status: 0 when no problem is left (warnings
allowed), 1 when there is one, 2 when the file cannot be read or the arguments are wrong.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TextIO

from backend.config.presets import PRESETS_DIR, load_presets
from backend.config.yaml_import import fix_yaml_text, import_yaml
from backend.findings import Finding, has_problems
from backend.llama_factory.check import check_many_with_llamafactory, merge_findings

EXIT_CLEAN, EXIT_PROBLEMS, EXIT_USAGE = 0, 1, 2


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="app.py check", description="Check a LLaMA-Factory training YAML the way RocBoard's import view does.")
    parser.add_argument("file", type=Path, help="the training YAML")
    parser.add_argument("--preset", help="hardware preset id (file stem in presets/), e.g. mi300x")
    parser.add_argument("--fix", action="store_true", help="write the file with mechanical fixes applied (never over the input)")
    parser.add_argument("--output", type=Path, help="where --fix writes (default: FILE.fixed.yaml)")
    parser.add_argument("--no-llamafactory", action="store_true", help="skip LLaMA-Factory's own parser (saves ~10 s)")
    parser.add_argument("--online", action="store_true", help="allow hub ids and hub datasets (the machine can download)")
    parser.add_argument("--presets-dir", type=Path, default=PRESETS_DIR, help=argparse.SUPPRESS)
    return parser


def _print(findings: list[Finding], out: TextIO) -> None:
    out.writelines(finding.line() + "\n" for finding in findings)


def main(argv: list[str], out: TextIO | None = None) -> int:
    out = out or sys.stdout
    try:
        options = _parser().parse_args(argv)
    except SystemExit as exit_:  # argparse already printed why
        return EXIT_USAGE if exit_.code else EXIT_CLEAN
    presets, _errors = load_presets(options.presets_dir)
    preset = None
    if options.preset:
        preset = presets.get(options.preset)
        if preset is None:
            out.write(f"error: no preset {options.preset!r}; choose one of {', '.join(presets)}\n")
            return EXIT_USAGE
    try:
        text = options.file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        out.write(f"error: cannot read {options.file}: {error}\n")
        return EXIT_USAGE

    offline = not options.online
    # --fix writes what the page's "Apply fixes" shows: the same function, the same file.
    fix = fix_yaml_text(text, preset, offline=offline) if options.fix else None
    result = fix.original if fix is not None else import_yaml(text, preset, offline=offline)
    fixed_args = fix.result.args if fix is not None and result.args else None
    theirs: list[list[Finding]] = [[], []]
    if not options.no_llamafactory and result.args:
        configs = [result.args] + ([fixed_args] if fixed_args is not None else [])
        answer = check_many_with_llamafactory(configs)
        theirs = answer.findings + [[]]
    findings = merge_findings(result.findings, theirs[0])
    # The preset decides fixes (bf16 or not, QLoRA bits, the CPU): the page's Import tab shows
    # the one it checks against; with the same one, --fix writes what its Apply fixes writes.
    judged = f"checked against the preset {preset.id}" if preset is not None else "checked against no preset (--preset NAME checks for one)"
    out.write(f"{options.file}: {_count(findings)}; {judged}\n")
    _print(findings, out)
    if fix is None or fixed_args is None:
        return EXIT_PROBLEMS if has_problems(findings) else EXIT_CLEAN

    target = options.output or options.file.with_name(options.file.stem + ".fixed.yaml")
    if target.resolve() == options.file.resolve():
        out.write("error: --output is the input file; RocBoard never overwrites it. Pick another name.\n")
        return EXIT_USAGE
    try:
        target.write_text(fix.text, encoding="utf-8", newline="")
    except OSError as error:
        out.write(f"error: cannot write {target}: {error}\n")
        return EXIT_USAGE
    applied = fix.count
    remaining = merge_findings(fix.result.findings, theirs[1])
    kept = "" if fix.comments_kept else " (rewritten whole: its comments were not kept)"
    out.write(f"wrote {target} with {applied} fix{'es' if applied != 1 else ''} applied{kept}; left: {_count(remaining)}\n")
    _print(remaining, out)
    return EXIT_PROBLEMS if has_problems(remaining) else EXIT_CLEAN


def _count(findings: list[Finding]) -> str:
    problems = sum(1 for f in findings if f.severity == "problem")
    warnings = len(findings) - problems
    return f"{problems} problem{'s' if problems != 1 else ''}, {warnings} warning{'s' if warnings != 1 else ''}"


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
