"""`python app.py` (serve): parse the serve flags, apply the safety rules, launch Gradio behind
ui/guard/, and leave no files behind.

Every file the app makes for itself lives in one folder per app process, named after the
process (pid and its start in clock ticks since boot, backend/process_start.py):
`<tmp>/rocboard-app-<pid>-<start ticks>/` (the download copies in exports/, this process's
temporary files in tmp/) and `<Gradio temp>/rocboard-app-<pid>-<start ticks>/` (Gradio's
cache: uploads and files handed to the page). Both go when the app stops; a start removes
those of app processes that are gone (killed, crashed).
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import sys
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

if TYPE_CHECKING:
    from backend.health import HealthSettings
    from backend.i18n import Message
    from backend.notify import Notifier

APP_DIR_PREFIX = "rocboard-app-"

# Gradio's queue looks for work 20 times a second and for progress to send 10 times a
# second, even with nothing queued: most of an idle server's CPU (BENCHMARKS.md, section 2).
# RocBoard reports no gr.Progress, and its queued events (Start, Resume, Stop, the checks)
# take seconds, so a look every 0.1 s for work and every 1 s for progress costs nothing a user
# can see. Private attributes of gradio.queueing.Queue (5.x): left as they are if renamed.
QUEUE_WORK_POLL_S = 0.1
QUEUE_PROGRESS_POLL_S = 1.0


def quiet_queue(page: object) -> None:
    queue = getattr(page, "_queue", None)
    if queue is not None and hasattr(queue, "sleep_when_free") and hasattr(queue, "progress_update_sleep_when_free"):
        queue.sleep_when_free = QUEUE_WORK_POLL_S
        queue.progress_update_sleep_when_free = QUEUE_PROGRESS_POLL_S


# A dataset of a few hundred MB is common; bigger ones live on the machine already and are
# registered by path (nothing is copied). The limit bounds Gradio's upload cache, not memory:
# uploads stream to disk and are read in chunks (backend/data/dataset_file.py).
DEFAULT_MAX_UPLOAD_MB = 512
MAX_UPLOAD_MB_LIMIT = 64 * 1024


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="app.py", description="Serve the RocBoard page.")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=7860, help="port (default 7860)")
    parser.add_argument("--runs-dir", default="runs", help="where runs are kept (default runs)")
    parser.add_argument("--auth", default=None, help="USER:PASSWORD; required for a non-loopback --host")
    parser.add_argument("--auth-file", default=None, help="file holding one line USER:PASSWORD")
    parser.add_argument(
        "--allowed-host",
        action="append",
        default=[],
        metavar="NAME",
        help="another name the page is reached by (a reverse proxy's, a DNS name of this machine); repeatable. "
        "Requests naming any other Host are refused.",
    )
    parser.add_argument("--share", action="store_true", help="ask Gradio for a public share link (needs a login; off unless given)")
    parser.add_argument(
        "--no-warm-start",
        action="store_true",
        help="no long-lived LLaMA-Factory helper: every check and every trainer imports torch anew "
        "(also ROCBOARD_WARM_START=0; see docs/architecture.md)",
    )
    parser.add_argument(
        "--max-upload-mb",
        type=int,
        default=DEFAULT_MAX_UPLOAD_MB,
        metavar="MB",
        help=f"the largest file the page accepts, a dataset above all (default {DEFAULT_MAX_UPLOAD_MB}; "
        "a bigger dataset can be given as a path on this machine instead)",
    )
    parser.add_argument(
        "--data-root",
        action="append",
        default=[],
        metavar="DIR",
        help="a folder whose files the page may register as datasets by path; repeatable "
        "(default: your home folder and the folder the app started in)",
    )
    parser.add_argument(
        "--export-root",
        action="append",
        default=None,
        metavar="DIR",
        help="a folder under which the Export tab may write merged models; repeatable "
        "(default: ~/rocboard-exports, made with mode 0700 by the first export). RocBoard's own "
        "folder, its Python environment and the home's hidden folders are never written, whatever the root",
    )
    parser.add_argument("--sysfs-root", default="/sys", help="read GPU telemetry from this tree instead of /sys (a fake tree for demos and tests)")
    parser.add_argument(
        "--cpu-slots", type=int, default=1, metavar="N",
        help="on a machine without GPUs, how many local runs train at once (1 to 64; default 1). With GPUs each run gets its own, side by side (docs/runs.md)",
    )  # fmt: skip
    add_health_flags(parser)
    add_notify_flags(parser)
    args = parser.parse_args(argv)
    try:
        args.health = health_settings(args)
    except ValueError as error:
        parser.error(str(error))
    if not 1 <= args.cpu_slots <= 64:
        parser.error(f"--cpu-slots takes 1 to 64; got {args.cpu_slots}")
    if not 1 <= args.max_upload_mb <= MAX_UPLOAD_MB_LIMIT:
        parser.error(f"--max-upload-mb takes 1 to {MAX_UPLOAD_MB_LIMIT}; got {args.max_upload_mb}")
    return args


# The GPU health thresholds (backend/health, docs/multi-gpu.md "GPU health"): flag, setting, help.
HEALTH_FLAGS: tuple[tuple[str, str, str], ...] = (
    ("--health-idle-pct", "idle_pct", "a GPU busy below this % is idle"),
    ("--health-busy-pct", "busy_pct", "a GPU busy at least this % trains"),
    ("--health-lost-rank-s", "lost_rank_s", "alert when one GPU of a run is idle this many seconds while another trains"),
    ("--health-stall-s", "stall_s", "alert when every GPU of a running run is idle and no log line came for this many seconds"),
    ("--health-imbalance-s", "imbalance_s", "alert when one GPU is loaded and another nearly empty for this many seconds"),
    ("--health-imbalance-ratio", "imbalance_ratio", "... nearly empty: holding this many times less VRAM than the loaded one"),
    ("--health-loaded-pct", "loaded_pct", "... loaded: holding at least this % of its VRAM"),
)


def add_health_flags(parser: argparse.ArgumentParser) -> None:
    from backend.health import BOUNDS, HealthSettings

    defaults = HealthSettings()
    group = parser.add_argument_group("GPU health", "when RocBoard alerts about a training run's GPUs (docs/multi-gpu.md, GPU health)")
    for flag, name, what in HEALTH_FLAGS:
        low, high = BOUNDS[name]
        shown = what.replace("%", "%%")  # argparse formats each help with %: a bare one broke --help
        group.add_argument(flag, type=float, default=getattr(defaults, name), metavar="N", help=f"{shown} (default {getattr(defaults, name):g}; {low:g} to {high:g})")
    group.add_argument("--health-stop-on-stall", action="store_true", help="stop a stalled run (it can be resumed from its last checkpoint); off unless given")


def add_notify_flags(parser: argparse.ArgumentParser) -> None:
    from backend.i18n import LOCALES
    from backend.notify.webhook import ENV_URL, WEBHOOK_KINDS

    group = parser.add_argument_group("Word when a run ends", "a webhook POST when a run finishes, fails, stops on NaN or stalls, and when a sweep ends (docs/notify.md)")
    group.add_argument(
        "--webhook-url",
        default=None,
        metavar="URL",
        help=f"where to POST (http or https; also {ENV_URL}, which keeps it out of the process list). Its path and query are treated as a secret: shown as scheme://host/…",
    )
    group.add_argument("--webhook-kind", default="auto", choices=WEBHOOK_KINDS, help="the payload's shape (default auto: by the URL's host; json for any other)")
    group.add_argument("--lang", default="en", choices=LOCALES, help="the language of what the app sends by itself: the webhook's messages (default en)")


def notifier_for(args: argparse.Namespace, own_hosts: list[str]) -> Notifier | Message:
    """The app's Notifier (a webhook when --webhook-url or ROCBOARD_WEBHOOK_URL names one), or the
    message that refuses the URL (redacted) before anything is sent. The variable is removed
    from this process's environment once read (and masked in its start-up block): no child
    could inherit it, no reader of /proc/<pid>/environ sees it."""
    from backend.i18n import Message
    from backend.notify import Notifier
    from backend.notify.webhook import ENV_URL, webhook_settings

    url = args.webhook_url or os.environ.get(ENV_URL) or ""
    if os.environ.pop(ENV_URL, None) is not None:
        # Also masked in the block /proc/<pid>/environ shows, as the login is (backend/security).
        from backend.security import _mask_start_environ

        _mask_start_environ(f"{ENV_URL}=".encode())
    if not url:
        return Notifier(locale=args.lang)
    settings = webhook_settings(url, args.webhook_kind, args.lang, app_port=args.port, own_hosts=[args.host, *own_hosts])
    if isinstance(settings, Message):
        return settings
    return Notifier(settings, locale=args.lang)


def health_settings(args: argparse.Namespace) -> HealthSettings:
    """The HealthSettings the flags give (ValueError, with the bounds, for one out of range)."""
    from backend.health import HealthSettings

    values = {name: getattr(args, flag[2:].replace("-", "_")) for flag, name, _ in HEALTH_FLAGS}
    try:
        return HealthSettings(**values, stop_on_stall=args.health_stop_on_stall)
    except ValueError as error:
        flags = {name: flag for flag, name, _ in HEALTH_FLAGS}
        text = str(error)
        for name, flag in flags.items():
            text = text.replace(name, flag)
        raise ValueError(text) from None


# --- the app's own folders -----------------------------------------------------------------------


def process_stamp(pid: int) -> int | None:
    """A process's start in clock ticks since boot (with its pid, it names one process for
    good: unlike a create_time() it does not move when the clock is stepped, see
    backend/process_start.py); None when there is no such process."""
    from backend.process_start import start_ticks

    return start_ticks(pid)


def app_dir_name(pid: int, stamp: int) -> str:
    return f"{APP_DIR_PREFIX}{pid}-{stamp}"


def app_dir_owner_alive(name: str) -> bool:
    """Whether the app process a `rocboard-app-<pid>-<start ticks>` folder belongs to still runs. A name
    that does not parse is treated as alive: it is not ours to remove."""
    pid_text, _, stamp_text = name.removeprefix(APP_DIR_PREFIX).partition("-")
    if not (pid_text.isdigit() and stamp_text.isdigit()):
        return True
    return process_stamp(int(pid_text)) == int(stamp_text)


def remove_stale_app_dirs(base: Path) -> list[Path]:
    """Removes the app folders under `base` whose process is gone (only folders this user
    owns; a link is never followed)."""
    removed: list[Path] = []
    try:
        candidates = list(base.glob(APP_DIR_PREFIX + "*"))
    except OSError:
        return removed
    for path in candidates:
        try:
            info = path.lstat()
        except OSError:
            continue
        if path.is_symlink() or not path.is_dir() or info.st_uid != os.getuid():
            continue
        if not app_dir_owner_alive(path.name):
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed


@dataclass(frozen=True)
class AppDirs:
    root: Path  # the app's own files
    exports: Path  # RocBoard's download copies
    staging: Path  # this process's temporary files (Gradio receives upload bodies here)
    gradio: Path  # Gradio's cache: uploads, files handed to the page

    def remove(self) -> None:
        for path in (self.gradio, self.root):
            shutil.rmtree(path, ignore_errors=True)


def claim_app_dirs(temp_base: Path, gradio_base: Path, pid: int | None = None) -> AppDirs:
    """This app's folders (made private), after removing those of app processes that are gone."""
    pid = pid or os.getpid()
    stamp = process_stamp(pid) or 0
    for base in (temp_base, gradio_base):
        remove_stale_app_dirs(base)
    name = app_dir_name(pid, stamp)
    root = temp_base / name
    dirs = AppDirs(root=root, exports=root / "exports", staging=root / "tmp", gradio=gradio_base / name)
    gradio_base.mkdir(parents=True, exist_ok=True)
    for path in (dirs.root, dirs.gradio, dirs.exports, dirs.staging):
        shutil.rmtree(path, ignore_errors=True)  # a reused pid's leftover (never ours: we just started)
        path.mkdir(mode=0o700, parents=True)
    return dirs


