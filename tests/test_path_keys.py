"""Keys of Other keys (an import, "Run this YAML as it is") that name a path: one that writes
stays inside the run, one that reads stays inside the data roots, the run and the model folder,
with no link out; the list is LLaMA-Factory's own catalogue, and a new path key fails here
until it is classified (backend/config/path_keys.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from backend.config import path_keys
from backend.config.other_keys import machine_cores
from backend.findings import translate_finding
from backend.llama_factory.keys import key_catalogue, shipped_catalogue
from backend.service import RocBoard, demo_form
from backend.service.pipeline import LlamaFactoryCheckCache

SECRET_LINE = "root-secret-line: do not show me"


@pytest.fixture
def roots(tmp_path):
    """A data root, a folder outside every root (with a file a user must never see through
    RocBoard), and the runs folder."""
    data, outside = tmp_path / "data", tmp_path / "outside"
    data.mkdir()
    outside.mkdir()
    (outside / "secret.yaml").write_text(SECRET_LINE + "\n")
    return data, outside


@pytest.fixture
def board(tmp_path, roots):
    data, _ = roots
    # LLaMA-Factory's own parser is not asked (its answer takes seconds): RocBoard's rules are.
    return RocBoard(tmp_path / "runs", export_dir=tmp_path / "exports", lf_cache=LlamaFactoryCheckCache(check=lambda args: []), data_roots=[data])


def yaml_text(**other) -> str:
    demo = demo_form()
    return yaml.safe_dump(
        {
            "model_name_or_path": demo["model_path"], "stage": "sft", "do_train": True, "finetuning_type": "lora",
            "template": demo["template"], "dataset_dir": demo["dataset_dir"], "dataset": demo["dataset"], "cutoff_len": 128,
            "max_steps": 2, "per_device_train_batch_size": 2, **other,
        }
    )  # fmt: skip


def refusals(findings) -> list[str]:
    return [f.message or f.rule for f in findings if f.severity == "problem"]


def assert_refused_with_nothing_made(board, text: str, rule: str, tmp_path: Path, before: set[Path]) -> None:
    """"Run this YAML as it is" refuses, names `rule`, and neither a run nor a file appears."""
    load, result = board.start_yaml(text, "cpu-demo", demo_form())
    assert result is None or not result.started
    assert rule in refusals(load.findings + (result.findings if result else []))
    assert board.store.list() == []
    runs_dir = board.store.root
    assert not [p for p in runs_dir.iterdir() if not p.name.startswith(".")], "a run was made"
    after = {p for p in tmp_path.rglob("*") if ".cache" not in p.parts}
    assert after == before, f"files appeared: {sorted(map(str, after - before))[:5]}"


# --- the catalogue: every path key classified -----------------------------------------------------


@pytest.mark.parametrize("catalogue", [shipped_catalogue(), key_catalogue()], ids=["shipped", "installed"])
def test_every_path_key_of_llamafactory_is_classified(catalogue) -> None:
    """A key LLaMA-Factory's catalogue shows as a path (text, and a name or help that says so)
    is in exactly one list; a new one in an upgrade fails here until it is placed."""
    lists = (path_keys.WRITES, path_keys.READS, path_keys.NOT_PATHS, path_keys.FORM_OR_OWNED)
    candidates = {spec.name for spec in catalogue if path_keys.path_like(spec.name, spec.kinds, spec.help)}
    unclassified = sorted(name for name in candidates if not any(name in listed for listed in lists))
    assert not unclassified, f"classify these path keys in backend/config/path_keys.py: {unclassified}"
    for name in candidates:
        assert sum(name in listed for listed in lists) == 1, f"{name} is in more than one list"
    stale = sorted(name for listed in lists for name in listed if name not in catalogue)
    assert not stale, f"no longer LLaMA-Factory keys: {stale}"


def test_the_keys_the_report_named_are_classified_as_the_trainer_uses_them() -> None:
    for name in ("tokenized_path", "cache_dir", "profiler_output_dir", "logging_dir", "export_dir"):
        assert path_keys.use_of(name) == "writes"
    for name in ("new_special_tokens_config", "deepspeed", "media_dir", "adapter_name_or_path"):
        assert path_keys.use_of(name) == "reads"
    assert path_keys.use_of("learning_rate") is None and path_keys.use_of("vllm_config") is None


def test_an_unclassified_path_like_key_is_held_to_the_read_rule() -> None:
    # What a newer LLaMA-Factory's unknown path key gets: the rule that lets a valid path through.
    assert path_keys.path_like("calibration_file", ("str",), "Where the calibration data is.")
    assert not path_keys.path_like("calibration_file", ("int",), "A count.")
    places = path_keys.ReadPlaces.of(["/nowhere"])
    assert path_keys.read_path_refusal("calibration_file", "/etc/passwd", places) is not None


# --- 1. keys that write ---------------------------------------------------------------------------

WRITES_OUTSIDE = [
    ("tokenized_path", "{outside}/tokenized"),
    ("cache_dir", "{outside}/hf-cache"),
    ("logging_dir", "{outside}/tb"),
    ("export_dir", "{outside}/export"),
    ("offload_folder", "{outside}/offload"),
    ("swanlab_logdir", "{outside}/swanlog"),
    ("tokenized_path", "../../tokenized"),
    ("cache_dir", "~/.cache/elsewhere"),
    ("tokenized_path", "tok/../../../x"),
]


@pytest.mark.hostile
@pytest.mark.parametrize(("name", "value"), WRITES_OUTSIDE)
def test_a_key_that_writes_outside_the_run_is_refused_and_nothing_is_made(board, roots, tmp_path, name, value) -> None:
    _, outside = roots
    before = {p for p in tmp_path.rglob("*") if ".cache" not in p.parts}
    text = yaml_text(**{name: value.format(outside=outside)})
    assert_refused_with_nothing_made(board, text, "path-key-writes-outside", tmp_path, before)


@pytest.mark.hostile
def test_the_profiler_writing_outside_the_run_is_refused(board, roots, tmp_path) -> None:
    _, outside = roots
    before = {p for p in tmp_path.rglob("*") if ".cache" not in p.parts}
    text = yaml_text(enable_torch_profiler=True, profiler_output_dir=str(outside / "traces"))
    assert_refused_with_nothing_made(board, text, "path-key-writes-outside", tmp_path, before)


@pytest.mark.hostile
def test_other_keys_of_the_form_and_the_import_tab_say_the_same(board, roots) -> None:
    _, outside = roots
    values = {**demo_form(), "other_keys": f"tokenized_path: {outside}/tok\n"}
    assert "path-key-writes-outside" in refusals(board.preview(values, ask_llamafactory=False).findings)
    imported = board.pipeline.import_yaml(yaml_text(tokenized_path=f"{outside}/tok"), "cpu-demo")
    finding = next(f for f in imported.findings if f.rule == "path-key-writes-outside")
    assert finding.params["name"] == "tokenized_path" and "tokenized" in finding.fix
    chinese = translate_finding(finding, "zh-CN")
    assert "tokenized_path" in chinese.problem and "运行" in chinese.problem


def test_a_key_that_writes_inside_the_run_is_accepted(board) -> None:
    values = {**demo_form(), "other_keys": "tokenized_path: tokenized\ncache_dir: hf-cache\nlogging_dir: output/tb\n"}
    found = board.preview(values, ask_llamafactory=False).findings
    assert not [f for f in found if f.key == "other_keys"], [f.problem for f in found]


# --- 2. keys that read ----------------------------------------------------------------------------


@pytest.mark.hostile
@pytest.mark.parametrize(
    ("name", "value", "rule"),
    [
        ("new_special_tokens_config", "{outside}/secret.yaml", "path-key-reads-outside"),
        ("new_special_tokens_config", "/etc/passwd", "path-key-reads-outside"),
        ("new_special_tokens_config", "../../../../etc/passwd", "path-key-reads-outside"),
        ("new_special_tokens_config", "{data}/link.yaml", "path-key-reads-link-outside"),
        ("media_dir", "{outside}", "path-key-reads-outside"),
        ("adapter_name_or_path", "{data}/adapter,{outside}/adapter", "path-key-reads-outside"),
        ("ref_model", "~/../../etc", "path-key-reads-outside"),
        ("fsdp_config", "/etc/hostname", "path-key-reads-outside"),
    ],
)
def test_a_key_that_reads_outside_the_allowed_places_is_refused_without_quoting_the_file(board, roots, tmp_path, name, value, rule) -> None:
    data, outside = roots
    (data / "link.yaml").symlink_to(outside / "secret.yaml")
    before = {p for p in tmp_path.rglob("*") if ".cache" not in p.parts}
    text = yaml_text(**{name: value.format(data=data, outside=outside)})
    assert_refused_with_nothing_made(board, text, rule, tmp_path, before)
    imported = board.pipeline.import_yaml(text, "cpu-demo")
    words = " ".join(f.problem + " " + f.fix for f in imported.findings)
    assert SECRET_LINE not in words and "root:" not in words


@pytest.mark.hostile
def test_a_deepspeed_path_outside_says_nothing_of_whether_the_file_exists(board, roots) -> None:
    """`deepspeed:` answered "no such file" or "not JSON" for any path: an oracle of the disk."""
    _, outside = roots
    answers = []
    for path in (outside / "secret.yaml", outside / "no-such.json", Path("/etc/passwd")):
        values = {**demo_form(), "preset": "mi300x", "other_keys": f"deepspeed: {path}\n"}
        found = [f for f in board.preview(values, ask_llamafactory=False).findings if f.key == "other_keys" and f.severity == "problem"]
        answers.append([(f.message or f.rule) for f in found])
    assert answers == [["path-key-reads-outside"]] * 3


def test_a_key_that_reads_inside_the_allowed_places_is_accepted(board, roots) -> None:
    data, _ = roots
    (data / "tokens.yaml").write_text("<think>: start of reasoning\n")
    model = demo_form()["model_path"]
    other = (
        f"new_special_tokens_config: {data}/tokens.yaml\n"
        "media_dir: images\n"  # relative: inside the run
        f"ref_model: {model}\n"  # the run's own model folder
        "adapter_name_or_path: org/some-adapter\n"  # a hub id
    )
    found = board.preview({**demo_form(), "other_keys": other}, ask_llamafactory=False).findings
    assert not [f for f in found if f.key == "other_keys" and f.rule.startswith("path-key")], [f.problem for f in found]


# --- bounded numbers ------------------------------------------------------------------------------


@pytest.mark.hostile
@pytest.mark.parametrize("name", ["preprocessing_num_workers", "dataloader_num_workers"])
@pytest.mark.parametrize("value", [100_000, -1])
def test_worker_counts_beyond_the_machines_cores_are_refused(board, name, value) -> None:
    found = board.preview({**demo_form(), "other_keys": f"{name}: {value}\n"}, ask_llamafactory=False).findings
    assert "other-key-workers" in refusals(found)
    assert str(machine_cores()) in next(f.fix for f in found if f.rule == "other-key-workers")


def test_worker_counts_above_the_cores_but_within_any_machine_are_a_warning(board) -> None:
    """LLaMA-Factory's own examples ask for 16 workers on any machine: slower here, not wrong."""
    cores = machine_cores()
    found = board.preview({**demo_form(), "other_keys": f"preprocessing_num_workers: {cores + 1}\n"}, ask_llamafactory=False).findings
    assert "other-key-workers" not in refusals(found)
    assert [f.message for f in found if f.rule == "other-key-workers"] == ["other-key-workers-more-than-cores"]


def test_worker_counts_within_the_machines_cores_are_accepted(board) -> None:
    cores = machine_cores()
    found = board.preview({**demo_form(), "other_keys": f"preprocessing_num_workers: {cores}\ndataloader_num_workers: 0\n"}, ask_llamafactory=False).findings
    assert "other-key-workers" not in refusals(found)


def test_machine_cores_is_what_this_process_may_run_on() -> None:
    assert machine_cores() == len(os.sched_getaffinity(0))
