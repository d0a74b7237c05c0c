"""The locale files (backend/i18n/locales/*.yaml): the same message ids in every language,
the same placeholders per id, and every message id the code builds a finding from is there.

The files are read here as they are on disk (not through the cached CATALOGUE), so a file
that fails to parse, or nests a mapping, fails here with the file's name.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import yaml

from backend.i18n import CATALOGUE, DEFAULT_LOCALE, LOCALES, LOCALES_DIR, load_locale_file, placeholders

ROOT = Path(__file__).resolve().parent.parent
# Finding.of's own keyword arguments: everything else it is given is a message parameter.
FINDING_OF_KEYWORDS = {"message", "severity", "patch", "key", "rule", "quote"}


def _locale_files() -> dict[str, dict[str, str]]:
    return {locale: load_locale_file(LOCALES_DIR / f"{locale}.yaml") for locale in LOCALES}


def test_there_is_one_file_per_locale_and_nothing_else() -> None:
    assert sorted(path.name for path in LOCALES_DIR.glob("*.yaml")) == sorted(f"{locale}.yaml" for locale in LOCALES)


@pytest.mark.parametrize("locale", LOCALES)
def test_a_locale_file_is_a_flat_mapping_of_id_to_text(locale: str) -> None:
    data = yaml.safe_load((LOCALES_DIR / f"{locale}.yaml").read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    for key, text in data.items():
        assert isinstance(key, str) and "." in key, f"{locale}: {key!r} is not a dotted message id"
        assert isinstance(text, str) and text.strip(), f"{locale}: {key} has no text"


def test_every_locale_has_the_same_message_ids() -> None:
    files = _locale_files()
    english = set(files[DEFAULT_LOCALE])
    for locale, texts in files.items():
        assert sorted(english - set(texts)) == [], f"missing in {locale}.yaml"
        assert sorted(set(texts) - english) == [], f"in {locale}.yaml but not in {DEFAULT_LOCALE}.yaml"


def test_every_message_id_has_the_same_placeholders_in_every_locale() -> None:
    files = _locale_files()
    for locale, texts in files.items():
        different = {
            key: (placeholders(english), placeholders(texts.get(key, "")))
            for key, english in files[DEFAULT_LOCALE].items()
            if placeholders(english) != placeholders(texts.get(key, ""))
        }
        assert different == {}, f"{locale}.yaml"


def test_the_catalogue_is_the_files() -> None:
    for locale, texts in _locale_files().items():
        assert CATALOGUE[locale] == texts


def _finding_of_calls() -> list[tuple[str, int, str, set[str] | None]]:
    """Every `Finding.of(key, rule, message=..., **params)` in backend/ and ui/ with a literal
    rule: (file, line, message id, the parameter names; None when some come from `**mapping`)."""
    calls = []
    for path in sorted([*ROOT.glob("backend/**/*.py"), *ROOT.glob("ui/**/*.py")]):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "of"):
                continue
            if not (isinstance(node.func.value, ast.Name) and node.func.value.id == "Finding"):
                continue
            keywords = {kw.arg: kw.value for kw in node.keywords}
            rule = node.args[1] if len(node.args) > 1 else keywords.get("rule")
            message = keywords.get("message")
            if message is not None and not isinstance(message, ast.Constant):
                continue  # a message id computed at run time: covered by the module's own tests
            chosen = message if isinstance(message, ast.Constant) and message.value else rule
            if not (isinstance(chosen, ast.Constant) and isinstance(chosen.value, str)):
                continue  # a rule name computed at run time: covered by the module's own tests
            params = None if None in keywords else set(keywords) - FINDING_OF_KEYWORDS
            calls.append((str(path.relative_to(ROOT)), node.lineno, chosen.value, params))
    return calls


def test_every_finding_built_from_a_message_id_has_its_texts() -> None:
    calls = _finding_of_calls()
    assert calls, "no Finding.of calls found: has the way findings are built changed?"
    missing = [
        f"{where}:{line}: check.{message}.{part}"
        for where, line, message, _ in calls
        for part in ("problem", "fix")
        for locale in LOCALES
        if f"check.{message}.{part}" not in CATALOGUE[locale]
    ]
    assert missing == []


def test_every_finding_gives_the_placeholders_its_message_needs() -> None:
    short = []
    for where, line, message, params in _finding_of_calls():
        if params is None:
            continue
        needed = {
            name.split(":")[0]
            for part in ("problem", "fix")
            for name in placeholders(CATALOGUE[DEFAULT_LOCALE].get(f"check.{message}.{part}", ""))
        }
        needed.discard("key")  # Finding.of fills `{key}` with the finding's key
        if needed - params:
            short.append(f"{where}:{line}: check.{message} needs {sorted(needed - params)}")
    assert short == []