def own_host_names() -> list[str]:
    """This machine's addresses and host name: what a browser may name when the app listens
    on every address (0.0.0.0, ::)."""
    import socket

    import psutil

    names = [socket.gethostname()]
    try:
        for addresses in psutil.net_if_addrs().values():
            names.extend(a.address for a in addresses if a.family in (socket.AF_INET, socket.AF_INET6))
    except OSError:
        pass
    return names


# --- serve -----------------------------------------------------------------------------------------


def serve_main(argv: list[str]) -> int:
    args = parse_args(argv)
    from backend.security import AuthError, bind_refusal, forget_login_env, resolve_credentials, share_refusal
    from ui.guard.origin import normalize_host_name

    try:
        credentials = resolve_credentials(args.auth, args.auth_file)
    except AuthError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    finally:
        # Read once: gone from this process's environment before anything else starts.
        forget_login_env()
    refusal = bind_refusal(args.host, credentials) or share_refusal(args.share, credentials)
    if refusal:
        print(f"error: {refusal}", file=sys.stderr)
        return 2
    listed = []
    for value in args.allowed_host:
        name = normalize_host_name(value)
        if name is None:
            print(f"error: --allowed-host takes a host name or address (no scheme, port, path or wildcard); got {value!r}.", file=sys.stderr)
            return 2
        listed.append(name)
    from backend.i18n import Message
    from ui.guard.origin import is_wildcard_bind

    notifier = notifier_for(args, own_host_names() if is_wildcard_bind(args.host) else [])
    if isinstance(notifier, Message):
        print(f"error: {notifier.text(args.lang)}", file=sys.stderr)
        return 2
    if notifier.webhook is not None:
        from backend.i18n import translate

        print(translate("notify.webhook.on", args.lang, url=notifier.webhook.redacted, kind=notifier.webhook.kind), file=sys.stderr)
    args.notifier = notifier
    os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
    temp_base = Path(tempfile.gettempdir())
    gradio_base = Path(os.environ.get("GRADIO_TEMP_DIR") or temp_base / "gradio")
    dirs = claim_app_dirs(temp_base, gradio_base)
    # Gradio reads GRADIO_TEMP_DIR when it is imported: set before anything imports it.
    os.environ["GRADIO_TEMP_DIR"] = str(dirs.gradio)
    # In this process only (trainers keep the TMPDIR they inherit: they outlive the app).
    tempfile.tempdir = str(dirs.staging)
    try:
        return _serve(args, credentials, listed, dirs)
    finally:
        dirs.remove()


