"""The web process stays light: building the page and serving every form action never
imports torch, transformers or llamafactory (their work runs in helper processes)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

from tests.tiers import starts

ROOT = Path(__file__).resolve().parent.parent

SCRIPT = textwrap.dedent(
    """
    import json, sys, tempfile
    from pathlib import Path
    from backend.service import RocBoard, demo_form
    from ui.app import build_ui
    from backend.telemetry.sampler import Sampler

    runs = Path(tempfile.mkdtemp())
    sampler = Sampler(interval_s=0.2)
    sampler.start()
    board = RocBoard(runs, sampler=sampler)
    build_ui(board)
    form = demo_form()
    board.preview(form)                      # includes LLaMA-Factory's parser, in a helper
    board.estimate(form)
    board.import_yaml("model_name_or_path: x\\ncompute_type: bf16\\n", "rx7900xtx")
    board.export(form)
    board.doctor_checks(refresh=True)        # the torch probe runs in a helper
    sampler.latest()
    sampler.stop()
    heavy = sorted(m for m in ("torch", "transformers", "llamafactory", "peft", "trl", "datasets") if m in sys.modules)
    print(json.dumps(heavy))
    """
)


@starts("lf_helper")
def test_no_heavy_imports_in_the_web_process():
    result = subprocess.run([sys.executable, "-c", SCRIPT], cwd=ROOT, capture_output=True, text=True, timeout=280)
    assert result.returncode == 0, result.stderr[-3000:]
    heavy = json.loads(result.stdout.strip().splitlines()[-1])
    assert heavy == [], f"the web process imported {heavy}"
