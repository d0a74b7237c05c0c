"""RocBoard's words in English and Simplified Chinese: one catalogue, keyed by message id.

The words live in data files, one per locale: `backend/i18n/locales/en.yaml` and
`zh-CN.yaml`, each a flat mapping of message id -> text, read once at import. Both files hold
the same ids with the same `{placeholders}` (tests/test_i18n.py checks it); a new message is
one line in each file.

Code never carries an English sentence to the page: it carries a message id and its
parameters (`Finding.of`, a diagnosis's rule, an alert's id), and the page's view renders
them in the page's locale with `translate` / `render_message`.

Message ids, by prefix:
- `app.*`, `tab.*`, `accordion.*`, `label.*`, `button.*`, `info.*`: static page text. The page
  hands these to Gradio (`gr.I18n(**ui_translations())`), which picks the browser's
  language in the frontend. Gradio formats them with ICU MessageFormat, so they hold no
  `{`, `}` or `'` (see `ui_translations`).
- `state.*`, `status.*`, `progress.*`, `findings.*`, `chart.*`, `reason.*`, `alert.*`,
  `runs.*`, `doctor.*`: text the backend computes per run or per check (backend/view.py),
  with `{placeholders}` filled by `translate`.
- `diagnose.<rule>.cause` / `.fix`: every rule of backend/diagnose.py, by rule name (the
  rule keeps its log patterns; its words are here).
- `check.<message>.problem` / `.fix`: the findings of the config rules, the YAML import,
  LLaMA-Factory's own check, the multi-GPU plan, the resume refusals. A finding built with
  `Finding.of(key, rule, message=..., **params)` renders `check.<message or rule>.*` from
  its parameters in any locale.
  No English sentence is ever matched back: a finding built by hand from finished
  sentences (`params is None`) is shown as written.
- `field.*`: the field names the rules put into their messages ("Batch size"): a rule passes
  `field=field_noun(name)`, a `Message` of `field.<name>`, and a run's state as a `Message` of
  `state.<state>`. A parameter that is a `Message` is rendered in the reader's language; any
  other value is shown as given (no English word is ever looked back up in the catalogue).

What the OS or a parser says (an errno, a JSON decoder's message) is a message too:
`backend/i18n/errors.py` (`os-error.<ERRNO>`, `json-error.*`). tests/test_zh_no_english.py
renders every finding, doctor verdict, choice label and preview line in zh-CN and fails on
English words in them.

`pick_locale` chooses the locale from a switch on the page or the browser's
Accept-Language; `translate` falls back to English, then to the key itself.

This package imports neither gradio nor torch: the backend and the tests use it as is.
"""

from __future__ import annotations

import string
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any

import yaml

DEFAULT_LOCALE = "en"
LOCALES = ("en", "zh-CN")
# The prefixes of keys the page shows as static text (labels, buttons, titles).
UI_PREFIXES = ("app.", "tab.", "accordion.", "label.", "button.", "info.")


# --- the catalogues: one YAML file per locale ------------------------------------------------

LOCALES_DIR = Path(__file__).resolve().parent / "locales"


def load_locale_file(path: Path) -> dict[str, str]:
    """One locale's catalogue: a flat YAML mapping of message id -> text, in file order."""
    data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    if not isinstance(data, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in data.items()):
        raise ValueError(f"{path}: a locale file is a flat mapping of message id -> text")
    return data


@cache
def _load_catalogue() -> dict[str, dict[str, str]]:
    catalogue = {locale: load_locale_file(LOCALES_DIR / f"{locale}.yaml") for locale in LOCALES}
    catalogue["zh"] = catalogue["zh-CN"]  # a browser that says only "zh" gets Simplified Chinese too
    return catalogue


# Read once at import: every lookup is a dict access.
CATALOGUE: dict[str, dict[str, str]] = _load_catalogue()


# --- lookup -----------------------------------------------------------------------------------


class _KeepMissing(dict):
    """format_map values that leave an unknown placeholder as written instead of failing."""

    def __missing__(self, name: str) -> str:
        return "{" + name + "}"


def canonical_locale(tag: str | None) -> str | None:
    """"zh", "zh-cn", "zh_CN", "zh-Hans-CN", "zh-TW" -> "zh-CN"; "en-GB" -> "en"; else None."""
    if not tag:
        return None
    language = tag.strip().replace("_", "-").split("-")[0].lower()
    if language == "zh":
        return "zh-CN"  # the only Chinese catalogue; better than English for zh-TW readers too
    if language == "en":
        return "en"
    return None


def translate(key: str, locale: str | None = DEFAULT_LOCALE, **values: Any) -> str:
    """The text of `key` in `locale` (else English, else the key itself), placeholders filled."""
    return _fill(key, locale, values)


def _fill(key: str, locale: str | None, values: Mapping[str, Any]) -> str:
    """`translate` with the values as a mapping: a template may then name a placeholder
    `{key}` or `{locale}` (the YAML rules speak of keys) without clashing with the arguments."""
    canonical = canonical_locale(locale) or DEFAULT_LOCALE
    text = CATALOGUE[canonical].get(key)
    if text is None:
        text = CATALOGUE[DEFAULT_LOCALE].get(key, key)
    if not values:
        return text.replace("{{", "{").replace("}}", "}") if "{{" in text or "}}" in text else text
    try:
        return string.Formatter().vformat(text, (), _KeepMissing(values))
    except (ValueError, IndexError):  # a malformed template: show it rather than fail the page
        return text


