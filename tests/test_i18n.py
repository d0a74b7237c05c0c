"""The English and Simplified Chinese catalogues (backend/i18n/locales/*.yaml): complete, consistent, used.

The rule lists are read from the rule modules themselves, so a rule added to diagnose.py
or checks.py without its words fails here. The config-rule templates are checked against
the messages the real rules produce (the bad-input cases of tests/test_checks.py): a
message reworded in checks.py without its template fails here too.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from backend import diagnose
from backend.findings import Finding, translate_finding
from backend.i18n import (
    CATALOGUE,
    LOCALES,
    canonical_locale,
    pick_locale,
    placeholders,
    translate,
    translate_diagnosis,
    ui_translations,
)

ROOT = Path(__file__).resolve().parent.parent
CJK = re.compile(r"[\u4e00-\u9fff]")
# Keys whose text is the same in every language: names, file names, a pass-through.
SAME_IN_EVERY_LANGUAGE = {
    "app.title",
    "estimate.fix.sentence",  # only punctuation around the changes, each of which is translated
    "actions.separator",  # the punctuation between field names: ", " and "、"
    "health.separator",  # between GPU names: ", " and "、"
    "health.gpu",  # "GPU {gpu}" in both
    "health.gpu_on_node",
    "health.runs_mark",  # "{state} ⚠{count}": the state is translated
    "health.line",  # "{kind}：{seen}（{state}）": each part is translated
    "validate.tab.rung_verdict",  # "{rung}：{status}": both are translated
    # the doctor's checks named by the tool or variable they check, and lines of bare values
    "doctor.name.visible_devices",
    "doctor.name.bf16",
    "doctor.name.bitsandbytes",
    "doctor.name.flash_attn",
    "doctor.name.deepspeed",
    "doctor.name.liger_kernel",
    "doctor.name.llamafactory",
    "doctor.torch.build_rocm",
    "doctor.gpus.gpu",
    "doctor.visible.gpu",
    "doctor.flash.ok",
    "doctor.lf.ok",
    "label.preview_yaml",
    "label.log_tail",
    "label.flash_attn",
    "label.lora_alpha",
    "label.lora_dropout",
    "field.flash_attn",
    "field.lora_alpha",
    "field.lora_dropout",
    "chart.gib",
    "word.gpu",
    "check.memory-will-not-fit.fix",
    "plan.describe.gpus",  # "GPU 0,1" in the command preview's comment
    "telemetry.tool_said",  # a tool's own line: as written, quoted in Chinese
    "doctor.gpus.runtime_said",  # the runtime's own words, in brackets (quoted in Chinese)
}


def test_both_catalogues_have_the_same_keys() -> None:
    english, chinese = CATALOGUE["en"], CATALOGUE["zh-CN"]
    assert sorted(set(english) - set(chinese)) == [], "missing in zh-CN"
    assert sorted(set(chinese) - set(english)) == [], "missing in en"
    assert CATALOGUE["zh"] == chinese  # a browser saying only "zh" reads the same words
    assert set(LOCALES) <= set(CATALOGUE)


def test_placeholders_are_identical_per_key() -> None:
    different = {
        key: (placeholders(CATALOGUE["en"][key]), placeholders(CATALOGUE["zh-CN"][key]))
        for key in CATALOGUE["en"]
        if placeholders(CATALOGUE["en"][key]) != placeholders(CATALOGUE["zh-CN"].get(key, ""))
    }
    assert different == {}


def test_every_text_is_non_empty_and_chinese_where_it_should_be() -> None:
    for key, text in CATALOGUE["zh-CN"].items():
        assert text.strip(), key
        assert CATALOGUE["en"][key].strip(), key
        if key not in SAME_IN_EVERY_LANGUAGE:
            assert CJK.search(text), f"{key} is not translated: {text!r}"
            assert not CJK.search(CATALOGUE["en"][key]), f"{key}: Chinese in the English catalogue"


def test_every_diagnosis_rule_has_a_cause_and_fix_in_both_languages() -> None:
    assert len(diagnose.RULES) >= 10
    for rule in diagnose.RULES:
        for part in ("cause", "fix"):
            key = f"diagnose.{rule.name}.{part}"
            assert CATALOGUE["en"][key].strip(), key  # a rule's words are the catalogue's, by its name
            assert CJK.search(CATALOGUE["zh-CN"][key]), key


def test_chinese_diagnoses_keep_the_commands_and_variables_of_the_english() -> None:
    # `sudo usermod ...`, `HSA_OVERRIDE_GFX_VERSION=11.0.0`: a reader must be able to copy them.
    for rule in diagnose.RULES:
        for part in ("cause", "fix"):
            english = CATALOGUE["en"][f"diagnose.{rule.name}.{part}"]
            chinese = CATALOGUE["zh-CN"][f"diagnose.{rule.name}.{part}"]
            for code in re.findall(r"`[^`]+`", english):
                assert code in chinese, f"{rule.name}.{part} lost {code}"


def _rule_names_in(path: Path) -> set[str]:
    """Rule names a module gives its findings: `rule="..."` keywords, and the rule argument of
    checks.py's helpers `_finding(key, problem, fix, rule)` and `_range(..., rule, fix_value)`
    of distributed.check_plan's `problem(key, what, fix, rule, severity)` and of
    `Finding.of(key, rule, ...)`. The rules of a `NumberRange(..., rule=..., rule_low=...)` are
    not among them: a range finding is shown with the shared `out-of-range` messages
    (`test_every_range_finding_is_shown_with_the_shared_message`)."""
    names: set[str] = set()
    positions = {"_finding": 3, "_range": 5, "problem": 3, "Finding.of": 1}
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(node, ast.Call) or (isinstance(node.func, ast.Name) and node.func.id == "NumberRange"):
            continue
        for keyword in node.keywords:
            if keyword.arg == "rule" and isinstance(keyword.value, ast.Constant) and isinstance(keyword.value.value, str):
                names.add(keyword.value.value)
        callee = node.func.id if isinstance(node.func, ast.Name) else None
        if isinstance(node.func, ast.Attribute) and node.func.attr == "of" and isinstance(node.func.value, ast.Name) and node.func.value.id == "Finding":
            callee = "Finding.of"  # Finding.of(key, rule, message=..., **params)
        position = positions.get(callee or "")
        if position is not None and len(node.args) > position:
            argument = node.args[position]
            if isinstance(argument, ast.Constant) and isinstance(argument.value, str):
                names.add(argument.value)
    return names


# Every backend module that names rules: read from the tree, so a module split in two (or a
# new one) is covered without being listed here.
RULE_MODULES = sorted(
    str(path.relative_to(ROOT)) for path in (ROOT / "backend").rglob("*.py") if _rule_names_in(path)
)


def test_the_rule_modules_are_found() -> None:
    assert {"backend/config/checks.py", "backend/config/__init__.py", "backend/config/yaml_import.py", "backend/llama_factory/check.py"} <= set(RULE_MODULES)


@pytest.mark.parametrize("module", RULE_MODULES)
def test_every_config_rule_has_messages_in_both_languages(module: str) -> None:
    names = _rule_names_in(ROOT / module)
    missing = sorted(
        f"{name}.{part}" for name in names for part in ("problem", "fix") if f"check.{name}.{part}" not in CATALOGUE["zh-CN"]
    )
    assert missing == []


def _range_findings() -> list[Finding]:
    """A finding for every range of the schema, from below and above it, typed and too large
    to convert: what the form, the import and the plan show for a number outside its range."""
    from backend.config import huge_finding, range_finding, schema

    findings = []
    for field in schema.page_fields():
        bounds = field.range
        if bounds is None:
            continue
        for value in (bounds.low - 1, bounds.high + 1, bounds.low):
            finding = range_finding(field.name, value, field.name)
            if finding is not None:
                findings.append(finding)
        findings += [huge_finding(field.name, 10**40, field.name), huge_finding(field.name, -(10**40), field.name)]
    return findings


def test_every_range_finding_is_shown_with_the_shared_message() -> None:
    # Which range a number broke is the finding's rule (tests and the page's field marks go by
    # it); what a reader sees is the shared `out-of-range` message with the field, the value and
    # the range, in each language: no `check.<rule>` pair per range is needed.
    findings = _range_findings()
    from backend.config import schema

    ranged = {f.name for f in schema.page_fields() if f.range is not None}
    assert {f.key for f in findings} == ranged and len({f.rule for f in findings}) >= 25
    for finding in findings:
        assert finding.message in ("out-of-range", "out-of-range-digits", "out-of-range-negative-digits"), finding.rule
        for locale in LOCALES:
            problem, fix = finding.text(locale)
            assert problem and fix and finding.params["range"] in problem
        assert CJK.search(translate_finding(finding, "zh-CN").problem)


def test_no_message_is_kept_for_a_range_rule_alone() -> None:
    # A `check.<rule>` pair for a range rule would never be shown (unless a rule also names its
    # own finding, as distributed.check_plan's node-rank-range does).
    from tests.test_locale_files import _finding_of_calls

    shown = {f"check.{message}." for _, _, message, _ in _finding_of_calls()}
    filler = sorted(
        key for finding in _range_findings() for key in (f"check.{finding.rule}.problem", f"check.{finding.rule}.fix")
        if key in CATALOGUE["en"] and not any(key.startswith(prefix) for prefix in shown)
    )
    assert filler == []


def test_the_rule_name_reader_sees_every_checks_rule() -> None:
    # The AST reader is what the coverage test relies on; checks.py has ~36 rules (the range
    # rules of schema.py's field table are shown through `out-of-range`, and not counted here).
    assert len(set().union(*(_rule_names_in(ROOT / module) for module in RULE_MODULES))) >= 50
    # The import's rules, and its reader's (backend/config/yaml_reader.py: syntax, size, nesting).
    yaml_rules = _rule_names_in(ROOT / "backend" / "config" / "yaml_import.py") | _rule_names_in(ROOT / "backend" / "config" / "yaml_reader.py")
    assert len(yaml_rules) >= 20 and {"yaml-empty", "yaml-unknown-key", "yaml-form-has-no-choice"} <= yaml_rules
    assert _rule_names_in(ROOT / "backend" / "llama_factory" / "check.py") >= {"lf-unknown-key", "lf-bad-value", "lf-rejected", "lf-timeout"}
    # check_plan names its rules through Finding.of(key, rule, ...); its unreadable numbers
    # are config.py's not-a-number.
    distributed_rules = _rule_names_in(ROOT / "backend" / "config" / "distributed.py")
    assert {"bad-gpu-list", "bad-strategy", "nproc-over-gpus", "env-overrides-plan"} <= distributed_rules


def _bad_input_findings(tmp_path: Path) -> list[Finding]:
    from tests import test_checks as cases

    assets = cases.Assets(tmp_path, cases.make_model_dir(tmp_path / "model"), cases.make_dataset_dir(tmp_path / "data"))
    findings: list[Finding] = []
    for _, override, preset_id, bnb, _, _ in cases.CASES:
        values = {**cases.good_values(assets), "preset": preset_id, **override(assets)}
        if cases.PRESETS[preset_id].use_cpu and "precision" not in override(assets):
            values["precision"] = "fp32"
        findings += cases.findings_for(values, preset_id, bnb)
    return findings


def test_every_real_config_message_is_translated_with_its_values(tmp_path: Path) -> None:
    findings = _bad_input_findings(tmp_path)
    assert len({f.rule for f in findings}) >= 35
    untranslated = []
    for finding in findings:
        chinese = translate_finding(finding, "zh-CN")
        for part in ("problem", "fix"):
            english, text = getattr(finding, part), getattr(chinese, part)
            passthrough = CATALOGUE["zh-CN"].get(f"check.{finding.rule}.{part}") == "{fix}"
            if not passthrough and (text == english or not CJK.search(text)):
                untranslated.append(f"{finding.rule}.{part}: {english}")
        assert chinese.rule == finding.rule and chinese.key == finding.key and chinese.patch == finding.patch
    assert untranslated == []


# --- the YAML import, LLaMA-Factory's own check and the multi-GPU plan -------------------------

FIXTURES = ROOT / "tests" / "fixtures" / "yaml"
# Values a message carries and a translation must keep: `code`, 'repr'-quoted values, numbers.
_CODE = re.compile(r"`[^`]+`")
_QUOTED = re.compile(r"(?<![A-Za-z])'[^'\n]*'(?![A-Za-z])")
_NUMBER = re.compile(r"\d+(?:[.,]\d+)*")


def _untranslated(findings: list[Finding]) -> list[str]:
    """Each finding whose problem or fix is not in Chinese, or lost a value of the English."""
    from backend.config.yaml_import import FILE_KEY

    wrong = []
    for finding in findings:
        chinese = translate_finding(finding, "zh-CN")
        assert (chinese.rule, chinese.key, chinese.severity, chinese.patch) == (finding.rule, finding.key, finding.severity, finding.patch)
        for part in ("problem", "fix"):
            english, text = getattr(finding, part), getattr(chinese, part)
            if CATALOGUE["zh-CN"].get(f"check.{finding.rule}.{part}") == "{fix}":
                continue  # the memory estimate's composed fix is passed through as written
            if text == english or not CJK.search(text):
                wrong.append(f"{finding.rule}.{part} not translated: {english}")
                continue
            values = _CODE.findall(english) + _QUOTED.findall(english) + _NUMBER.findall(english)
            if finding.key != FILE_KEY and re.search(rf"(?<![\w-]){re.escape(finding.key)}(?![\w-])", english):
                values.append(finding.key)
            lost = [value for value in values if value not in text]
            if lost:
                wrong.append(f"{finding.rule}.{part} lost {lost}: {english} -> {text}")
    return wrong


def _billion_laughs(levels: int = 6, width: int = 10) -> str:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{n}: &a{n} [{', '.join([f'*a{n - 1}'] * width)}]" for n in range(1, levels)]
    return "\n".join(lines) + "\n"


# Bad YAML the import must explain, one or more of each of its rules (and each wording).
CRAFTED_YAML: list[tuple[str, str | None]] = [
    ("stage: ppo\n", "rx7900xtx"),  # a stage the form does not run
    ("stage: grpo\n", "rx7900xtx"),  # no stage at all
    ("", "rx7900xtx"),  # empty
    ("   \n\n", "rx7900xtx"),  # blank
    ("\x00\x01\x02PK\x03\x04\x89PNG\r\n\x1a\n", "rx7900xtx"),  # binary junk
    ("- learning_rate: 1e-4\n- bf16: true\n", "rx7900xtx"),  # a list
    ("42\n", "rx7900xtx"),  # a single value
    ("learning_rate 1e-4\n", "rx7900xtx"),  # a single string (missing colon)
    ("# only a comment\n", "rx7900xtx"),  # nothing but comments
    ("learning_rate: 1e-4\nlearning_rate: 2e-4\ndo_train: true\n", "rx7900xtx"),  # duplicate key
    ("lerning_rate: 1e-4\ndo_train: true\n", "rx7900xtx"),  # typo key, the real one unset
    ("lerning_rate: 1e-4\nlearning_rate: 2e-4\n", "rx7900xtx"),  # typo key, the real one set
    ("completely_made_up: 1\n1: 2\n", "rx7900xtx"),  # no close key; a key that is not text
    (_billion_laughs(), "rx7900xtx"),  # anchors
    ("a: 1\n" * 40, None),  # too large for the small limit below (and duplicate keys)
    # syntax errors, one per wording PyYAML uses
    ("model_name_or_path: /models/x\n  template: llama3\n", "rx7900xtx"),
    ("learning_rate: 1e-4\nbf16\n", "rx7900xtx"),
    ("training:\n\tlearning_rate: 1e-4\n", "rx7900xtx"),
    ('template: "llama3\n', "rx7900xtx"),
    ("lora_target:\n  - q_proj\n lora_rank: 8\n", "rx7900xtx"),
    ("dataset: [alpaca, identity\nbf16: true\n", "rx7900xtx"),
    ("lora_alpha: {a: 1\n", "rx7900xtx"),
    ("  stage: sft\ndo_train: true\n", "rx7900xtx"),
    ("learning_rate: *lr\n", "rx7900xtx"),
    ("a: &x 1\nb: &x 2\n", "rx7900xtx"),
    ("? [1]\n: 2\n", "rx7900xtx"),
    ('dataset_dir: "C:\\data"\n', "rx7900xtx"),
    ("stage: !!python/object:os.system x\n", "rx7900xtx"),
    ("stage: sft\n---\nstage: dpo\n", "rx7900xtx"),
    ("stage: sft\n\x07\n", "rx7900xtx"),
    # keys and values from other tools and guides
    ("do_train: true\ndisable_flash_attn: true\n", "rx7900xtx"),
    ("do_train: true\ndisable_flash_attn: false\n", "rx7900xtx"),
    ("do_train: true\ncompute_type: bf16\n", "rx7900xtx"),
    ("do_train: true\ncompute_type: fp16\n", "rx6900xt"),
    ("do_train: true\ncompute_type: fp32\n", "rx7900xtx"),
    ("do_train: true\ncompute_type: pure_bf16\n", "rx7900xtx"),
    ("do_train: true\ncompute_type: half\n", "rx7900xtx"),
    ("do_train: true\nflash_attn: true\n", "rx7900xtx"),
    ("do_train: true\nflash_attn: eager\n", "rx7900xtx"),
    ("do_train: true\nflash_attn: fa1\n", "rx7900xtx"),
    ("do_train: true\nflash_attn: fa3\n", "rx7900xtx"),
    ("do_train: true\nddp_backend: rccl\nquantization_device_map: auto\n", "rx7900xtx"),
    ("do_train: true\nbf16: true\nfp16: true\n", "rx6900xt"),
    ("do_train: true\nbf16: true\nfp16: true\n", None),
    ("do_train: false\nstage: dpo\nfinetuning_type: qlora\nlora_rank: abc\n", "rx7900xtx"),
    # hostile: nesting deeper than any config, and more misspelled keys than are listed
    ("lora_target: " + "[" * 100 + "]" * 100 + "\n", "rx7900xtx"),
    ("do_train: true\n" + "".join(f"not_a_key_{n}: 1\n" for n in range(60)), "rx7900xtx"),
]


def _yaml_findings() -> list[Finding]:
    from backend.config.presets import load_presets
    from backend.config.yaml_import import import_yaml

    presets, _ = load_presets()
    files = sorted(FIXTURES.glob("*.yaml"))
    assert files, "no YAML fixtures"
    findings: list[Finding] = []
    for path in files:
        findings += import_yaml(path.read_text(encoding="utf-8"), presets["rx7900xtx"]).findings
    for text, preset_id in CRAFTED_YAML:
        max_bytes = 100 if preset_id is None and text.startswith("a: 1") else 256_000
        findings += import_yaml(text, presets[preset_id] if preset_id else None, max_bytes).findings
    return findings


def _plan_findings() -> list[Finding]:
    from dataclasses import replace

    from backend.config.distributed import DistributedPlan, check_plan, parse_plan_form

    bad_forms: list[tuple[dict, bool]] = [
        ({"dist_nproc": "two", "dist_gpus": "0,x", "dist_rccl_env": "NCCL_DEBUG INFO", "dist_strategy": "zero9"}, False),
        ({"dist_master_port": 80, "dist_ddp_timeout_s": 0, "dist_nnodes": "1.5", "dist_node_rank": ""}, False),
        ({"dist_nnodes": 0, "dist_master_port": "70000", "dist_master_addr": "  "}, False),
        ({"dist_nnodes": 2, "dist_node_rank": 5, "dist_gpus": "0,0", "dist_nproc": 3, "dist_offload": True}, False),
        ({"dist_nnodes": 2, "dist_master_addr": "localhost", "dist_gpus": "0-3", "dist_nproc": 2, "dist_rccl_env": "NNODES=4\nHIP_VISIBLE_DEVICES=1"}, False),
        ({"dist_gpus": "", "dist_nproc": 0, "dist_master_port": "abc"}, False),
        ({"dist_strategy": "zero3"}, True),
    ]
    findings: list[Finding] = []
    for values, on_cpu in bad_forms:
        findings += parse_plan_form(values, on_cpu=on_cpu)[1]
    # What the form cannot produce: a plan built in code.
    good = DistributedPlan(gpus=(0, 1), nproc=2)
    findings += check_plan(replace(good, gpus=(-1, 0)))
    findings += check_plan(replace(good, rccl_env=(("NCCL DEBUG", "INFO"), ("NCCL_DEBUG", "INFO\nWARN"))))
    findings += check_plan(DistributedPlan(on_cpu=True, gpus=(0,)))
    return findings


def _lf_findings(monkeypatch: pytest.MonkeyPatch) -> list[Finding]:
    import subprocess

    from backend.llama_factory import check as lf_check

    args = {"learning_rate": 1e-4, "lerning_rate": 2e-4, "lora_rnak": 16, "zz_made_up": 1, "num_train_epochs": "three", "max_steps": 1.5, "bf16": "maybe", "flash_attn": "fa1", "template": 3}
    result = {
        "unknown_keys": ["lerning_rate", "lora_rnak", "zz_made_up"],
        "bad_values": [
            {"key": "num_train_epochs", "value": "'three'", "expected": "a number"},
            {"key": "max_steps", "value": "1.5", "expected": "a whole number"},
            {"key": "bf16", "value": "'maybe'", "expected": "true or false"},
            {"key": "template", "value": "3", "expected": "a text value"},
            {"key": "flash_attn", "value": "'fa1'", "expected": "one of auto, disabled, sdpa, fa2, fa3"},
            {"key": "lora_rank", "value": "'x'", "expected": "a list of numbers"},  # a wording the worker may add
        ],
    }
    findings = lf_check.findings_from_result(result, args)
    errors = [
        "At most one of fp16 and bf16 can be set.",
        "Invalid fine-tuning method: qlora.",
        "Quantization is only compatible with the LoRA method.",
        "Cannot use device map for quantized models in training.",
        "Please specify dataset for training.",
        "Please provide `model_name_or_path`.",
        "--logging_strategy requires non-zero --logging_steps",
        "--save_strategy requires non-zero --save_steps",
        "Please make sure eval_dataset be provided or val_size >1e-6",
        "`lora_target` must be given for lora training.",
        "Something else entirely went wrong.",
    ]
    for message in errors:
        findings += lf_check.findings_from_result({"error": {"type": "ValueError", "message": message}}, {"lora_target": None, "learning_rate": 1e-4})

    # The helper process itself: timed out, crashed, or could not import llamafactory.
    def timeout(*_args, **kwargs):
        raise subprocess.TimeoutExpired("worker", kwargs.get("timeout", 0))

    answers = [
        timeout,
        lambda *a, **k: subprocess.CompletedProcess(a, 1, stdout="", stderr="Traceback...\nModuleNotFoundError: No module named 'torch'\n"),
        lambda *a, **k: subprocess.CompletedProcess(a, 0, stdout='{"ok": false, "error": {"type": "ImportError", "message": "cannot import name \'x\'"}}\n', stderr=""),
    ]
    for answer in answers:
        monkeypatch.setattr(lf_check.subprocess, "run", answer)
        findings += lf_check.check_with_llamafactory({"do_train": True}, timeout_s=7)
    return findings


SOURCE_FILES = {
    "yaml_import": ROOT / "backend" / "config" / "yaml_import.py",
    "distributed": ROOT / "backend" / "config" / "distributed.py",
    "lf_check": ROOT / "backend" / "llama_factory" / "check.py",
}


@pytest.mark.parametrize("source", ["yaml_import", "distributed", "lf_check"])
def test_every_real_finding_of_the_import_the_plan_and_llamafactorys_check_is_in_chinese(source: str, monkeypatch: pytest.MonkeyPatch) -> None:
    findings = {"yaml_import": _yaml_findings, "distributed": _plan_findings, "lf_check": lambda: _lf_findings(monkeypatch)}[source]()
    produced = {finding.rule for finding in findings}
    own = _rule_names_in(SOURCE_FILES[source])
    assert sorted(own - produced) == [], "a rule the crafted inputs never trigger"
    assert _untranslated(findings) == []


def test_no_message_is_matched_back_from_english() -> None:
    # Every producer builds its findings from a message id (Finding.of): no catalogue entry is
    # a numbered English variant to match a sentence against, and a finding built by hand
    # from finished sentences is shown as written, in any language.
    variants = [key for key in CATALOGUE["en"] if re.fullmatch(r"check\.[^.]+\.(problem|fix)\.\d+", key)]
    assert variants == []
    by_hand = Finding("learning_rate", "Learning rate must be a positive number, not -1.", "Enter 1e-4.", rule="learning-rate-absurd")
    assert translate_finding(by_hand, "zh-CN") == by_hand
    for findings in (_yaml_findings(), _plan_findings()):
        assert [f.rule for f in findings if f.params is None] == []


def test_the_import_speaks_chinese_about_the_guide_mistakes() -> None:
    from backend.config.presets import load_presets
    from backend.config.yaml_import import import_yaml

    presets, _ = load_presets()
    result = import_yaml((FIXTURES / "cuda_guide_mistakes.yaml").read_text(encoding="utf-8"), presets["rx7900xtx"])
    chinese = {f.key: translate_finding(f, "zh-CN") for f in result.findings if f.rule.startswith("yaml-") and f.rule != "yaml-form-has-no-choice"}
    assert chinese["flash_attn"].problem == "YAML 会把 `flash_attn: off/false/no` 读成布尔值 false，而 LLaMA-Factory 不接受布尔值。"
    assert chinese["flash_attn"].fix == "请改写为 `flash_attn: disabled`（可选值：auto, disabled, sdpa, fa2, fa3）。"
    assert chinese["lora_rnak"].fix == "你是不是想写 `lora_rank`？请改成这个名字。"
    assert chinese["lerning_rate"].fix == "请删除它（你是不是想写 `learning_rate`？它已经设置过了）。"
    assert chinese["ddp_backend"].problem.startswith("ddp_backend 'pytorch' 不是有效的后端")
    assert "`ddp_backend: nccl`" in chinese["ddp_backend"].fix
    # The preset's name too: its file's Chinese name (display_name_zh).
    assert chinese["bf16"].fix == "bf16 和 fp16 只能设置一个：保留 `bf16: true`（AMD Radeon RX 7900 XTX（24 GB） 支持 bf16）。"
    assert translate_finding(result.findings[0], "en") == result.findings[0]


def test_plan_field_names_inside_messages_are_translated_too() -> None:
    from backend.config.distributed import parse_plan_form

    _, findings = parse_plan_form({"dist_nproc": "two", "dist_master_port": 80})
    chinese = {f.rule: translate_finding(f, "zh-CN") for f in findings}
    assert chinese["not-a-number"].problem == "每节点进程数必须是整数，不能是 'two'。"
    assert chinese["not-a-number"].fix == "请为每节点进程数输入一个整数。"
    assert chinese["privileged-port"].problem == "监听端口 80 需要 root 权限。"


def test_a_placeholder_may_be_named_key() -> None:
    # `translate(key, locale, **values)` takes `key` itself: a {key} value must not clash.
    finding = Finding.of("lerning_rate", "yaml-duplicate-key")  # its text says `{key}`
    assert finding.problem.startswith("`lerning_rate` appears more than once")
    assert "`lerning_rate`" in translate_finding(finding, "zh-CN").problem


def test_a_translated_finding_keeps_the_values_of_the_message(tmp_path: Path) -> None:
    finding = Finding.of("model_path", "model-path-not-found", path=f"{tmp_path}/nope")
    assert finding.problem == f"Model directory {tmp_path}/nope does not exist."
    chinese = translate_finding(finding, "zh-CN")
    assert chinese.problem == f"模型目录 {tmp_path}/nope 不存在。"
    assert translate_finding(finding, "en") == finding


def test_field_names_inside_messages_are_translated_too() -> None:
    from backend.config import field_noun

    finding = Finding.of("batch_size", "not-a-number", field=field_noun("batch_size"), value="'abc'")
    assert finding.problem == "Batch size must be a whole number, not 'abc'."
    chinese = translate_finding(finding, "zh-CN")
    assert chinese.problem == "批大小必须是整数，不能是 'abc'。"
    assert chinese.fix == "请为批大小输入一个整数。"


def test_no_english_word_is_looked_back_up_in_the_catalogue() -> None:
    # A plain string is shown as given: only a message (an id) is put into the reader's words.
    finding = Finding.of("batch_size", "not-a-number", field="Batch size", value="'abc'")
    assert translate_finding(finding, "zh-CN").problem == "Batch size必须是整数，不能是 'abc'。"


def test_every_form_field_has_a_noun_for_its_messages() -> None:
    from backend.config import field_noun, schema

    missing = [f.name for f in schema.page_fields() if f"field.{f.name}" not in CATALOGUE["en"]]
    assert missing == []
    assert field_noun("dist_strategy").text("zh-CN") == CATALOGUE["zh-CN"]["field.dist_strategy"]


def test_a_finding_built_by_hand_or_of_an_unknown_rule_stays_as_written() -> None:
    finding = Finding("learning_rate", "Some wording nobody wrote a template for.", "Do something.", rule="learning-rate-absurd")
    assert translate_finding(finding, "zh-CN") == finding
    unknown_rule = Finding("x", "Problem.", "Fix.", rule="no-such-rule")
    assert translate_finding(unknown_rule, "zh-CN") == unknown_rule


def test_translate_fills_placeholders_and_falls_back() -> None:
    assert translate("status.line", "zh-CN", state=translate("state.running", "zh-CN"), run_id="r1") == "**状态：运行中** — 运行 `r1`"
    assert translate("status.line", "en", state="running", run_id="r1") == "**Status: running** — run `r1`"
    assert translate("button.start", "fr") == "Start"  # unknown locale: English
    assert translate("no.such.key", "zh-CN") == "no.such.key"  # unknown key: the key
    assert translate("progress.step", "en", step=3) == "Step 3 / {total}"  # a missing value is left visible
    assert translate("check.dataset-entry-bad.fix", "en") == 'Write it as {"file_name": "..."}.'


def test_diagnoses_translate_by_rule_name() -> None:
    found = diagnose.Diagnosis("gpu_out_of_memory", "HIP out of memory")
    assert found.text("en") == (found.cause, found.fix) == (CATALOGUE["en"]["diagnose.gpu_out_of_memory.cause"], CATALOGUE["en"]["diagnose.gpu_out_of_memory.fix"])
    assert translate_diagnosis(found.rule, found.cause, found.fix, "en") == (found.cause, found.fix)
    cause, fix = found.text("zh-CN")
    assert cause == "GPU 显存不足。" and "PYTORCH_HIP_ALLOC_CONF=expandable_segments:True" in fix
    assert translate_diagnosis(found.rule, found.cause, found.fix, "zh-CN") == (cause, fix)
    assert translate_diagnosis("not_a_rule", "c", "f", "zh-CN") == ("c", "f")


@pytest.mark.parametrize(
    ("accept_language", "override", "expected"),
    [
        (None, None, "en"),
        ("", None, "en"),
        ("zh-CN,zh;q=0.9,en;q=0.8", None, "zh-CN"),
        ("en-US,en;q=0.9,zh-CN;q=0.8", None, "en"),
        ("zh", None, "zh-CN"),
        ("zh-TW", None, "zh-CN"),
        ("fr-FR,fr;q=0.9,zh-CN;q=0.8,en;q=0.5", None, "zh-CN"),  # first language we speak, by quality
        ("en;q=0.1,zh-CN;q=0.9", None, "zh-CN"),
        ("zh-CN;q=0,en", None, "en"),  # q=0 means "not this one"
        ("de,fr", None, "en"),
        ("*", None, "en"),
        ("zh-CN", "en", "en"),  # the page's switch wins
        ("en-US", "zh-CN", "zh-CN"),
        ("en-US", "zh_cn", "zh-CN"),
        ("zh-CN", "auto", "zh-CN"),  # "auto" defers to the browser
        ("zh-CN", "klingon", "zh-CN"),  # an unknown switch value is ignored
        ("garbage;;q=x,,", None, "en"),
    ],
)
def test_pick_locale(accept_language, override, expected) -> None:
    assert pick_locale(accept_language, override) == expected


def test_canonical_locale() -> None:
    assert canonical_locale("zh-Hans-CN") == "zh-CN"
    assert canonical_locale("EN-gb") == "en"
    assert canonical_locale("ja") is None
    assert canonical_locale(None) is None


def test_static_page_text_is_safe_for_gradios_message_format() -> None:
    # Gradio's frontend formats custom translations with ICU MessageFormat: braces are
    # arguments and an apostrophe starts a quoted span, so a static label may hold neither.
    static = ui_translations()
    assert set(static) == set(CATALOGUE)
    for locale, texts in static.items():
        assert "button.start" in texts and "tab.train" in texts and "label.model_path" in texts
        assert not any(k.startswith(("status.", "check.", "diagnose.")) for k in texts)
        for key, text in texts.items():
            assert not re.search(r"[{}']", text), f"{locale} {key}: {text!r}"


KEY_PREFIXES = tuple(sorted({key.split(".")[0] + "." for key in CATALOGUE["en"]}))
# The files that put catalogue keys on the page.
PAGE_SOURCES = sorted((ROOT / "ui").glob("*.py")) + [ROOT / "backend" / "view.py", *(ROOT / "backend" / "service").glob("*.py")]


def _page_keys_and_labels() -> tuple[dict[str, str], set[str]]:
    """(every catalogue-looking key written in the page's sources -> file, every English label
    written out literally). f-strings like f"label.{name}" are expanded over the form fields."""
    from backend.config import FORM_FIELDS

    keys: dict[str, str] = {}
    literal_labels: set[str] = set()
    key_pattern = re.compile(r"^({})[A-Za-z0-9_.-]+$".format("|".join(re.escape(p) for p in KEY_PREFIXES)))
    for path in PAGE_SOURCES:
        if not path.exists():
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and key_pattern.match(node.value):
                # A head ending in "." is an f-string's prefix (f"datatab.layout.{name}"): the
                # keys it makes are checked where the names are known (tests/test_data_page.py).
                if not node.value.endswith((".py", ".json", ".yaml", ".log", ".jsonl", ".")):
                    keys[node.value] = path.name
            elif isinstance(node, ast.JoinedStr) and node.values and isinstance(node.values[0], ast.Constant):
                head = node.values[0].value
                if head == "label." and len(node.values) == 2:
                    keys.update({f"label.{name}": path.name for name in FORM_FIELDS})
            elif isinstance(node, ast.Call):
                for keyword in node.keywords:
                    if keyword.arg == "label" and isinstance(keyword.value, ast.Constant) and isinstance(keyword.value.value, str):
                        literal_labels.add(keyword.value.value)
    return keys, literal_labels


def test_every_key_the_page_uses_exists_in_both_languages() -> None:
    keys, _ = _page_keys_and_labels()
    assert len(keys) >= 40, "the page's keys were not found: has the way ui/ names them changed?"
    missing = sorted(f"{key} ({where})" for key, where in keys.items() if key not in CATALOGUE["en"] or key not in CATALOGUE["zh-CN"])
    assert missing == []


def test_labels_the_page_writes_out_literally_are_file_names_only() -> None:
    # A label written as English text instead of a key cannot follow the language switch.
    _, literal = _page_keys_and_labels()
    technical_names = {"shell"}
    assert sorted(label for label in literal if label not in technical_names and not re.fullmatch(r"[\w.-]+\.(yaml|log|json|zip)", label)) == []


def test_every_form_field_has_a_label() -> None:
    from backend.config import FORM_FIELDS

    assert sorted(f"label.{name}" for name in FORM_FIELDS if f"label.{name}" not in CATALOGUE["zh-CN"]) == []


def test_a_finding_built_from_a_message_id_renders_in_each_language_without_matching_back() -> None:
    from backend.findings import Finding

    finding = Finding.of("dist_rccl_env", "env-not-settable", name="LD_PRELOAD")
    assert finding.params == {"name": "LD_PRELOAD"}
    assert "LD_PRELOAD" in finding.problem and finding.text("en") == (finding.problem, finding.fix)
    problem, fix = finding.text("zh-CN")
    assert "不能设置 LD_PRELOAD" in problem and "请删除 LD_PRELOAD" in fix
    assert translate_finding(finding, "zh-CN").problem == problem
