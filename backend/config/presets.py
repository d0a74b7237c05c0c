"""Hardware presets: one YAML file per preset in presets/, loaded into a typed model.

A user adds a preset by dropping a file in presets/. A file that does not load is
reported by name and skipped; it never stops the app. Its `env:` entries reach the
trainer's environment, so they follow backend/security/child_env.py's rule like the Multi-GPU tab's
RCCL settings: a file that sets LD_PRELOAD, PYTHONPATH, BROWSER or any other variable
outside the allow-list is skipped the same way.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from backend.config import form_value, parse_form, schema
from backend.config.schema import FLASH_ATTN_CHOICES, PRECISIONS, form_defaults
from backend.security.child_env import ENV_NAME, refused_settings  # the one shell-name rule

PRESETS_DIR = Path(__file__).resolve().parents[2] / "presets"
DEFAULT_PRESET_ID = "cpu-demo"


class PresetName(str):
    """A preset's name as a message value: the string is the English name (command line,
    logs), `text(locale)` the name in the page's language. A preset file's names are its own
    words, not the catalogue's; this lets a finding carry one into a translated sentence."""

    zh: str

    def __new__(cls, english: str, zh: str = "") -> PresetName:
        name = super().__new__(cls, english)
        name.zh = zh or english
        return name

    def text(self, locale: str | None = "en") -> str:
        return self.zh if (locale or "").startswith("zh") else str(self)

    def __reduce__(self):  # a str subclass with its own __new__: pickled by its two names
        return (PresetName, (str(self), self.zh))


@dataclass(frozen=True)
class HardwarePreset:
    id: str  # the file stem, e.g. "mi300x"
    display_name: str
    gfx_target: str  # "gfx942", "gfx1100", ... or "cpu"
    vram_gb: float  # memory of one device (a GCD on MI250), GB; the CPU demo has none
    devices_per_node: int
    bf16: bool
    env: tuple[tuple[str, str], ...]  # exported for the trainer, in order
    # (field name, form value) of every run-form field the file sets (any field of
    # backend/config/schema.py RUN_FIELDS; precision, flash_attn, batch_size, grad_accum, cutoff_len and
    # gradient_checkpointing always), each checked by the form's own parser.
    form: tuple[tuple[str, Any], ...]
    qlora_bits: tuple[int, ...]  # quantization bits offered (4, 8); empty = no QLoRA
    order: int = 100  # position in the dropdown
    notes: str = ""
    notes_zh: str = ""  # the notes in Simplified Chinese
    use_cpu: bool = False  # the trainer runs on the CPU (the demo preset)
    display_name_zh: str = ""  # the name in Simplified Chinese (empty: the English name)

    @property
    def label(self) -> PresetName:
        """The name as a message value (rendered in the page's language)."""
        return PresetName(self.display_name, self.display_name_zh)

    def name(self, locale: str | None = "en") -> str:
        """The name in `locale`, as the dropdown and the page show it."""
        return self.label.text(locale)

    def form_values(self) -> dict[str, Any]:
        """The form fields this preset fills."""
        return {"preset": self.id, **dict(self.form)}

    def value(self, name: str) -> Any:
        """The form value the preset gives field `name` (the schema's default where it sets none)."""
        return dict(self.form).get(name, schema.field(name).default)

    @property
    def precision(self) -> str:
        """Its default precision (bf16 / fp16 / fp32): what the hardware computes in."""
        return str(self.value("precision"))


@dataclass(frozen=True)
class PresetLoadError:
    file: str
    problem: str


# Besides its own keys (display_name, gfx_target, vram_gb, devices_per_node, bf16, env,
# qlora_bits, order, notes, use_cpu, the _zh names), any key of a preset file that names a field
# of the run form (backend/config/schema.py RUN_FIELDS) is a value it fills; others are ignored.
# The form fields every preset sets: what its hardware decides.
REQUIRED_FIELDS = ("precision", "flash_attn", "batch_size", "grad_accum", "cutoff_len", "gradient_checkpointing")
_REQUIRED = ("display_name", "gfx_target", "vram_gb", "devices_per_node", "bf16", *REQUIRED_FIELDS)


def _form_of(data: dict[str, Any]) -> tuple[tuple[str, Any], ...]:
    """The run form's fields a preset file sets, read by the form's own parser (parse_form):
    ValueError names the first that does not parse. Kept as the form shows them, in its order."""
    names = {f.name for f in schema.run_fields()} - {"preset"}
    given = {name: value for name, value in data.items() if name in names}
    config, findings = parse_form({**form_defaults(), **given})
    bad = next((finding for finding in findings if finding.key in given), None)
    if bad is not None:
        raise ValueError(f"{bad.key}: {bad.problem}")
    return tuple((f.name, form_value(f, config.value(f.name))) for f in schema.run_fields() if f.name in given)