def _serve(args: argparse.Namespace, credentials, listed: list[str], dirs: AppDirs) -> int:
    from backend.service import RocBoard
    from backend.telemetry.sampler import Sampler
    from ui.app import build_ui
    from ui.guard.asgi import EdgePolicy, Guard
    from ui.guard.origin import allowed_host_names, is_wildcard_bind, normalize_host_name
    from ui.guard.quota import MIB, UploadQuota, upload_body_cap
    from ui.live import LiveRoutes
    from ui.notify import NoticeRoutes

    sampler = Sampler(sysfs_root=Path(args.sysfs_root))
    sampler.start()
    # The LLaMA-Factory helper (imports torch once; checks and trainers fork from it), unless
    # --no-warm-start (RocBoard.start_helper also heeds ROCBOARD_WARM_START=0).
    from backend.service.data_desk import default_data_roots

    data_roots = [Path(root) for root in args.data_root] or default_data_roots()
    board = RocBoard(
        Path(args.runs_dir),
        sampler=sampler,
        export_dir=dirs.exports,
        warm_helper=not args.no_warm_start,
        data_roots=data_roots,
        max_upload_bytes=args.max_upload_mb * MIB,
        export_roots=[Path(root) for root in args.export_root] if args.export_root else None,
        health=args.health,
        notifier=args.notifier,
    )
    for error in board.preset_errors:
        print(f"warning: preset file {error.file} skipped: {error.problem}", file=sys.stderr)
    board.prewarm(then_doctor=True)
    # The node's slots: each GPU the app sees (or --cpu-slots): runs side by side on their own.
    from backend.runs.gpu_slots import node_gpu_addresses, node_gpus

    board.set_node(node_gpus(Path(args.sysfs_root), cpu_slot_count=args.cpu_slots), node_gpu_addresses(Path(args.sysfs_root)))
    active = board.reattach()
    if active is not None:
        print(f"Re-attached to run {active.id} ({active.state}).", file=sys.stderr)
    for state in board.live_runs():
        if not state.local:
            print(f"Re-attached to run {state.id} (Slurm job {state.job_id}, {state.state}).", file=sys.stderr)
        elif active is not None and state.id != active.id:  # side by side: every trainer still here
            print(f"Re-attached to run {state.id} ({state.state}).", file=sys.stderr)
    board.keep_queue()  # the next queued run starts when the one training here ends
    page = build_ui(board)
    page.queue(default_concurrency_limit=4)
    quiet_queue(page)
    max_upload = args.max_upload_mb * MIB
    policy = EdgePolicy(
        host_names=allowed_host_names(args.host, listed, own_host_names() if is_wildcard_bind(args.host) else ()),
        listed_names=frozenset(listed),
        login_required=credentials is not None,
        upload_body_cap=upload_body_cap(max_upload),
    )
    guard = Guard(
        policy,
        # Room for two uploads of the largest size at once (a dataset being added while
        # another is previewed) and never less than the small files' old quota.
        uploads=UploadQuota(uploaded=page.upload_file_set, staging=dirs.staging, max_bytes=max(32 * MIB, 2 * max_upload)),
        own_routes=lambda gradio_app: NoticeRoutes(LiveRoutes(gradio_app, board), board),
    )

    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, lambda *_: stop.set())  # stop like Ctrl-C: the folders get removed

    print(f"RocBoard: http://{args.host}:{args.port}  (runs in {board.runs_dir})", file=sys.stderr, flush=True)
    page.launch(
        server_name=args.host,
        server_port=args.port,
        auth=(credentials.user, credentials.password) if credentials else None,
        share=args.share,
        show_api=False,
        inbrowser=False,
        max_file_size=max_upload,
        show_error=True,
        prevent_thread_lock=True,
        # The download copies (adapter zips, exported YAML) are the only files of ours the
        # page may be handed; they live beside the staging dir, not under it.
        allowed_paths=[str(dirs.exports)],
        app_kwargs={"lifespan": guard.lifespan()},
    )
    guard.launching = False
    if page.share_url:  # the tunnel's requests name the share host
        share_host = normalize_host_name(urlsplit(page.share_url).hostname or "")
        if share_host:
            policy.host_names = policy.host_names | {share_host}
            policy.listed_names = policy.listed_names | {share_host}
    if not guard.installed:
        print("error: the request guard could not be installed on Gradio's app; refusing to serve.", file=sys.stderr)
        page.close()
        return 1
    try:
        while not stop.wait(0.5):
            pass
    except KeyboardInterrupt:
        pass
    print("RocBoard: stopping.", file=sys.stderr, flush=True)
    page.close()
    board.close()  # chat servers and exports end; the helper gets EOF; trainers keep running
    return 0
