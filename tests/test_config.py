import yaml

from backend.config import FORM_DEFAULTS, parse_form, to_form, to_llamafactory_args, to_yaml


def form(**changes):
    values = dict(FORM_DEFAULTS, model_path="/models/m", dataset_dir="/data", dataset="a, b", run_name="r1")
    values.update(changes)
    return values


def test_form_to_yaml_has_the_keys_llamafactory_reads():
    config, findings = parse_form(form(learning_rate="5e-5", max_steps=30, precision="bf16"))
    assert findings == []
    args = yaml.safe_load(to_yaml(config, "/runs/x/output"))
    assert args["model_name_or_path"] == "/models/m"
    assert args["dataset"] == "a,b"
    assert args["learning_rate"] == 5e-5 and isinstance(args["learning_rate"], float)
    assert args["max_steps"] == 30
    assert args["bf16"] is True and args["fp16"] is False
    assert args["finetuning_type"] == "lora" and args["lora_rank"] == 8
    assert args["output_dir"] == "/runs/x/output"
    assert args["stage"] == "sft" and args["do_train"] is True
    assert "use_cpu" not in args
    assert args["include_num_input_tokens_seen"] is True  # tokens/s on the page
    assert "disable_gradient_checkpointing" not in args


def test_cpu_and_no_checkpointing_are_written():
    config, _ = parse_form(form(gradient_checkpointing=False, precision="fp32"), use_cpu=True)
    args = to_llamafactory_args(config, "out")
    assert args["use_cpu"] is True
    assert args["disable_gradient_checkpointing"] is True
    assert args["bf16"] is False and args["fp16"] is False


def test_max_steps_zero_leaves_epochs_in_charge():
    config, _ = parse_form(form(max_steps=0, num_train_epochs=2))
    args = to_llamafactory_args(config, "out")
    assert "max_steps" not in args and args["num_train_epochs"] == 2.0


def test_bad_numbers_become_findings_naming_the_field():
    _, findings = parse_form(form(learning_rate="abc", batch_size="2.5", cutoff_len=None, lora_rank=float("nan")))
    keys = {f.key for f in findings}
    assert keys == {"learning_rate", "batch_size", "cutoff_len", "lora_rank"}
    assert all(f.fix for f in findings)


def test_quantization_is_typed():
    config, findings = parse_form(form(quantization_bit="4"))
    assert findings == [] and config.method.quantization_bit == 4
    assert to_llamafactory_args(config, "o")["quantization_bit"] == 4
    _, findings = parse_form(form(quantization_bit="3"))
    assert [f.key for f in findings] == ["quantization_bit"]


def test_to_form_round_trips():
    config, _ = parse_form(form(learning_rate="0.0002", precision="fp16", max_steps=12))
    again, findings = parse_form(to_form(config))
    assert findings == [] and again == config
