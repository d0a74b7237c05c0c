"""Other keys: every LLaMA-Factory key the form has no field for is kept (an import), checked
(against LLaMA-Factory's own list of keys) and written to the run's YAML; a DeepSpeed file
named there is read, checked, shown and copied into the run. And "Run this YAML as it is"."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from backend.config import parse_form, schema, to_llamafactory_args
from backend.config.other_keys import USER_DEEPSPEED_FILE, parse_other_keys, read_deepspeed_file
from backend.config.path_keys import ReadPlaces
from backend.config.yaml_import import import_yaml
from backend.service import RocBoard, demo_form
from backend.service.pipeline import LlamaFactoryCheckCache
from tests.tiers import starts

# Keys LLaMA-Factory 0.9.5's own training examples use that the form has no field for
# (preference-loss details, tokenized data, QLoRA's double quantization, Ray, vision), written
# for this test, not copied.
KEYS_THE_FORM_LACKS = {
    "simpo_gamma": 0.5,
    "kto_chosen_weight": 1.5,
    "tokenized_path": "tokenized",  # inside the run: a path outside is refused (tests/test_path_keys.py)
    "double_quantization": True,
    "ray_num_workers": 2,
    "image_max_pixels": 262144,
    "freeze_vision_tower": True,
    "save_total_limit": 2,
}


@pytest.fixture
def board(tmp_path):
    return RocBoard(tmp_path / "runs", export_dir=tmp_path / "exports", lf_cache=LlamaFactoryCheckCache(check=lambda args: []), data_roots=[tmp_path])


def form(**changes):
    return {**demo_form(), **changes}


@pytest.mark.parametrize(
    ("text", "rule", "words"),
    [
        ("lerning_rate: 1e-4\n", "other-key-unknown", "learning_rate"),
        ("no_such_key_at_all_xyz: 1\n", "other-key-unknown", "no_such_key_at_all_xyz"),
        ("output_dir: /tmp/elsewhere\n", "other-key-owned", "output_dir"),
        ("learning_rate: 3\n", "other-key-in-form", "Learning rate"),
        ("pref_beta: 0.2\n", "other-key-in-form", "pref_beta"),
        ("- a\n- b\n", "other-keys-not-mapping", "key: value"),
        ("a: [1,\n", "other-keys-not-yaml", "line"),
        ("".join(f"k{i}: {i}\n" for i in range(schema.OTHER_KEYS_MAX + 1)), "other-keys-too-many", str(schema.OTHER_KEYS_MAX)),
    ],
)
@pytest.mark.hostile
def test_a_bad_other_key_is_refused_with_its_reason_in_both_languages(text, rule, words) -> None:
    pairs, findings = parse_other_keys(text)
    assert [f.rule for f in findings] == [rule]
    english = findings[0].problem + " " + findings[0].fix
    assert words in english
    chinese = " ".join(findings[0].text("zh-CN"))
    assert any("\u4e00" <= c <= "\u9fff" for c in chinese)
    assert pairs == ()


def test_good_keys_pass_bad_ones_are_named_and_a_start_is_refused() -> None:
    config, findings = parse_form(form(other_keys="simpo_gamma: 0.2\nlerning_rate: 1\nsave_total_limit: 2\n"))
    assert [f.rule for f in findings] == ["other-key-unknown"]
    assert dict(config.value("other_keys")) == {"simpo_gamma": 0.2, "save_total_limit": 2}
    args = to_llamafactory_args(config, "/out")
    assert args["simpo_gamma"] == 0.2 and args["save_total_limit"] == 2 and args["output_dir"] == "/out"


def test_other_keys_may_set_rocboards_defaults_but_never_where_the_run_writes() -> None:
    # report_to is a field of its own (the experiment tracker): Other keys set the rest.
    config, findings = parse_form(form(report_to="tensorboard", other_keys="plot_loss: false\n"))
    assert findings == []
    args = to_llamafactory_args(config, "/out")
    assert args["report_to"] == "tensorboard" and args["plot_loss"] is False
    _, findings = parse_form(form(other_keys="report_to: tensorboard\n"))
    assert [f.rule for f in findings] == ["other-key-in-form"]


def test_an_import_keeps_every_key_llamafactory_knows(board) -> None:
    text = yaml.safe_dump({"model_name_or_path": demo_form()["model_path"], "stage": "sft", "do_train": True, "template": "llama3", "dataset": "demo", "fp16": False, **KEYS_THE_FORM_LACKS})
    result = import_yaml(text)
    kept = yaml.safe_load(result.form_values["other_keys"])
    assert kept == KEYS_THE_FORM_LACKS
    assert not [f for f in result.findings if f.key in KEYS_THE_FORM_LACKS], "a valid key was reported"
    load = board.load_into_form(text, "cpu-demo", form())
    config, findings = parse_form(load.values)
    assert not [f for f in findings if f.key == "other_keys"]
    args = to_llamafactory_args(config, "/out")
    for key, value in KEYS_THE_FORM_LACKS.items():
        assert args[key] == value, f"{key} was dropped on the way to the run's YAML"


def test_export_then_import_keeps_other_keys_empty_for_rocboards_own_defaults(board) -> None:
    path, _ = board.export(form())
    assert "other_keys" not in import_yaml(path.read_text()).form_values


# --- DeepSpeed files -----------------------------------------------------------------------------


def deepspeed_json(tmp_path: Path, **zero) -> Path:
    path = tmp_path / "ds_z3.json"
    path.write_text(json.dumps({"train_batch_size": "auto", "zero_optimization": {"stage": 3, **zero}}))
    return path


def test_a_deepspeed_file_is_read_checked_shown_and_copied_into_the_run(board, tmp_path) -> None:
    path = deepspeed_json(tmp_path, offload_optimizer={"device": "cpu"})
    found, findings = read_deepspeed_file(str(path), ReadPlaces.of([tmp_path]))
    assert findings == [] and (found.stage, found.offload_optimizer, found.offload_param) == (3, "cpu", "none")
    values = form(preset="mi300x", other_keys=f"deepspeed: {path}\nsimpo_gamma: 0.1\n")
    preview = board.preview(values, ask_llamafactory=False)
    assert "ZeRO stage 3" in preview.command and str(path) in preview.command
    assert yaml.safe_load(preview.yaml_text)["deepspeed"] == USER_DEEPSPEED_FILE
    assert not [f for f in preview.findings if f.key == "other_keys"]
    config, _, _ = board.pipeline.parse(values)
    assert board.run_manager._user_deepspeed_file(config) == {USER_DEEPSPEED_FILE: path.read_text()}


@pytest.mark.hostile
@pytest.mark.parametrize(
    ("content", "value", "message"),
    [
        (None, "ds.json", "deepspeed-file-relative"),
        (None, "{tmp}/no/such/ds.json", "deepspeed-file-bad"),
        # Outside the data roots: refused before it is opened (whether it exists is never told).
        (None, "/no/such/ds.json", "path-key-reads-outside"),
        (None, "/etc/passwd", "path-key-reads-outside"),
        ("{not json", None, "deepspeed-file-not-json"),
        ("[1, 2]", None, "deepspeed-file-not-json"),
        ('{"zero_optimization": {"stage": 7}}', None, "deepspeed-file-stage"),
        ('{"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "gpu"}}}', None, "deepspeed-file-offload"),
        ("x" * ((1 << 20) + 10), None, "deepspeed-file-bad"),
    ],
)
def test_an_unusable_deepspeed_file_is_a_problem_naming_why(tmp_path, content, value, message) -> None:
    if content is not None:
        path = tmp_path / "ds.json"
        path.write_text(content)
        value = str(path)
    found, findings = read_deepspeed_file(value.replace("{tmp}", str(tmp_path)), ReadPlaces.of([tmp_path]))
    assert found is None and [f.message or f.rule for f in findings] == [message]
    assert findings[0].severity == "problem"


@pytest.mark.hostile
def test_a_fifo_named_as_the_deepspeed_file_does_not_hang_the_check(tmp_path) -> None:
    import os

    fifo = tmp_path / "ds.fifo"
    os.mkfifo(fifo)
    found, findings = read_deepspeed_file(str(fifo), ReadPlaces.of([tmp_path]))
    assert found is None and findings and "regular" in findings[0].problem


def test_deepspeed_on_the_cpu_or_beside_the_plans_zero_is_refused(board, tmp_path) -> None:
    path = deepspeed_json(tmp_path)
    on_cpu = board.preview(form(other_keys=f"deepspeed: {path}\n"), ask_llamafactory=False).findings
    assert "deepspeed-on-cpu" in [f.rule for f in on_cpu]
    twice = board.preview(form(preset="mi300x", dist_nproc=2, dist_gpus="0,1", dist_strategy="zero2", other_keys=f"deepspeed: {path}\n"), ask_llamafactory=False).findings
    assert "deepspeed-twice" in [f.rule for f in twice]


# --- run this YAML as it is ----------------------------------------------------------------------


@pytest.mark.timeout(600)
@starts("lf_helper", "trainer")
def test_a_yaml_with_keys_the_form_lacks_runs_as_it_is(tmp_path, demo_assets) -> None:
    """A real LLaMA-Factory run of the demo model from a YAML with keys the form lacks: every
    one of them is in the run's config.yaml, and the trainer finishes."""
    from tests.harness import wait_until

    board = RocBoard(tmp_path / "runs", export_dir=tmp_path / "exports")
    demo = demo_form()
    own = {"save_total_limit": 1, "dataloader_num_workers": 0, "neftune_noise_alpha": 5.0, "max_grad_norm": 0.5}
    text = yaml.safe_dump(
        {
            "model_name_or_path": demo["model_path"], "stage": "sft", "do_train": True, "finetuning_type": "lora",
            "template": demo["template"], "dataset_dir": demo["dataset_dir"], "dataset": demo["dataset"], "cutoff_len": 128,
            "max_steps": 2, "logging_steps": 1, "per_device_train_batch_size": 2, "learning_rate": 0.01, **own,
        }
    )
    load, result = board.start_yaml(text, "cpu-demo", demo)
    assert result is not None and result.started, [f.problem for f in load.findings + (result.findings if result else [])]
    run_dir = board.store.run_dir(result.run.id)
    written = yaml.safe_load((run_dir / "config.yaml").read_text())
    for key, value in own.items():
        assert written[key] == value, f"{key} did not reach the run's YAML"
    state = wait_until(lambda: (s := board.store.read(result.run.id)).active is False and s, 420, what="the run to end")
    assert state.state == "finished", (run_dir / "train.log").read_text()[-3000:]