def pick_locale(accept_language: str | None, override: str | None = None) -> str:
    """The locale to speak: the page's switch when set, else the browser's preference
    (an Accept-Language header, quality values honoured), else English."""
    chosen = canonical_locale(override) if override and override.lower() not in ("auto", "browser") else None
    if chosen:
        return chosen
    candidates: list[tuple[float, int, str]] = []
    for position, part in enumerate((accept_language or "").split(",")):
        tag, _, params = part.strip().partition(";")
        quality = 1.0
        for param in params.split(";"):
            name, _, value = param.strip().partition("=")
            if name.strip() == "q":
                try:
                    quality = float(value)
                except ValueError:
                    quality = 0.0
        if quality > 0 and tag.strip() not in ("", "*"):
            candidates.append((-quality, position, tag.strip()))
    for _, _, tag in sorted(candidates):
        locale = canonical_locale(tag)
        if locale:
            return locale
    return DEFAULT_LOCALE


def placeholders(text: str) -> set[str]:
    """The `{name}` fields of a template (with their format spec, so "{x:.0f}" != "{x}")."""
    return {f"{name}:{spec}" if spec else name for _, name, spec, _ in string.Formatter().parse(text) if name is not None}


def ui_translations() -> dict[str, dict[str, str]]:
    """The static page text for `gr.I18n(**ui_translations())`, one dict per locale."""
    return {locale: {k: v for k, v in texts.items() if k.startswith(UI_PREFIXES)} for locale, texts in CATALOGUE.items()}


# --- findings ---------------------------------------------------------------------------------


def render_message(key: str, params: Mapping[str, Any], locale: str | None) -> str:
    """A message id's text in `locale`, filled with `params` (a value that is a message itself,
    a field's noun, a run's state, a clause, is rendered in `locale` too)."""
    canonical = canonical_locale(locale) or DEFAULT_LOCALE
    values = {name: _param_text(name, value, canonical) for name, value in params.items()}
    return _fill(key, canonical, values)


def _param_text(name: str, value: Any, locale: str) -> Any:
    # A value that is itself a message (a clause built from its own id, a list of them) is
    # rendered in the same locale, so a sentence never mixes languages.
    render = getattr(value, "text", None)
    if callable(render):
        return render(locale)
    return value


class Message(str):
    """A message id and its values, for code that hands text on as a plain `str` (a return
    value, a state field): the string itself is the English rendering (command line, logs),
    and `text(locale)` renders it in the page's language."""

    key: str
    params: dict[str, Any]

    def __new__(cls, key: str, /, **params: Any) -> Message:  # a message may have a `{key}` placeholder
        message = super().__new__(cls, render_message(key, params, DEFAULT_LOCALE))
        message.key = key
        message.params = params
        return message

    def text(self, locale: str | None = DEFAULT_LOCALE) -> str:
        return render_message(self.key, self.params, locale)

    def __reduce__(self):  # a str subclass with its own __new__: pickled by id and values
        return (_message_from, (self.key, self.params))


def _message_from(key: str, params: dict[str, Any]) -> Message:
    return Message(key, **params)


class Joined(str):
    """Several messages (or texts passed through as written) joined by `separator`, as one
    message value: the string is the English rendering, `text(locale)` renders each part."""

    parts: tuple[Any, ...]
    separator: str

    def __new__(cls, parts: Any, separator: str = "; ") -> Joined:
        parts = tuple(parts)
        joined = super().__new__(cls, localized(separator, DEFAULT_LOCALE).join(localized(part, DEFAULT_LOCALE) for part in parts))
        joined.parts = parts
        joined.separator = separator  # a word ("and") is a Message too
        return joined

    def text(self, locale: str | None = DEFAULT_LOCALE) -> str:
        return localized(self.separator, locale).join(localized(part, locale) for part in self.parts)

    def __reduce__(self):
        return (Joined, (self.parts, self.separator))


def localized(text: object, locale: str | None) -> str:
    """`text` in `locale` when it is a `Message` (or anything with `text(locale)`), else as is."""
    render = getattr(text, "text", None)
    return render(locale) if callable(render) else str(text)


def translate_diagnosis(rule: str, cause: str, fix: str, locale: str) -> tuple[str, str]:
    """(cause, fix) of a diagnose.py rule in `locale`; as given when the rule is unknown."""
    canonical = canonical_locale(locale) or DEFAULT_LOCALE
    if canonical == DEFAULT_LOCALE or f"diagnose.{rule}.cause" not in CATALOGUE[canonical]:
        return cause, fix
    return translate(f"diagnose.{rule}.cause", canonical), translate(f"diagnose.{rule}.fix", canonical)


def check_rule_names(catalogue: Mapping[str, str] | None = None) -> set[str]:
    """The config rule names the catalogue has messages for."""
    keys = catalogue or CATALOGUE[DEFAULT_LOCALE]
    return {key.split(".")[1] for key in keys if key.startswith("check.")}


__all__ = [
    "CATALOGUE",
    "DEFAULT_LOCALE",
    "Joined",
    "LOCALES",
    "LOCALES_DIR",
    "Message",
    "canonical_locale",
    "check_rule_names",
    "load_locale_file",
    "localized",
    "pick_locale",
    "placeholders",
    "render_message",
    "translate",
    "translate_diagnosis",
    "ui_translations",
]
