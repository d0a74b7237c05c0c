"""`python app.py check FILE.yaml` (backend/check_cli.py).

Most tests call main() in-process without LLaMA-Factory's parser; one runs
`python -m backend.check_cli` as a process, parser included.
"""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from backend.check_cli import EXIT_CLEAN, EXIT_PROBLEMS, EXIT_USAGE, main
from backend.config.yaml_import import dump_yaml
from tests.test_checks import make_dataset_dir, make_model_dir
from tests.test_yaml_import import FIXTURES, base_args
from tests.tiers import starts

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def assets(tmp_path: Path) -> dict[str, Path]:
    return {"root": tmp_path, "model": make_model_dir(tmp_path / "model"), "data": make_dataset_dir(tmp_path / "data")}


def run(argv: list[str]) -> tuple[int, str]:
    out = io.StringIO()
    code = main(argv, out)
    return code, out.getvalue()


def test_a_clean_file_exits_zero(assets: dict[str, Path]) -> None:
    path = assets["root"] / "good.yaml"
    path.write_text(dump_yaml(base_args(assets)))
    code, text = run([str(path), "--preset", "rx7900xtx", "--no-llamafactory"])
    assert code == EXIT_CLEAN
    assert "0 problems, 0 warnings" in text


def test_problems_are_printed_one_per_line_and_exit_non_zero(tmp_path: Path) -> None:
    path = tmp_path / "messy.yaml"
    path.write_text((FIXTURES / "cuda_guide_mistakes.yaml").read_text())
    code, text = run([str(path), "--preset", "rx7900xtx", "--no-llamafactory"])
    assert code == EXIT_PROBLEMS
    lines = text.splitlines()
    assert lines[0].startswith(f"{path}: ") and "problems" in lines[0]
    for key in ("disable_flash_attn", "compute_type", "compute_device", "ddp_backend", "flash_attn", "device_map", "bf16", "lerning_rate", "model_name_or_path"):
        assert any(line.startswith(f"problem: {key}: ") and " Fix: " in line for line in lines), key
    assert not (tmp_path / "messy.fixed.yaml").exists()  # nothing written without --fix


def test_fix_writes_a_new_file_and_reports_what_is_left(tmp_path: Path) -> None:
    path = tmp_path / "messy.yaml"
    original = (FIXTURES / "cuda_guide_mistakes.yaml").read_text()
    path.write_text(original)
    code, text = run([str(path), "--preset", "rx7900xtx", "--no-llamafactory", "--fix"])
    assert path.read_text() == original
    fixed = yaml.safe_load((tmp_path / "messy.fixed.yaml").read_text())
    assert fixed["flash_attn"] == "disabled" and fixed["ddp_backend"] == "nccl" and fixed["lora_rank"] == 16
    assert not {"compute_type", "compute_device", "device_map", "disable_flash_attn", "lerning_rate", "fp16"} & set(fixed)
    assert "wrote " in text and "left: 2 problems" in text
    assert code == EXIT_PROBLEMS  # the hub id and the dataset directory need a person


def test_fix_that_leaves_nothing_exits_zero(assets: dict[str, Path]) -> None:
    path = assets["root"] / "typo.yaml"
    path.write_text(dump_yaml({**base_args(assets), "flash_attn": False, "compute_device": "cuda"}))
    out = assets["root"] / "out.yaml"
    code, text = run([str(path), "--no-llamafactory", "--fix", "--output", str(out), "--preset", "rx7900xtx"])
    assert code == EXIT_CLEAN, text
    assert yaml.safe_load(out.read_text())["flash_attn"] == "disabled"


def test_fix_never_overwrites_the_input(tmp_path: Path) -> None:
    path = tmp_path / "messy.yaml"
    original = (FIXTURES / "cuda_guide_mistakes.yaml").read_text()
    path.write_text(original)
    code, text = run([str(path), "--no-llamafactory", "--fix", "--output", str(tmp_path / "." / "messy.yaml")])
    assert code == EXIT_USAGE and "never overwrites" in text
    assert path.read_text() == original


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["{missing}"], "cannot read"),
        (["{file}", "--preset", "nope"], "no preset 'nope'"),
        ([], ""),
    ],
)
def test_usage_errors_exit_two(tmp_path: Path, argv: list[str], message: str) -> None:
    file = tmp_path / "x.yaml"
    file.write_text("a: 1\n")
    argv = [a.format(missing=tmp_path / "missing.yaml", file=file) for a in argv]
    code, text = run(argv + ["--no-llamafactory"] if argv else [])
    assert code == EXIT_USAGE
    assert message in text


@starts("lf_helper")
def test_module_entry_point_with_llamafactorys_parser(assets: dict[str, Path]) -> None:
    # Only LLaMA-Factory's parser knows every choice: a scheduler typo is its finding.
    path = assets["root"] / "scheduler.yaml"
    path.write_text(dump_yaml({**base_args(assets), "lr_scheduler_type": "cosinee"}))
    done = subprocess.run([sys.executable, "-m", "backend.check_cli", str(path), "--preset", "rx7900xtx"], cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == EXIT_PROBLEMS, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert any(line.startswith("problem: lr_scheduler_type: ") and "cosine" in line for line in lines), done.stdout
    assert not (assets["root"] / "out").exists()
