"""The environment of a helper that imports LLaMA-Factory to answer a question, not to train:
the check (worker.py), the keys catalogue (keys_worker.py) and the token lengths
(backend/data/lengths_worker.py), one-shot or in a fork of the long-lived helper (zygote.py).

Standard library only, and nothing of RocBoard: those helpers run by their path, so each loads
this file by its path too (`runpy.run_path`), however it was started.
"""

from __future__ import annotations

import os

# A process group a parent left behind, LLaMA-Factory's switches that change what its parser
# accepts (ALLOW_EXTRA_ARGS) or builds (USE_MCA swaps transformers' TrainingArguments for
# mcore_adapter's), and torchrun's.
DROPPED = ("WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "ALLOW_EXTRA_ARGS", "USE_MCA", "FORCE_TORCHRUN")


def quiet_environment() -> None:
    """No accelerator (nothing is trained here; a GPU busy with a real run is not touched), no
    process group, no hub, no progress bars, LLaMA-Factory and transformers saying only what
    is wrong. For this process only (and what it starts)."""
    os.environ["CUDA_VISIBLE_DEVICES"] = ""
    os.environ["HIP_VISIBLE_DEVICES"] = ""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ["HF_DATASETS_DISABLE_PROGRESS_BARS"] = "1"
    os.environ["LLAMAFACTORY_VERBOSITY"] = "WARN"
    os.environ["TRANSFORMERS_VERBOSITY"] = "error"
    for name in DROPPED:
        os.environ.pop(name, None)