def test_a_yaml_with_a_problem_does_not_start(board) -> None:
    load, result = board.start_yaml("model_name_or_path: /m\nlerning_rate: 1\n", "cpu-demo", form())
    assert result is None and any(f.severity == "problem" for f in load.findings)
    assert board.runs() == []


def test_values_are_typed_as_llamafactory_types_them_and_checked_against_its_key_types() -> None:
    pairs, findings = parse_other_keys("simpo_gamma: 1e-4\nray_num_workers: 2\n")
    assert findings == [] and dict(pairs) == {"simpo_gamma": 1e-4, "ray_num_workers": 2}
    pairs, findings = parse_other_keys("simpo_gamma: abc\nray_num_workers: 3.5\nsave_strategy: sometimes\n")
    assert pairs == ()
    assert sorted((f.key, f.rule) for f in findings) == [("other_keys", "other-key-type")] * 3
    assert all(any(name in f.problem for name in ("simpo_gamma", "ray_num_workers", "save_strategy")) for f in findings)


# One config of our own per kind of training YAML LLaMA-Factory 0.9.5 ships in examples/
# (train_lora, train_qlora, train_full: sft with eval, pre-training, reward model, DPO, KTO,
# QLoRA, vision-language, Ray, DeepSpeed), with the keys those files use.
COMMON = {
    "model_name_or_path": "/models/tiny", "trust_remote_code": True, "finetuning_type": "lora", "lora_rank": 8,
    "lora_target": "all", "dataset_dir": "/data", "template": "llama3", "cutoff_len": 2048, "max_samples": 1000,
    "overwrite_cache": True, "preprocessing_num_workers": 16, "dataloader_num_workers": 4, "output_dir": "saves/x",
    "logging_steps": 10, "save_steps": 500, "plot_loss": True, "overwrite_output_dir": True, "save_only_model": False,
    "report_to": "none", "per_device_train_batch_size": 1, "gradient_accumulation_steps": 8, "learning_rate": 1.0e-4,
    "num_train_epochs": 3.0, "lr_scheduler_type": "cosine", "warmup_ratio": 0.1, "bf16": True, "ddp_timeout": 180000000,
    "resume_from_checkpoint": None,
}
EXAMPLE_KINDS = {
    "sft-with-eval": {"stage": "sft", "do_train": True, "dataset": "identity", "val_size": 0.1, "per_device_eval_batch_size": 1, "eval_strategy": "steps", "eval_steps": 500},
    "pt": {"stage": "pt", "do_train": True, "dataset": "c4_demo"},
    "rm": {"stage": "rm", "do_train": True, "dataset": "dpo_en_demo"},
    "dpo": {"stage": "dpo", "do_train": True, "dataset": "dpo_en_demo", "pref_beta": 0.1, "pref_loss": "sigmoid"},
    "kto": {"stage": "kto", "do_train": True, "dataset": "kto_en_demo", "pref_beta": 0.1},
    "qlora": {"stage": "sft", "do_train": True, "dataset": "identity", "quantization_bit": 4, "quantization_method": "bnb", "double_quantization": False},
    "vision": {
        "stage": "sft", "do_train": True, "dataset": "mllm_demo", "image_max_pixels": 262144, "video_max_pixels": 16384,
        "freeze_vision_tower": True, "freeze_multi_modal_projector": True, "freeze_language_model": False,
    },
    # 0.9.5's RayArguments has these two (ray_run_name, placement_strategy … came later: unknown to it).
    "ray": {"stage": "sft", "do_train": True, "dataset": "identity", "ray_num_workers": 4, "ray_init_kwargs": {"runtime_env": {"env_vars": {"HF_HUB_OFFLINE": "1"}}}},
    "tokenized": {"stage": "sft", "do_train": True, "dataset": "identity", "tokenized_path": "saves/tokenized"},
    "deepspeed": {"stage": "sft", "do_train": True, "dataset": "identity", "deepspeed": "/abs/ds_z3_config.json"},
}


@pytest.mark.parametrize("kind", EXAMPLE_KINDS)
def test_no_valid_key_of_an_example_kind_is_reported_unknown_or_dropped(kind) -> None:
    args = {**COMMON, **EXAMPLE_KINDS[kind]}
    result = import_yaml(yaml.safe_dump(args, sort_keys=False))
    assert not [f for f in result.findings if f.rule == "yaml-unknown-key"], "a valid key was reported unknown"
    from backend.config.yaml_import import form_values_from_args

    in_form = set(schema.yaml_keys_in_form())
    kept = yaml.safe_load(result.form_values.get("other_keys") or "") or {}
    own = set(schema.ROCBOARD_OWNED_KEYS) | {key for key, value in schema.ROCBOARD_DEFAULTS.items() if args.get(key) == value}
    assert form_values_from_args(args)  # the form reads its keys
    lost = [key for key in args if key not in in_form and key not in kept and key not in own]
    assert lost == [], f"{kind}: dropped {lost}"
