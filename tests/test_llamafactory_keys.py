"""The key catalogue (backend/llama_factory/keys.py): every LLaMA-Factory key with its type,
default, choices and help, built in a helper process, cached per installed version, shipped
as a fallback, and used to check a value a user typed or imported."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from backend.llama_factory import keys
from backend.llama_factory.check import NAMES_FILE, static_names
from backend.llama_factory.keys import (
    MAX_LIST_ITEMS,
    MAX_TEXT_CHARS,
    SHIPPED_FILE,
    KeyCatalogue,
    cache_file,
    installed_versions,
    key_catalogue,
    refresh_catalogue,
    shipped_catalogue,
)

ROOT = Path(__file__).resolve().parent.parent
REGENERATE = "regenerate: python -m backend.llama_factory.keys_worker --catalogue > backend/llama_factory/llamafactory_keys.json"


@pytest.fixture(scope="module")
def fresh(tmp_path_factory: pytest.TempPathFactory, starts_lf_helper) -> tuple[KeyCatalogue, Path]:
    """One helper run for the module: the installed package's catalogue, cached in a new
    directory."""
    cache_dir = tmp_path_factory.mktemp("cache")
    catalogue = refresh_catalogue(cache_dir, force=True, timeout_s=280)
    assert catalogue.error is None, catalogue.error
    assert catalogue.source == "helper"
    return catalogue, cache_dir


@pytest.fixture
def no_helper(monkeypatch: pytest.MonkeyPatch) -> None:
    """The helper's command cannot run: any call that needs it falls back."""
    monkeypatch.setattr(keys, "helper_command", lambda: [str(ROOT / "no-such-python"), "no-such-worker.py"])


def test_the_shipped_catalogue_matches_the_installed_llamafactory(fresh: tuple[KeyCatalogue, Path]) -> None:
    catalogue, _ = fresh
    shipped = json.loads(SHIPPED_FILE.read_text(encoding="utf-8"))
    assert catalogue.versions == shipped["versions"], REGENERATE
    assert catalogue.as_dict() == shipped, REGENERATE
    assert shipped_catalogue().as_dict() == shipped  # what the web side reads is the whole file


def test_the_catalogue_covers_the_static_names_and_the_five_dataclasses(fresh: tuple[KeyCatalogue, Path]) -> None:
    catalogue, _ = fresh
    assert catalogue.names == static_names().keys == frozenset(json.loads(NAMES_FILE.read_text())["keys"])
    assert catalogue.dataclasses == ("ModelArguments", "DataArguments", "TrainingArguments", "FinetuningArguments", "GeneratingArguments")
    assert {spec.source for spec in catalogue} == set(catalogue.dataclasses)
    assert len(catalogue) == len(catalogue.names) > 300


def test_the_helper_reports_its_time_and_writes_the_cache(fresh: tuple[KeyCatalogue, Path]) -> None:
    catalogue, cache_dir = fresh
    assert catalogue.path == cache_file(cache_dir) and catalogue.path.is_file()
    assert catalogue.seconds is not None and catalogue.import_seconds is not None and catalogue.build_seconds is not None
    assert [p.name for p in cache_dir.iterdir()] == [catalogue.path.name]  # no temporary file left
    versions = installed_versions()
    assert f"llamafactory-{versions['llamafactory']}" in catalogue.path.name
    assert f"transformers-{versions['transformers']}" in catalogue.path.name


@pytest.mark.parametrize(
    ("name", "type_", "kinds", "optional", "source"),
    [
        ("pref_beta", "float", ("float",), False, "FinetuningArguments"),
        ("pref_loss", "str", (), False, "FinetuningArguments"),
        ("deepspeed", "optional[dict|str]", ("dict", "str"), True, "TrainingArguments"),
        ("tokenized_path", "optional[str]", ("str",), True, "DataArguments"),
        ("double_quantization", "bool", ("bool",), False, "ModelArguments"),
        ("ray_num_workers", "int", ("int",), False, "TrainingArguments"),
        ("stage", "str", (), False, "FinetuningArguments"),
        ("image_max_pixels", "int", ("int",), False, "ModelArguments"),
    ],
)
def test_keys_the_form_lacks_are_known_with_their_types(name: str, type_: str, kinds: tuple[str, ...], optional: bool, source: str) -> None:
    catalogue = shipped_catalogue()
    spec = catalogue.get(name)
    assert name in catalogue and spec is not None
    assert (spec.type, spec.kinds, spec.optional, spec.source) == (type_, kinds, optional, source)
    assert spec.help and len(spec.help) <= 300
    assert spec.annotation


