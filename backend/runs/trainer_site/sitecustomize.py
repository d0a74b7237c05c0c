"""Loaded by the workers of a CPU run of several processes (torchrun on gloo), and by nothing
else: RocBoard puts this folder on their PYTHONPATH (backend/runs/launcher.py trainer_env,
when backend/config/distributed.py launch_env marks the plan CPU_WORKERS_VARIABLE).

Why: resuming such a run failed in every rank with "don't know how to restore data location
of torch.storage.UntypedStorage (tagged with cpu:0)". transformers' Trainer loads the
checkpoint's optimizer.pt with `map_location=self.args.device` when the world size is above
one (trainer.py, _load_optimizer_and_scheduler), and accelerate's PartialState gives each CPU
worker the device `torch.device("cpu", local_rank % torch.cpu.device_count())`, i.e. "cpu:0";
torch's own CPU deserializer accepts the location "cpu" only (serialization.py,
_cpu_deserialize: `if location == "cpu"`). So a multi-process CPU run could never resume.

The fix registers one more deserializer with torch: a location "cpu:<n>" is the CPU, and the
storage stays where it was read. It tags nothing (saving is unchanged), and it is consulted
only for a location no other deserializer took. Nothing here may fail a trainer's start.
"""

import os

if os.environ.get("LOCAL_RANK") is not None:  # a torchrun worker (not the CLI, not the agent)
    try:
        import torch.serialization as _serialization

        def _indexed_cpu(storage, location):
            if isinstance(location, str) and location.startswith("cpu:") and location[4:].isdigit():
                return storage
            return None

        _serialization.register_package(30, lambda storage: None, _indexed_cpu)
    except Exception:  # noqa: BLE001 - a hook, never a reason for a worker not to start
        pass
