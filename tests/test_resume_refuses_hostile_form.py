"""Resume reads the run's saved form.json: a hand-edited one is checked like the page's form."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from backend.runs import CONFIG_FILE, FORM_FILE
from backend.service import RocBoard, demo_form
from tests.test_resume import make_run


@pytest.mark.hostile
@pytest.mark.parametrize(
    "rccl_lines",
    [
        "PYTHONWARNINGS=all:0:antigravity.x:0:0\nBROWSER=/bin/sh -c 'touch {marker}' #%s",
        "LD_PRELOAD=/tmp/evil.so",
        "PYTHONPATH=/tmp/uploads",
    ],
    ids=["browser", "ld-preload", "pythonpath"],
)
def test_a_hand_edited_form_with_a_refused_variable_is_not_resumed(tmp_path: Path, demo_assets, rccl_lines: str) -> None:
    board = RocBoard(tmp_path / "runs", export_dir=tmp_path / "exports")
    run_id = make_run(board.store)
    run_dir = board.store.run_dir(run_id)
    marker = tmp_path / "marker"
    form = {**demo_form(), "dist_nnodes": 2, "dist_nproc": 1, "dist_rccl_env": rccl_lines.format(marker=marker)}
    (run_dir / FORM_FILE).write_text(json.dumps(form))
    config_before = (run_dir / CONFIG_FILE).read_bytes()

    result = board.resume(run_id)

    assert not result.started
    assert any(f.key.endswith("rccl_env") and f.severity == "problem" for f in result.findings), result.findings
    assert (run_dir / CONFIG_FILE).read_bytes() == config_before  # nothing was prepared for a resume
    assert board.store.read(run_id).state == "stopped"
    assert not marker.exists()