def test_choices_defaults_and_annotations() -> None:
    catalogue = shipped_catalogue()
    assert "sigmoid" in catalogue.get("pref_loss").choices
    assert catalogue.get("stage").choices == ("pt", "sft", "rm", "ppo", "dpo", "kto")
    assert catalogue.get("pref_beta").default == 0.1 and catalogue.get("pref_beta").default_known
    assert catalogue.get("deepspeed").annotation == "dict | str | None"
    # An Enum (with `| str`): its values are the choices, its default is the plain value.
    assert "cosine" in catalogue.get("lr_scheduler_type").choices and catalogue.get("lr_scheduler_type").default == "linear"
    assert catalogue.get("flash_attn").default == "auto" and "fa2" in catalogue.get("flash_attn").choices
    # A default from a factory is not guessed.
    factory = catalogue.get("include_for_metrics")
    assert (factory.default, factory.default_kind, factory.default_known) == (None, "factory", False)
    assert catalogue.get("no_such_key") is None and "no_such_key" not in catalogue and 3 not in catalogue


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("pref_beta", "abc", "other-key-wrong-type"),
        ("ray_num_workers", 3.5, "other-key-wrong-type"),
        ("ray_num_workers", True, "other-key-wrong-type"),  # YAML's yes/no are not numbers
        ("pref_loss", "hinge2", "other-key-not-choice"),
        ("stage", "grpo", "other-key-not-choice"),
        ("double_quantization", "yes", "other-key-wrong-type"),
        ("deepspeed", 3, "other-key-wrong-type"),
        ("pref_beta", None, "other-key-null"),
        ("report_to", ["wandb", 3], "other-key-wrong-item"),
        ("fsdp", ["full_shard", "no_such_option"], "other-key-wrong-item"),
        ("label_names", "labels", "other-key-wrong-type"),
    ],
)
def test_check_value_refuses_a_value_of_the_wrong_kind(name: str, value: Any, message: str) -> None:
    finding = shipped_catalogue().check_value(name, value)
    assert finding is not None
    assert (finding.key, finding.rule, finding.message, finding.severity) == (name, "other-key-type", message, "problem")
    assert name in finding.problem and finding.fix
    chinese_problem, chinese_fix = finding.text("zh-CN")
    assert name in chinese_problem and chinese_problem != finding.problem and chinese_fix != finding.fix


def test_check_value_says_what_the_key_takes() -> None:
    catalogue = shipped_catalogue()
    assert catalogue.check_value("pref_beta", "abc").problem == '`pref_beta` must be a number; it is "abc".'
    assert "whole number" in catalogue.check_value("ray_num_workers", 3.5).problem
    assert "sigmoid" in catalogue.check_value("pref_loss", "hinge2").problem
    assert "Item 2" in catalogue.check_value("report_to", ["wandb", 3]).problem


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("pref_beta", 1),  # an int for a float key
        ("pref_beta", 0.05),
        ("ray_num_workers", 4),
        ("pref_loss", "sigmoid"),
        ("deepspeed", None),
        ("deepspeed", "/configs/ds_z3.json"),
        ("deepspeed", {"zero_optimization": {"stage": 2}}),
        ("tokenized_path", "/data/tokenized"),
        ("double_quantization", False),
        ("image_max_pixels", 262144),
        ("lr_scheduler_type", "cosine"),
        ("report_to", "none"),
        ("report_to", ["tensorboard"]),
        ("fsdp", "full_shard auto_wrap"),
        ("generation_config", {"anything": "goes"}),  # a class of its own: not checked
        ("no_such_key", object()),  # unknown keys are reported elsewhere
    ],
)
def test_check_value_accepts_what_llamafactory_takes(name: str, value: Any) -> None:
    assert shipped_catalogue().check_value(name, value) is None


