"""The doctor's Slurm facts, where this machine is set up to submit to a cluster (Slurm's
commands on PATH and a slurm.conf they read: backend/slurm/client.py `configured()`):

- `sinfo` answers: slurmctld is reachable, and which nodes and partitions it has;
- munge is up: `munge -n` encodes a credential and `unmunge` decodes it, on the socket
  slurm.conf names (AuthInfo=socket=...), when AuthType is auth/munge (Slurm's default);
- the runs folder is shared with the nodes: a marker file with a random token is written
  there and one job step on one node (`srun --nodes=1 --immediate=...`) reads it back, with
  the node's host name. A Slurm run starts in its run's folder on the node, so a folder the
  node does not see breaks every run. This submits a (one-second) job, so it runs only when
  asked: `app.py doctor`, the Doctor tab's Refresh; never at the app's start.

Every command is an argument list with a timeout, through the Slurm client's allow-listed
environment (backend/slurm/client.py, backend/telemetry/tool.py). What each command said is
kept in its own words (a value inside the doctor's messages).
"""

from __future__ import annotations

import os
import re
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from backend.i18n import Joined
from backend.i18n import Message as M
from backend.slurm.client import SLURM_CONF_PLACES, SlurmClient
from backend.telemetry.tool import ToolOutput, find_tool

SINFO_TIMEOUT_S = 15.0
MUNGE_TIMEOUT_S = 5.0
# The shared-folder step: srun waits at most SRUN_IMMEDIATE_S for a node (a busy cluster gives
# "unknown", not a hang), the step itself has a one-minute limit, the call SRUN_TIMEOUT_S.
SRUN_IMMEDIATE_S = 20
SRUN_TIMEOUT_S = 60.0
MARKER_PREFIX = ".rocboard-doctor-shared-"
MAX_SHOWN = 300  # characters of a command's error kept

Shared = Literal["yes", "no", "unknown", "skipped"]


@dataclass(frozen=True)
class SlurmFacts:
    configured: bool  # False: Slurm is not set up here; nothing else was asked
    conf: str = ""  # the slurm.conf the commands read
    sinfo_error: str = ""  # "": sinfo answered
    nodes: tuple[tuple[str, str], ...] = ()  # (node, state) as sinfo gave them
    partitions: tuple[str, ...] = ()  # the default one marked "*", as sinfo marks it
    auth: str = ""  # slurm.conf's AuthType ("" : not set, Slurm's default auth/munge)
    munge_socket: str = ""  # AuthInfo's socket= ("" : munge's default)
    munge_error: str = ""  # "": munge -n | unmunge worked (or was not asked: see munge_checked)
    munge_checked: bool = False
    runs_dir: str = ""
    shared: Shared = "skipped"
    shared_node: str = ""  # the node's host name, when the step ran
    shared_detail: str = ""  # why "no" / "unknown" / "skipped", in the commands' words


def _first_line(output: ToolOutput) -> str:
    """What a command said when it failed: run_tool's own reason (a message: not found, timed
    out), else its last line of output."""
    if output.error:
        return output.error
    lines = [line.strip() for line in (output.stderr or output.stdout).splitlines() if line.strip()]
    return (lines[-1] if lines else f"exit code {output.returncode}")[:MAX_SHOWN]


def conf_path(env: Mapping[str, str]) -> Path | None:
    named = env.get("SLURM_CONF")
    places = [Path(named)] if named else [Path(place) for place in SLURM_CONF_PLACES]
    return next((place for place in places if place.is_file()), None)


def read_auth(conf: Path | None) -> tuple[str, str]:
    """(AuthType, the munge socket of AuthInfo) from slurm.conf; "" where it says nothing."""
    auth, socket = "", ""
    try:
        text = conf.read_text(errors="replace")[:1_000_000] if conf else ""
    except OSError:
        return auth, socket
    for line in text.splitlines():
        key, _, value = line.split("#", 1)[0].strip().partition("=")
        if key.strip().lower() == "authtype":
            auth = value.strip()
        elif key.strip().lower() == "authinfo":
            found = re.search(r"(?:^|,)\s*socket=([^,\s]+)", value)
            socket = found.group(1) if found else socket
    return auth, socket


def parse_sinfo_nodes(text: str) -> tuple[tuple[tuple[str, str], ...], tuple[str, ...]]:
    """`sinfo --noheader --Node --format=%N|%P|%T` -> ((node, state), ...), (partition, ...)."""
    nodes: dict[str, str] = {}
    partitions: dict[str, None] = {}
    for line in text.splitlines():
        parts = line.strip().split("|")
        if len(parts) != 3 or not parts[0]:
            continue
        nodes.setdefault(parts[0], parts[2])
        partitions.setdefault(parts[1], None)
    return tuple(nodes.items()), tuple(partitions)


