"""`python app.py` (serve): parse the serve flags, apply the safety rules, launch Gradio."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="app.py", description="Serve the RocBoard page.")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=7860, help="port (default 7860)")
    parser.add_argument("--runs-dir", default="runs", help="where runs are kept (default runs)")
    parser.add_argument("--auth", default=None, help="USER:PASSWORD; required for a non-loopback --host")
    parser.add_argument("--auth-file", default=None, help="file holding USER:PASSWORD")
    parser.add_argument("--share", action="store_true", help="ask Gradio for a public share link (off unless given)")
    parser.add_argument("--sysfs-root", default="/sys", help="read GPU telemetry from this tree instead of /sys (a fake tree for demos and tests)")
    return parser.parse_args(argv)


def serve_main(argv: list[str]) -> int:
    args = parse_args(argv)
    from backend.security import AuthError, bind_refusal, resolve_credentials

    try:
        credentials = resolve_credentials(args.auth, args.auth_file)
    except AuthError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    refusal = bind_refusal(args.host, credentials)
    if refusal:
        print(f"error: {refusal}", file=sys.stderr)
        return 2
    os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
    from backend.service import RocBoard
    from backend.telemetry.sampler import Sampler
    from ui.app import build_ui

    sampler = Sampler(sysfs_root=Path(args.sysfs_root))
    sampler.start()
    board = RocBoard(Path(args.runs_dir), sampler=sampler)
    for error in board.preset_errors:
        print(f"warning: preset file {error.file} skipped: {error.problem}", file=sys.stderr)
    board.prewarm(then_doctor=True)
    active = board.reattach()
    if active is not None:
        print(f"Re-attached to run {active.id} ({active.state}).", file=sys.stderr)
    page = build_ui(board)
    page.queue(default_concurrency_limit=4)
    print(f"RocBoard: http://{args.host}:{args.port}  (runs in {board.store.root})", file=sys.stderr, flush=True)
    page.launch(
        server_name=args.host,
        server_port=args.port,
        auth=(credentials.user, credentials.password) if credentials else None,
        share=args.share,
        show_api=False,
        inbrowser=False,
        max_file_size="1mb",
        show_error=True,
    )
    return 0