@pytest.mark.hostile
@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("tokenized_path", "x" * (MAX_TEXT_CHARS + 1), "other-key-too-long"),
        ("label_names", ["labels"] * (MAX_LIST_ITEMS + 1), "other-key-too-many-items"),
        ("deepspeed", {f"k{i}": i for i in range(MAX_LIST_ITEMS + 1)}, "other-key-too-many-items"),
    ],
)
def test_an_oversized_value_is_refused(name: str, value: Any, message: str) -> None:
    finding = shipped_catalogue().check_value(name, value)
    assert finding is not None and finding.message == message
    assert len(finding.problem) < 200


def test_the_cache_is_written_once_and_reused(fresh: tuple[KeyCatalogue, Path], no_helper: None) -> None:
    _, cache_dir = fresh
    path = cache_file(cache_dir)
    before = path.stat().st_mtime_ns
    again = refresh_catalogue(cache_dir)  # the helper cannot run: the cache answers
    assert (again.source, again.error, again.path) == ("cache", None, path)
    assert path.stat().st_mtime_ns == before
    read = key_catalogue(cache_dir)
    assert read.source == "cache" and read.as_dict() == again.as_dict()


def test_without_a_cache_the_shipped_catalogue_answers_and_nothing_blocks(tmp_path: Path, no_helper: None) -> None:
    assert key_catalogue(tmp_path / "empty").source == "shipped"
    failed = refresh_catalogue(tmp_path / "empty")
    assert failed.source == "shipped" and failed.error  # why, for the log
    assert not cache_file(tmp_path / "empty").exists()


def test_a_helper_that_hangs_is_stopped_at_the_timeout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(keys, "helper_command", lambda: [sys.executable, "-c", "import time; time.sleep(30)"])
    answer = refresh_catalogue(tmp_path, timeout_s=0.5)
    assert answer.source == "shipped" and "timeout" in answer.error
    assert list(tmp_path.iterdir()) == []


@pytest.mark.hostile
@pytest.mark.parametrize(
    "text",
    [
        "{ not json",
        "",
        "[]",
        '{"format": 1, "versions": {}, "keys": []}',
        '{"format": 99, "versions": {}, "keys": [{"name": "x"}]}',
        "\x00" * 100,
    ],
)
def test_a_corrupt_cache_falls_back_to_the_shipped_catalogue(tmp_path: Path, no_helper: None, text: str) -> None:
    path = cache_file(tmp_path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    assert key_catalogue(tmp_path).source == "shipped"
    assert refresh_catalogue(tmp_path).source == "shipped"


@pytest.mark.hostile
def test_a_cache_with_a_bad_entry_or_other_versions_is_not_used(tmp_path: Path) -> None:
    data = shipped_catalogue().as_dict()
    data["versions"] = installed_versions()
    bad = json.loads(json.dumps(data))
    bad["keys"][0]["kinds"] = ["complex"]
    path = cache_file(tmp_path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(bad), encoding="utf-8")
    assert key_catalogue(tmp_path).source == "shipped"
    other = dict(data, versions={"llamafactory": "0.0.1", "transformers": "1.0"})
    path.write_text(json.dumps(other), encoding="utf-8")
    assert key_catalogue(tmp_path).source == "shipped"
    path.write_text(json.dumps(data), encoding="utf-8")  # a good one is read
    assert key_catalogue(tmp_path).source == "cache"


def test_a_link_in_the_caches_place_is_not_followed(tmp_path: Path) -> None:
    data = dict(shipped_catalogue().as_dict(), versions=installed_versions())
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_text(json.dumps(data), encoding="utf-8")
    path = cache_file(tmp_path / "cache")
    path.parent.mkdir(parents=True)
    path.symlink_to(elsewhere)
    assert key_catalogue(tmp_path / "cache").source == "shipped"


def test_the_catalogue_is_read_without_importing_llamafactory() -> None:
    script = (
        "import json, sys\n"
        "from backend.llama_factory.keys import key_catalogue\n"
        "c = key_catalogue()\n"
        "assert c.check_value('pref_beta', 'abc') is not None\n"
        "print(json.dumps(sorted(m for m in ('torch', 'transformers', 'llamafactory') if m in sys.modules)))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == []
