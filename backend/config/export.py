"""Exporting a run for by-hand use: the YAML LLaMA-Factory reads and the shell lines to run it.

The shell text is what RocBoard itself would do, written out: the preset's environment,
then `llamafactory-cli train FILE`. Every value is quoted with shlex.quote, so a path or a
preset value with spaces or `$` stays one literal word.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

from backend.config import RunConfig, to_yaml
from backend.config.presets import HardwarePreset
from backend.i18n import Joined, Message
from backend.security.child_env import ENV_NAME  # the one shell-name rule


def export_yaml(config: RunConfig, output_dir: str) -> str:
    """The LLaMA-Factory training YAML for `config`, writing to `output_dir`."""
    return to_yaml(config, output_dir)


def export_shell(config: RunConfig, preset: HardwarePreset | None, yaml_filename: str) -> str:
    """Shell lines that run `yaml_filename` by hand with the preset's environment.

    The environment comes from the preset (or, without one, from the config's own copy of
    it). ValueError when a variable name is not a shell name: it could not be exported, and
    quoting cannot make it one.
    """
    env = preset.env if preset is not None else config.hardware.env
    for name, _ in env:
        if not ENV_NAME.match(name):
            raise ValueError(f"environment variable name {name!r} is not a valid shell name")
    # The comment line is a message: the page's preview shows it in its language, a file
    # written from it (str) holds the English.
    where = _comment(preset.display_name) if preset is not None else Message("export.shell.no_preset")
    run = _comment(config.run_name) if config.run_name else Message("export.shell.unnamed")
    lines: list[str] = [
        "#!/usr/bin/env bash",
        Message("export.shell.header", run=run, where=where),
        "set -euo pipefail",
    ]
    lines += [f"export {name}={shlex.quote(value)}" for name, value in env]
    if config.hardware.use_cpu:
        # A CPU run must not pick up a GPU that happens to be visible.
        lines.append("export CUDA_VISIBLE_DEVICES=''")
    lines.append(f"llamafactory-cli train {shlex.quote(str(yaml_filename))}")
    return Joined((*lines, ""), "\n")


def _comment(text: str) -> str:
    """Text safe inside a one-line shell comment."""
    return re.sub(r"[\r\n]+", " ", text)


def default_filenames(config: RunConfig) -> tuple[str, str]:
    """(yaml, shell) file names for a download: the run name, or `rocboard-run`."""
    stem = Path(config.run_name).name if config.run_name else "rocboard-run"
    return f"{stem}.yaml", f"{stem}.sh"


__all__ = ["default_filenames", "export_shell", "export_yaml"]
