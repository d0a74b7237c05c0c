"""The English and Simplified Chinese catalogues (backend/i18n.py): complete, consistent, used.

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
from backend.findings import Finding
from backend.i18n import (
    CATALOGUE,
    LOCALES,
    canonical_locale,
    pick_locale,
    placeholders,
    translate,
    translate_diagnosis,
    translate_finding,
    ui_translations,
)

ROOT = Path(__file__).resolve().parent.parent
CJK = re.compile(r"[\u4e00-\u9fff]")
# Keys whose text is the same in every language: names, file names, a pass-through.
SAME_IN_EVERY_LANGUAGE = {
    "app.title",
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
            assert CATALOGUE["en"][key] == getattr(rule, part)  # English is diagnose.py's own
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
    checks.py's helpers `_finding(key, problem, fix, rule)` and `_range(..., rule, fix_value)`."""
    names: set[str] = set()
    positions = {"_finding": 3, "_range": 5}
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(node, ast.Call):
            continue
        for keyword in node.keywords:
            if keyword.arg == "rule" and isinstance(keyword.value, ast.Constant) and isinstance(keyword.value.value, str):
                names.add(keyword.value.value)
        callee = node.func.id if isinstance(node.func, ast.Name) else None
        position = positions.get(callee or "")
        if position is not None and len(node.args) > position:
            argument = node.args[position]
            if isinstance(argument, ast.Constant) and isinstance(argument.value, str):
                names.add(argument.value)
    return names


@pytest.mark.parametrize("module", ["backend/checks.py", "backend/config.py", "backend/service.py"])
def test_every_config_rule_has_messages_in_both_languages(module: str) -> None:
    names = _rule_names_in(ROOT / module)
    assert names, f"no rule names found in {module}: has the way rules are named changed?"
    missing = sorted(
        f"{name}.{part}" for name in names for part in ("problem", "fix") if f"check.{name}.{part}" not in CATALOGUE["zh-CN"]
    )
    assert missing == []


def test_the_rule_name_reader_sees_every_checks_rule() -> None:
    # The AST reader is what the coverage test relies on; checks.py has ~46 rules.
    assert len(_rule_names_in(ROOT / "backend" / "checks.py")) >= 40


def _bad_input_findings(tmp_path: Path) -> list[Finding]:
    import test_checks as cases

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


def test_a_translated_finding_keeps_the_values_of_the_message(tmp_path: Path) -> None:
    finding = Finding("model_path", f"Model directory {tmp_path}/nope does not exist.", "Enter the absolute path of a model directory on this machine.", rule="model-path-not-found")
    chinese = translate_finding(finding, "zh-CN")
    assert chinese.problem == f"模型目录 {tmp_path}/nope 不存在。"
    assert translate_finding(finding, "en") == finding


def test_field_names_inside_messages_are_translated_too() -> None:
    finding = Finding("batch_size", "Batch size must be a whole number, not 'abc'.", "Enter a whole number for Batch size.", rule="not-a-number")
    chinese = translate_finding(finding, "zh-CN")
    assert chinese.problem == "批大小必须是整数，不能是 'abc'。"
    assert chinese.fix == "请为批大小输入一个整数。"


def test_a_message_no_template_fits_stays_in_english() -> None:
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
    rule = diagnose.RULES_BY_NAME["gpu_out_of_memory"]
    assert translate_diagnosis(rule.name, rule.cause, rule.fix, "en") == (rule.cause, rule.fix)
    cause, fix = translate_diagnosis(rule.name, rule.cause, rule.fix, "zh-CN")
    assert cause == "GPU 显存不足。" and "PYTORCH_HIP_ALLOC_CONF=expandable_segments:True" in fix
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
PAGE_SOURCES = sorted((ROOT / "ui").glob("*.py")) + [ROOT / "backend" / "view.py", ROOT / "backend" / "service.py"]


def _page_keys_and_labels() -> tuple[dict[str, str], set[str]]:
    """(every catalogue-looking key written in the page's sources -> file, every English label
    written out literally). f-strings like f"label.{name}" are expanded over the form fields."""
    from backend.config import FORM_FIELDS

    keys: dict[str, str] = {}
    literal_labels: set[str] = set()
    key_pattern = re.compile(r"^(%s)[A-Za-z0-9_.-]+$" % "|".join(re.escape(p) for p in KEY_PREFIXES))
    for path in PAGE_SOURCES:
        if not path.exists():
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and key_pattern.match(node.value):
                if not node.value.endswith((".py", ".json", ".yaml", ".log", ".jsonl")):
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
