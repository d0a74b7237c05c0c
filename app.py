"""RocBoard's command line: serve the page (default), or check / telemetry / doctor / chat / export / submit / status / stop.

    python app.py [--host 127.0.0.1] [--port 7860] [--runs-dir runs] [--auth USER:PASSWORD] [--no-warm-start]
    python app.py check FILE.yaml [--preset NAME] [--fix]
    python app.py telemetry [--json] [--sysfs-root DIR]
    python app.py doctor [--json]
    python app.py chat RUN_ID [--prompt TEXT] [--base] ...      (a prompt in, an answer out)
    python app.py export RUN_ID --to DIR [--gguf f16|q8_0] ...  (merge the adapter into its base)
    python app.py submit CONFIG.yaml [--preset NAME] [--slurm --partition P --nodes N ...]
    python app.py sweep CONFIG.yaml --vary learning_rate=1e-4,2e-4 --vary lora_rank=8,16 [--seeds N] [--dry-run]
    python app.py status [RUN_ID] [--json] [--sweep ID]
    python app.py stop RUN_ID

This file only parses arguments and hands over to ui/ (serve) or backend/ (the rest).
"""

from __future__ import annotations

import sys

# Each subcommand: "module" (its main(argv)) or "module:function".
SUBCOMMANDS = {
    "check": "backend.check_cli",
    "telemetry": "backend.telemetry.cli",
    "doctor": "backend.doctor.cli",
    "chat": "backend.chat.cli",
    "export": "backend.export.cli",
    "submit": "backend.runs_cli:submit_main",
    "status": "backend.runs_cli:status_main",
    "stop": "backend.runs_cli:stop_main",
    "validate": "backend.validate.cli",
    "sweep": "backend.sweep.cli:sweep_main",
}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in SUBCOMMANDS:
        import importlib

        module, _, function = SUBCOMMANDS[argv[0]].partition(":")
        return getattr(importlib.import_module(module), function or "main")(argv[1:])
    from ui.serve import serve_main

    return serve_main(argv)


if __name__ == "__main__":
    sys.exit(main())
