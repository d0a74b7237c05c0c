"""The shipped hardware presets (presets/*.yaml) and the loader's handling of bad files."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from backend.config import FORM_DEFAULTS, FORM_FIELDS, parse_form
from backend.config.checks import check_config
from backend.config.export import ENV_NAME, export_shell
from backend.config.presets import PRESETS_DIR, load_presets
from tests.test_checks import make_dataset_dir, make_model_dir

PRESETS, ERRORS = load_presets()

# id -> (gfx target, GB per device, devices per node, bf16)
EXPECTED = {
    "cpu-demo": ("cpu", 0, 1, False),
    "mi300x": ("gfx942", 192, 8, True),
    "mi325x": ("gfx942", 256, 8, True),
    "mi250": ("gfx90a", 64, 8, True),
    "w7900": ("gfx1100", 48, 1, True),
    "rx7900xtx": ("gfx1100", 24, 1, True),
    "rx7900xt": ("gfx1100", 20, 1, True),
    "rx7800xt": ("gfx1101", 16, 1, True),
    "rx6900xt": ("gfx1030", 16, 1, False),
}


def test_every_shipped_preset_loads() -> None:
    assert ERRORS == []
    assert set(EXPECTED) <= set(PRESETS)


@pytest.mark.parametrize("preset_id", sorted(EXPECTED))
def test_hardware_facts(preset_id: str) -> None:
    preset = PRESETS[preset_id]
    assert (preset.gfx_target, preset.vram_gb, preset.devices_per_node, preset.bf16) == EXPECTED[preset_id]
    assert preset.display_name


def test_dropdown_order() -> None:
    # The default first; then by family and size: Instinct, Radeon PRO, Radeon RX.
    assert list(PRESETS) == ["cpu-demo", "mi325x", "mi300x", "mi250", "w7900", "rx7900xtx", "rx7900xt", "rx7800xt", "rx6900xt"]
    assert len({p.order for p in PRESETS.values()}) == len(PRESETS)


@pytest.mark.parametrize("preset_id", sorted(EXPECTED))
def test_every_preset_has_a_chinese_name_that_is_its_own(preset_id: str) -> None:
    from backend.i18n import localized

    preset = PRESETS[preset_id]
    assert preset.display_name_zh and preset.name("zh-CN") == preset.display_name_zh and preset.name("en") == preset.display_name
    # A finding carries the name as a value: each language renders its own.
    assert localized(preset.label, "zh-CN") == preset.display_name_zh and str(preset.label) == preset.display_name
    assert "demo" not in PRESETS["cpu-demo"].name("zh-CN")


def test_gfx_override_only_where_rocm_lacks_the_target() -> None:
    overrides = {p.id: dict(p.env).get("HSA_OVERRIDE_GFX_VERSION") for p in PRESETS.values()}
    assert {k: v for k, v in overrides.items() if v} == {"rx7800xt": "11.0.0"}


@pytest.mark.parametrize("preset_id", sorted(EXPECTED))
def test_defaults_are_consistent(preset_id: str) -> None:
    preset = PRESETS[preset_id]
    assert preset.precision != "bf16" or preset.bf16, "a bf16 default on hardware without bf16"
    assert set(preset.qlora_bits) <= {4, 8}
    assert all(ENV_NAME.match(name) for name, _ in preset.env)
    assert set(preset.form_values()) <= set(FORM_FIELDS)
    if preset.use_cpu:
        assert preset.qlora_bits == () and preset.precision == "fp32"


def test_rdna2_trains_in_fp16() -> None:
    assert PRESETS["rx6900xt"].precision == "fp16" and not PRESETS["rx6900xt"].bf16


@pytest.mark.parametrize("preset_id", sorted(EXPECTED))
def test_a_preset_s_own_defaults_pass_the_checks(preset_id: str, tmp_path: Path) -> None:
    preset = PRESETS[preset_id]
    values = {
        **FORM_DEFAULTS,
        **preset.form_values(),
        "model_path": str(make_model_dir(tmp_path / "model")),
        "dataset_dir": str(make_dataset_dir(tmp_path / "data")),
        "dataset": "demo",
    }
    config, findings = parse_form(values, preset.env, preset.use_cpu)
    findings += check_config(config, preset, bnb_available=lambda: True)
    assert [f for f in findings if f.severity == "problem"] == []


@pytest.mark.parametrize("preset_id", sorted(EXPECTED))
def test_exported_shell_exports_the_preset_environment_verbatim(preset_id: str) -> None:
    preset = PRESETS[preset_id]
    config, _ = parse_form(dict(FORM_DEFAULTS), preset.env, preset.use_cpu)
    exports = [shlex.split(line) for line in export_shell(config, preset, "run.yaml").splitlines() if line.startswith("export ")]
    pairs = [tuple(words[1].split("=", 1)) for words in exports]
    assert [p for p in pairs if p[0] != "CUDA_VISIBLE_DEVICES"] == list(preset.env)


def test_a_malformed_preset_is_reported_by_name_and_skipped(tmp_path: Path) -> None:
    (tmp_path / "good.yaml").write_text((PRESETS_DIR / "mi300x.yaml").read_text())
    (tmp_path / "broken.yaml").write_text("display_name: [unclosed\n")
    (tmp_path / "partial.yaml").write_text("display_name: Half a preset\ngfx_target: gfx1100\n")
    (tmp_path / "wrong.yaml").write_text((PRESETS_DIR / "mi300x.yaml").read_text().replace("precision: bf16", "precision: fp8"))
    presets, errors = load_presets(tmp_path)
    assert list(presets) == ["good"]
    problems = {e.file: e.problem for e in errors}
    assert set(problems) == {"broken.yaml", "partial.yaml", "wrong.yaml"}
    assert "YAML" in problems["broken.yaml"]
    assert "vram_gb" in problems["partial.yaml"]
    assert "fp8" in problems["wrong.yaml"]


def test_env_names_must_be_shell_names(tmp_path) -> None:
    from backend.config.presets import load_presets as load

    good = (Path(__file__).resolve().parent.parent / "presets" / "rx7900xtx.yaml").read_text()
    (tmp_path / "evil.yaml").write_text(good.replace("PYTORCH_HIP_ALLOC_CONF:", "'X; rm -rf /':"))
    presets, errors = load(tmp_path)
    assert "evil" not in presets
    assert [e.file for e in errors] == ["evil.yaml"] and "shell variable names" in errors[0].problem