def parse_preset(preset_id: str, text: str) -> HardwarePreset:
    """A preset from the text of its YAML file; ValueError names what is wrong."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise ValueError(f"not valid YAML ({error})") from None
    if not isinstance(data, dict):
        raise ValueError("must be a mapping of keys to values")
    missing = [key for key in _REQUIRED if key not in data]
    if missing:
        raise ValueError(f"missing keys: {', '.join(missing)}")
    env = data.get("env") or {}
    if not isinstance(env, dict):
        raise ValueError("env must be a mapping of variable names to values")
    bad_names = [str(name) for name in env if not ENV_NAME.match(str(name))]
    if bad_names:
        raise ValueError(f"env names must be shell variable names (letters, digits, _): {', '.join(bad_names)}")
    refused = refused_settings((str(k), str(v)) for k, v in env.items())
    if refused:
        raise ValueError("env: " + " ".join(r.problem for r in refused))
    # The choices the form offers (backend/config/schema.py): a preset fills the form.
    if data["precision"] not in PRECISIONS:
        raise ValueError(f"precision must be {_one_of(PRECISIONS)}, not {data['precision']!r}")
    if data["flash_attn"] not in FLASH_ATTN_CHOICES:
        raise ValueError(f"flash_attn must be {_one_of(FLASH_ATTN_CHOICES)}, not {data['flash_attn']!r}")
    try:
        return HardwarePreset(
            id=preset_id,
            display_name=str(data["display_name"]),
            gfx_target=str(data["gfx_target"]),
            vram_gb=float(data["vram_gb"]),
            devices_per_node=int(data["devices_per_node"]),
            bf16=_boolean(data["bf16"], "bf16"),
            env=tuple((str(k), str(v)) for k, v in env.items()),
            form=_form_of(data),
            qlora_bits=tuple(int(b) for b in (data.get("qlora_bits") or ())),
            order=int(data.get("order", 100)),
            notes=str(data.get("notes", "")),
            notes_zh=str(data.get("notes_zh", "")),
            use_cpu=_boolean(data.get("use_cpu", False), "use_cpu"),
            display_name_zh=str(data.get("display_name_zh", "")),
        )
    except (TypeError, ValueError) as error:
        raise ValueError(f"a value has the wrong type ({error})") from None


def _one_of(choices: tuple[str, ...]) -> str:
    return ", ".join(choices[:-1]) + " or " + choices[-1]


def _boolean(value: Any, key: str) -> bool:
    if isinstance(value, bool):
        return value
    raise ValueError(f"{key} must be true or false, not {value!r}")


def load_presets(directory: Path = PRESETS_DIR) -> tuple[dict[str, HardwarePreset], list[PresetLoadError]]:
    """All presets in `directory`, in dropdown order, and the files that did not load."""
    presets: list[HardwarePreset] = []
    errors: list[PresetLoadError] = []
    for path in sorted(directory.glob("*.yaml")):
        try:
            presets.append(parse_preset(path.stem, path.read_text(encoding="utf-8")))
        except (OSError, UnicodeDecodeError, ValueError) as error:
            errors.append(PresetLoadError(path.name, str(error)))
    # `order` in each file: the default (the CPU demo) first, then by family and size.
    presets.sort(key=lambda p: (p.order, p.display_name))
    return {p.id: p for p in presets}, errors


def demo_form(directory: Path = PRESETS_DIR) -> dict[str, Any]:
    """The form as `make run` opens it: the schema's defaults, the CPU demo preset's values,
    and the tiny offline demo model and dataset (backend/demo.py builds them)."""
    from backend.demo import demo_paths

    paths = demo_paths()
    preset = parse_preset(DEFAULT_PRESET_ID, (directory / f"{DEFAULT_PRESET_ID}.yaml").read_text(encoding="utf-8"))
    return {
        **form_defaults(),
        **preset.form_values(),
        "model_path": str(paths.model_dir),
        "dataset_dir": str(paths.dataset_dir),
        "dataset": paths.dataset_name,
        # Measured on the demo: 100 steps take ~2 s of training on a quiet CPU, and the loss
        # falls from ~5.6 to ~2.3 (the fixed "who are you" answer is learned word for word).
        "learning_rate": 1e-2,
        "max_steps": 100,
        "num_train_epochs": 1.0,
        "logging_steps": 1,
        "save_steps": 50,
        "run_name": "demo",
    }