def check_munge(client: SlurmClient, socket: str) -> str:
    """"" when a credential made by `munge -n` decodes with `unmunge`, else why not."""
    option = (f"--socket={socket}",) if socket else ()
    encoded = client.run("munge", "-n", *option, timeout_s=MUNGE_TIMEOUT_S)
    if encoded.returncode != 0 or not encoded.stdout.strip():
        return Joined(("munge -n", _first_line(encoded)), ": ")
    decoded = client.run("unmunge", *option, timeout_s=MUNGE_TIMEOUT_S, input_text=encoded.stdout)
    if decoded.returncode != 0:
        return Joined(("unmunge", _first_line(decoded)), ": ")
    return ""


def check_shared(client: SlurmClient, runs_dir: Path) -> tuple[Shared, str, str]:
    """(verdict, node host name, detail): can a job step on a node read a file written here?"""
    if find_tool("srun", client.env) is None:
        return "skipped", "", M("doctor.shared.no_srun")
    if not runs_dir.is_dir():
        return "skipped", "", M("doctor.shared.no_runs_dir", runs_dir=str(runs_dir))
    token = secrets.token_hex(16)
    marker = runs_dir.resolve() / f"{MARKER_PREFIX}{token[:8]}"
    try:
        # a new name, created here (O_EXCL: never an existing file or a link's target)
        descriptor = os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o644)
        with os.fdopen(descriptor, "w") as handle:
            handle.write(token + "\n")
    except OSError as error:
        return "unknown", "", M("doctor.shared.cannot_write", path=str(marker), error=error.strerror or str(error))
    try:
        # `cat MARKER /proc/sys/kernel/hostname`: the token, then the node's name (cat goes on
        # to the second file when the first is missing, so a failure names the node too)
        output = client.run(
            "srun", "--nodes=1", "--ntasks=1", f"--immediate={SRUN_IMMEDIATE_S}", "--time=1", "--job-name=rocboard-doctor",
            "--chdir=/", "--quiet", "cat", str(marker), "/proc/sys/kernel/hostname",
            timeout_s=SRUN_TIMEOUT_S,
        )
    finally:
        try:
            marker.unlink()
        except OSError:
            pass
    lines = [line.strip() for line in output.stdout.splitlines() if line.strip()]
    if lines and lines[0] == token:
        return "yes", (lines[1] if len(lines) > 1 else ""), ""
    if output.returncode is not None and "No such file" in output.stderr:
        return "no", (lines[-1] if lines else ""), _first_line(output)
    return "unknown", "", _first_line(output)


def gather_slurm(runs_dir: Path | None, env: Mapping[str, str] | None = None, client: SlurmClient | None = None, job: bool = True) -> SlurmFacts:
    """The cluster's facts, where Slurm is set up here. `job`: the shared-folder check may
    start its one-node job step (the doctor's command and the Doctor tab's Refresh); without
    it (the app's background gather at start) no job is submitted and the check says so."""
    client = client or SlurmClient(env)
    if not client.configured():
        return SlurmFacts(False)
    conf = conf_path(client.env)
    auth, socket = read_auth(conf)
    shown_runs = str(runs_dir.resolve()) if runs_dir is not None else ""
    sinfo = client.run("sinfo", "--noheader", "--Node", "--format=%N|%P|%T", timeout_s=SINFO_TIMEOUT_S)
    sinfo_error = "" if sinfo.returncode == 0 else _first_line(sinfo)
    nodes, partitions = parse_sinfo_nodes(sinfo.stdout) if not sinfo_error else ((), ())
    munge_checked = auth.lower() in ("", "auth/munge")
    munge_error = check_munge(client, socket) if munge_checked else ""
    if sinfo_error:
        shared: tuple[Shared, str, str] = ("skipped", "", M("doctor.shared.sinfo_failed"))
    elif runs_dir is None:
        shared = ("skipped", "", M("doctor.shared.no_runs_folder"))
    elif not job:
        shared = ("skipped", "", M("doctor.shared.on_request"))
    else:
        shared = check_shared(client, runs_dir)
    return SlurmFacts(
        True, str(conf or ""), sinfo_error, nodes, partitions, auth, socket, munge_error, munge_checked, shown_runs, *shared
    )


__all__ = ["SlurmFacts", "check_munge", "check_shared", "gather_slurm", "parse_sinfo_nodes", "read_auth"]
