"""Failure diagnosis: each rule on a real (or real-worded) log excerpt, and the live loss alert."""

from __future__ import annotations

import ast
import math
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from backend.diagnose import RULES, Alert, diagnose, error_lines, loss_alert, summarize_failure
from backend.i18n import translate
from tests.tiers import starts

LOGS = Path(__file__).resolve().parent / "fixtures" / "logs"

# fixture -> the rule that must come first
EXPECTED_TOP_RULE = {
    "hip_out_of_memory.log": "gpu_out_of_memory",
    "cuda_out_of_memory.log": "gpu_out_of_memory",
    "invalid_device_function.log": "invalid_device_function",
    "tensile_missing_gfx1031.log": "invalid_device_function",
    "torch_cpu_build.log": "torch_without_rocm",
    "torch_cuda_build_no_driver.log": "torch_without_rocm",
    "no_hip_gpus.log": "no_gpu_visible",
    "device_permission_denied.log": "device_permission_denied",
    "oom_killer_torchrun.log": "killed_out_of_host_memory",
    "rccl_timeout.log": "collective_timeout",
    "real_bf16_on_cpu.log": "bf16_unsupported",
    "real_grad_norm_nan.log": "loss_not_finite",
    "real_model_offline_not_cached.log": "model_not_cached_offline",
    "real_model_path_missing.log": "model_not_found",
    "real_tokenizer_missing.log": "tokenizer_not_loadable",
    "real_dataset_undefined.log": "dataset_undefined",
    "real_dataset_column_missing.log": "dataset_column_missing",
    "real_template_unknown.log": "template_unknown",
    "real_unknown_config_key.log": "unknown_config_key",
}


def read_log(name: str) -> str:
    return (LOGS / name).read_text(encoding="utf-8")


@pytest.mark.parametrize("name, rule", sorted(EXPECTED_TOP_RULE.items()))
def test_each_fixture_gets_its_rule_first(name: str, rule: str) -> None:
    found = diagnose(read_log(name))
    assert found, f"no rule matched {name}"
    assert found[0].rule == rule
    # the evidence is a line of the log itself, not a paraphrase
    assert found[0].evidence.rstrip("…") in read_log(name)
    assert found[0].cause == translate(f"diagnose.{rule}.cause", "en")
    assert found[0].fix == translate(f"diagnose.{rule}.fix", "en")
    assert found[0].text("zh-CN") == (translate(f"diagnose.{rule}.cause", "zh-CN"), translate(f"diagnose.{rule}.fix", "zh-CN"))


def test_every_rule_has_a_fixture() -> None:
    covered = set(EXPECTED_TOP_RULE.values())
    assert covered == {rule.name for rule in RULES}


def test_healthy_run_matches_no_rule() -> None:
    assert diagnose(read_log("real_success.log")) == []
    assert summarize_failure(read_log("real_success.log"), 0).diagnosis is None


def test_rule_texts_are_keyed_by_unique_names() -> None:
    names = [rule.name for rule in RULES]
    assert len(names) == len(set(names))
    for rule in RULES:
        assert re.fullmatch(r"[a-z0-9_]+", rule.name)
        for part in ("cause", "fix"):  # its words are in the catalogue, by its name
            assert translate(f"diagnose.{rule.name}.{part}", "en") != f"diagnose.{rule.name}.{part}"


@pytest.mark.parametrize(
    "log_line, rule",
    [
        ("torch.OutOfMemoryError: HIP out of memory. Tried to allocate 80.00 MiB.", "gpu_out_of_memory"),
        ("RuntimeError: HIP error: out of memory", "gpu_out_of_memory"),
        ("RuntimeError: CUDA error: no kernel image is available for execution on the device", "invalid_device_function"),
        ('"hipErrorNoBinaryForGpu: Unable to find code object for all current devices!"', "invalid_device_function"),
        ("PermissionError: [Errno 13] Permission denied: '/dev/kfd'", "device_permission_denied"),
        ("{'loss': nan, 'grad_norm': nan, 'learning_rate': 0.0001, 'epoch': 0.5}", "loss_not_finite"),
        ("{'loss': inf, 'learning_rate': 0.0001, 'epoch': 0.5}", "loss_not_finite"),
        ("ValueError: bf16 mixed precision requires PyTorch >= 1.10 and a supported device.", "bf16_unsupported"),
        ("OSError: ./llama does not appear to have a file named config.json. Checkout 'https://huggingface.co/./llama/tree/main' for available files.", "model_not_found"),
        ("OSError: Can't load tokenizer for 'org/model'. If you were trying to load it from 'https://huggingface.co/models', make sure", "tokenizer_not_loadable"),
        ("E1130 07:01:02.433000 4121 torch/distributed/elastic/multiprocessing/api.py:882] failed (exitcode: -9) local_rank: 0 (pid: 1) of binary: python3", "killed_out_of_host_memory"),
        ("Killed", "killed_out_of_host_memory"),
    ],
)
def test_other_real_wordings(log_line: str, rule: str) -> None:
    assert [d.rule for d in diagnose(log_line)] == [rule]


def test_words_that_only_look_alike_do_not_match() -> None:
    harmless = "\n".join(
        [
            "{'loss': '0.4312', 'grad_norm': '1.02', 'learning_rate': '5e-05', 'epoch': '1.0'}",
            "[INFO] Loading checkpoint shards: 100%|██████████| 2/2",
            "train_loss = 0.9",
            "Killed 3 zombie dataloader workers",  # not the shell's bare "Killed"
            "bf16: true",
        ]
    )
    assert diagnose(harmless) == []


def test_permission_problem_outranks_the_missing_gpu_it_causes() -> None:
    rules = [d.rule for d in diagnose(read_log("device_permission_denied.log"))]
    assert rules == ["device_permission_denied", "no_gpu_visible"]


def test_model_rules_outrank_the_generic_tokenizer_failure() -> None:
    rules = [d.rule for d in diagnose(read_log("real_model_path_missing.log"))]
    assert rules[0] == "model_not_found" and "tokenizer_not_loadable" in rules


def test_sigkill_exit_code_alone_is_the_oom_killer() -> None:
    text = read_log("real_sigkill_midway.log")
    assert diagnose(text, exit_code=1) == []
    for code in (-9, 137):
        summary = summarize_failure(text, code)
        assert summary.diagnosis is not None
        assert summary.diagnosis.rule == "killed_out_of_host_memory"
        assert str(code) in summary.diagnosis.evidence
        assert summary.exit_code == code


def test_summary_error_lines_skip_progress_bars_and_carets() -> None:
    summary = summarize_failure(read_log("hip_out_of_memory.log"), 1)
    assert summary.diagnosis is not None and summary.diagnosis.rule == "gpu_out_of_memory"
    assert 0 < len(summary.error_lines) <= 15
    assert summary.error_lines[-1].startswith("torch.OutOfMemoryError: HIP out of memory.")
    for line in summary.error_lines:
        assert "it/s]" not in line and "s/it]" not in line
        assert line.strip().strip("^~")


def test_error_lines_split_carriage_return_redraws() -> None:
    text = read_log("real_sigkill_midway.log")
    lines = error_lines(text)
    assert lines and all("%|" not in line for line in lines)
    assert lines[-1].startswith("{'loss': '6.086'")


def test_long_evidence_is_shortened() -> None:
    found = diagnose("RuntimeError: No HIP GPUs are available " + "x" * 1000)
    assert len(found[0].evidence) <= 300 and found[0].evidence.endswith("…")


