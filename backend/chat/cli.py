"""python app.py chat RUN_ID: a prompt in, the run's answer out (for scripts).

    python app.py chat RUN_ID [--prompt TEXT] [--system TEXT] [--checkpoint N] [--base]
                              [--max-new-tokens N] [--temperature T] [--runs-dir DIR]

Without --prompt the prompt is read from stdin. The answer is printed to stdout as it is
generated. Exit codes: 0 answered, 2 refused (the findings, on stderr), 1 failed (a load
that failed or an answer cut short). The server is stopped before the command returns,
also on Ctrl-C."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from backend.chat.server import GenerationSettings
from backend.i18n import translate

MAX_STDIN_PROMPT_BYTES = 64 * 1024


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="app.py chat", description="Ask a trained run a question; the answer is streamed to stdout.")
    parser.add_argument("run_id")
    parser.add_argument("--prompt", help="the question (default: read from stdin)")
    parser.add_argument("--system", default="", help="a system prompt")
    parser.add_argument("--checkpoint", default="", help="N or checkpoint-N: a checkpoint's adapter instead of the final one")
    parser.add_argument("--base", action="store_true", help="answer with the base model alone (no adapter)")
    parser.add_argument("--max-new-tokens", type=int, default=256)
    parser.add_argument("--temperature", type=float, default=0.0, help="0 (default) is greedy decoding")
    parser.add_argument("--top-p", type=float, default=0.9)
    parser.add_argument("--runs-dir", default="runs")
    return parser


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    from backend.runs import RunStore
    from backend.service.chat_desk import ChatDesk

    prompt = args.prompt if args.prompt is not None else sys.stdin.read(MAX_STDIN_PROMPT_BYTES)
    if not prompt.strip():
        print("error: an empty prompt (give --prompt TEXT or text on stdin)", file=sys.stderr)
        return 2
    checkpoint = args.checkpoint.strip()
    if checkpoint.isdigit():
        checkpoint = f"checkpoint-{checkpoint}"
    desk = ChatDesk(RunStore(Path(args.runs_dir)), None)
    try:
        last = None
        for status in desk.load(args.run_id, checkpoint or None, base_only=args.base):
            last = status
            if status.state == "loading":
                continue
        if last is None or last.state != "ready":
            for finding in last.findings if last is not None else ():
                print(finding.line(), file=sys.stderr)
            return 2 if last is not None and last.state == "refused" else 1
        settings = GenerationSettings(temperature=args.temperature, top_p=args.top_p, max_new_tokens=args.max_new_tokens)
        failed = False
        for event in desk.ask(prompt, args.system, settings):
            if event.error:
                print(f"\nerror: {translate(event.error, 'en', **event.params)}", file=sys.stderr)
                failed = True
            elif event.delta:
                sys.stdout.write(event.delta)
                sys.stdout.flush()
        sys.stdout.write("\n")
        return 1 if failed else 0
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)
        return 130
    finally:
        desk.close()