@pytest.mark.skipif(shutil.which("llamafactory-cli", path=str(Path(sys.executable).parent)) is None, reason="llamafactory-cli not installed")
@starts("trainer")
def test_rule_matches_what_the_installed_trainer_prints_today(tmp_path: Path) -> None:
    """The wording must follow LLaMA-Factory upgrades: ask the installed trainer itself.
    An unknown key fails at argument parsing, before any model is needed."""
    config = tmp_path / "bad.yaml"
    config.write_text(
        "model_name_or_path: /nonexistent\nstage: sft\ndo_train: true\nfinetuning_type: lora\n"
        f"dataset: demo\ntemplate: llama3\noutput_dir: {tmp_path / 'out'}\nlearning_rat: 1.0e-4\n",
        encoding="utf-8",
    )
    cli = str(Path(sys.executable).parent / "llamafactory-cli")
    done = subprocess.run(
        [cli, "train", str(config)],
        capture_output=True,
        text=True,
        timeout=240,
        env={"HF_HUB_OFFLINE": "1", "PATH": str(Path(sys.executable).parent), "HOME": str(tmp_path)},
    )
    assert done.returncode != 0
    summary = summarize_failure(done.stdout + done.stderr, done.returncode)
    assert summary.diagnosis is not None and summary.diagnosis.rule == "unknown_config_key"
    assert "learning_rat" in summary.diagnosis.evidence


# --- live alert ---------------------------------------------------------------------------


def points_from_log(name: str) -> list[dict]:
    """The metric dicts the trainer printed, as the page's points."""
    points = []
    for step, match in enumerate(re.finditer(r"\{'loss'[^}]*\}", read_log(name)), start=1):
        point = ast.literal_eval(match.group(0))
        point["step"] = step
        points.append(point)
    return points


def test_alert_on_the_real_diverged_run() -> None:
    points = points_from_log("real_grad_norm_nan.log")
    assert loss_alert(points[:1]) is None  # step 1 was still healthy
    alert = loss_alert(points[:2])
    assert alert is not None and "nan" in alert.lower() and "step 2" in alert
    # an id and its values, rendered in the page's language
    assert isinstance(alert, Alert) and alert.message == "grad-norm-not-finite-at-step" and alert.params["step"] == 2
    assert "第 2 步" in alert.text("zh-CN") and "nan" in alert.text("zh-CN")


def test_an_alert_survives_a_pickle_with_its_id() -> None:
    import pickle

    alert = loss_alert([{"step": 1, "loss": 2.0}, {"step": 2, "loss": "nan"}])
    again = pickle.loads(pickle.dumps(alert))
    assert again == alert and again.message == alert.message and again.text("zh-CN") == alert.text("zh-CN")


def test_alert_on_loss_logged_as_zero_after_nan_steps() -> None:
    points = [{"step": 1, "loss": 6.21}, {"step": 2, "loss": 6.24}, {"step": 3, "loss": 0.0}]
    alert = loss_alert(points)
    assert alert is not None and "exactly 0" in alert
    assert loss_alert([{"step": 1, "loss": 0.0}]) is None  # nothing positive before it


@pytest.mark.parametrize("bad", [math.nan, math.inf, "nan", "inf", "-inf"])
def test_alert_on_non_finite_loss(bad) -> None:
    assert loss_alert([{"step": 1, "loss": 2.0}, {"step": 2, "loss": bad}]) is not None


def test_alert_on_exploding_grad_norm() -> None:
    calm = [{"step": i, "loss": 2.0, "grad_norm": g} for i, g in enumerate([1.1, 0.9, 1.0, 1.2], start=1)]
    assert loss_alert(calm) is None
    assert loss_alert(calm + [{"step": 5, "loss": 2.0, "grad_norm": 90.0}]) is None  # 90x: noisy, not exploding
    alert = loss_alert(calm + [{"step": 5, "loss": 2.1, "grad_norm": "2.768e+07"}])
    assert alert is not None and "step 5" in alert


def test_no_alert_without_enough_history_or_points() -> None:
    assert loss_alert([]) is None
    assert loss_alert([{"step": 1, "grad_norm": 1.0}, {"step": 2, "grad_norm": 5000.0}]) is None
    assert loss_alert([{"step": 1, "loss": None, "grad_norm": None}]) is None
