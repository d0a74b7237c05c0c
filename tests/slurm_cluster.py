"""A real Slurm cluster on this one machine, for the tests (and for trying RocBoard's Slurm
runs by hand): slurmctld and two slurmd daemons (`-N n1`, `-N n2`), all on 127.0.0.1 with
ports of their own, authenticated by a munged with its own socket and a generated key, and
(when Debian's slurmdbd and mariadb-server are installed) Slurm's accounting: a MariaDB of
its own, slurmdbd, the account `research` as root's default, and AccountingStorageEnforce=
associations, so that sacct answers and an unknown account is refused as on a real cluster.

Everything lives in one folder (the config, munge's key and socket, the daemons' state,
spool, pid and log files): nothing of the machine's own Slurm or munge is touched, and two
clusters (a developer's and a test run's) never meet. Clients reach it with
`SLURM_CONF=<folder>/slurm.conf`, which is what `env()` gives.

    python -m tests.slurm_cluster start DIR   # prints the export line; stays up
    python -m tests.slurm_cluster stop DIR

It needs root (slurmd starts job steps as their user) and Debian's `slurm-wlm` and `munge`
packages (`.ci/run` installs them). `unavailable()` says, in words, what is missing.

Why these settings: `proctrack/linuxproc`, `task/none` and no cgroups (a container has no
cgroup delegation); `SlurmdParameters=config_overrides` lets two nodes claim the same two
cores; `SelectTypeParameters=CR_Core` makes CPUs, not memory, the consumable (a job that
asks no memory does not take a whole node's); `MinJobAge=300` keeps an ended job in
`scontrol show job` for five minutes, as Slurm's default does; `KillWait=10`: a cancelled or
timed-out job step gets SIGTERM, then SIGKILL 10 s later.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

NODE_NAMES = ("n1", "n2")
PARTITION = "debug"  # the default partition: both nodes, no time limit
SHORT_PARTITION = "short"  # one node, at most 2 minutes: a longer --time is refused up front
SHORT_MAX_TIME = "00:02:00"
NODE_CPUS = 2
NODE_MEMORY_MB = 4000
START_TIMEOUT_S = 60.0
DAEMONS = ("slurmctld", "slurmd", "munged", "slurmdbd", "mariadbd")
ACCOUNT = "research"  # root's default account when accounting is on


def accounting_unavailable() -> str:
    """Why the cluster starts without accounting ("" when it has it)."""
    missing = [name for name in ("slurmdbd", "mariadbd", "mariadb-install-db", "mariadb", "sacctmgr", "sacct") if shutil.which(name) is None]
    if missing:
        return f"{', '.join(missing)} not found: install Debian's slurmdbd and mariadb-server packages (.ci/run does)"
    return ""


def unavailable() -> str:
    """Why a cluster cannot start here ("" when it can)."""
    missing = [name for name in ("slurmctld", "slurmd", "munged", "sbatch", "squeue", "scontrol", "scancel", "sinfo") if shutil.which(name) is None]
    if missing:
        return f"{', '.join(missing)} not found: install Debian's slurm-wlm and munge packages (.ci/run does)"
    if os.geteuid() != 0:
        return "the test cluster's slurmd must run as root (it starts each job step as its user)"
    return ""


def _free_ports(count: int) -> list[int]:
    sockets, ports = [], []
    try:
        for _ in range(count):
            probe = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            probe.bind(("127.0.0.1", 0))
            sockets.append(probe)
            ports.append(probe.getsockname()[1])
    finally:
        for probe in sockets:
            probe.close()
    return ports


class SlurmCluster:
    """One slurmctld and a slurmd per node name, in `workdir`."""

    def __init__(self, workdir: Path, nodes: tuple[str, ...] = NODE_NAMES, accounting: bool | None = None):
        self.workdir = Path(workdir).resolve()
        self.nodes = nodes
        self.conf = self.workdir / "slurm.conf"
        self.munge_dir = self.workdir / "munge"
        self.socket = self.munge_dir / "munge.socket"
        self.db_dir = self.workdir / "db"
        self.accounting = accounting_unavailable() == "" if accounting is None else accounting

    # --- what clients need ------------------------------------------------------------

    def env(self) -> dict[str, str]:
        return {"SLURM_CONF": str(self.conf)}

    def run(self, *argv: str, timeout: float = 30.0) -> subprocess.CompletedProcess:
        """A Slurm client command against this cluster (its output as text)."""
        return subprocess.run(list(argv), env={**os.environ, **self.env()}, capture_output=True, text=True, timeout=timeout)

    # --- start and stop -----------------------------------------------------------------

    def write_config(self) -> None:
        for sub in ("munge", "state", "spool", "log"):
            (self.workdir / sub).mkdir(parents=True, exist_ok=True)
        os.chmod(self.munge_dir, 0o755)  # munged wants its socket's folder searchable
        key = self.munge_dir / "munge.key"
        if not key.exists():
            key.write_bytes(secrets.token_bytes(128))
            os.chmod(key, 0o600)
        ctld_port, self.dbd_port, self.db_port, *node_ports = _free_ports(3 + len(self.nodes))
        host = socket.gethostname()
        lines = [
            "ClusterName=rocboard-test",
            "SlurmctldHost=localhost(127.0.0.1)",
            f"SlurmctldPort={ctld_port}",
            "SlurmUser=root",
            "SlurmdUser=root",
            "AuthType=auth/munge",
            f"AuthInfo=socket={self.socket}",
            "CredType=cred/munge",
            f"StateSaveLocation={self.workdir / 'state'}",
            f"SlurmdSpoolDir={self.workdir / 'spool'}/%n",
            f"SlurmctldPidFile={self.workdir / 'slurmctld.pid'}",
            f"SlurmdPidFile={self.workdir}/slurmd-%n.pid",
            f"SlurmctldLogFile={self.workdir / 'log' / 'slurmctld.log'}",
            f"SlurmdLogFile={self.workdir}/log/slurmd-%n.log",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "MpiDefault=none",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core",
            "SchedulerType=sched/backfill",
            "ReturnToService=2",
            "SlurmdParameters=config_overrides",
            "JobAcctGatherType=jobacct_gather/none",
        ]
        if self.accounting:
            lines += [
                "AccountingStorageType=accounting_storage/slurmdbd",
                "AccountingStorageHost=localhost",
                f"AccountingStoragePort={self.dbd_port}",
                "AccountingStorageEnforce=associations",
                f"AccountingStoragePass={self.socket}",  # the munge socket of the slurmdbd connection
            ]
        else:
            lines.append("AccountingStorageType=accounting_storage/none")
        lines += [
            "MinJobAge=300",
            "KillWait=10",
            "InactiveLimit=0",
            "SlurmctldTimeout=30",
            "SlurmdTimeout=60",
        ]
        for name, port in zip(self.nodes, node_ports, strict=True):
            lines.append(f"NodeName={name} NodeHostname={host} NodeAddr=127.0.0.1 Port={port} CPUs={NODE_CPUS} RealMemory={NODE_MEMORY_MB} State=UNKNOWN")
        lines.append(f"PartitionName={PARTITION} Nodes={','.join(self.nodes)} Default=YES MaxTime=INFINITE State=UP")
        lines.append(f"PartitionName={SHORT_PARTITION} Nodes={self.nodes[0]} MaxTime={SHORT_MAX_TIME} State=UP")
        self.conf.write_text("\n".join(lines) + "\n", encoding="utf-8")
        if self.accounting:
            self.db_password = secrets.token_hex(12)
            dbd = self.workdir / "slurmdbd.conf"  # slurmdbd reads it from slurm.conf's folder
            dbd.write_text(
                "\n".join(
                    [
                        "AuthType=auth/munge",
                        f"AuthInfo=socket={self.socket}",
                        "DbdHost=localhost",
                        "DbdAddr=127.0.0.1",
                        f"DbdPort={self.dbd_port}",
                        "SlurmUser=root",
                        "StorageType=accounting_storage/mysql",
                        "StorageHost=127.0.0.1",
                        f"StoragePort={self.db_port}",
                        "StorageUser=slurm",
                        f"StoragePass={self.db_password}",
                        "StorageLoc=slurm_acct_db",
                        f"LogFile={self.workdir / 'log' / 'slurmdbd.log'}",
                        f"PidFile={self.workdir / 'slurmdbd.pid'}",
                    ]
                )
                + "\n",
                encoding="utf-8",
            )
            os.chmod(dbd, 0o600)

    def start(self) -> SlurmCluster:
        why = unavailable()
        if why:
            raise RuntimeError(why)
        self.stop()  # a cluster left behind in this folder by a killed test run
        self.write_config()
        env = {**os.environ, **self.env()}
        subprocess.run(
            [
                "munged", "--force", f"--socket={self.socket}", f"--key-file={self.munge_dir / 'munge.key'}",
                f"--pid-file={self.munge_dir / 'munged.pid'}", f"--log-file={self.munge_dir / 'munged.log'}",
                f"--seed-file={self.munge_dir / 'munged.seed'}",
            ],
            check=True, env=env, capture_output=True, timeout=30,
        )  # fmt: skip
        if self.accounting:
            self._start_accounting(env)
        # -c: a clean start (no jobs of an earlier cluster in this folder's state).
        subprocess.run(["slurmctld", "-c"], check=True, env=env, capture_output=True, timeout=30)
        self._wait(lambda: self.run("scontrol", "ping").returncode == 0, "slurmctld to answer")
        for name in self.nodes:
            subprocess.run(["slurmd", "-N", name], check=True, env=env, capture_output=True, timeout=30)
        self._wait(self._nodes_idle, "every node to be idle")
        return self

    def _start_accounting(self, env: dict[str, str]) -> None:
        """A MariaDB of this folder's own (TCP on 127.0.0.1), slurmdbd on it, and the cluster,
        the account and root's association registered."""
        data = self.db_dir / "data"
        if not data.exists():
            self.db_dir.mkdir(parents=True, exist_ok=True)
            subprocess.run(
                ["mariadb-install-db", "--no-defaults", f"--datadir={data}", "--user=root", "--auth-root-authentication-method=normal", "--skip-test-db"],
                check=True, capture_output=True, timeout=120,
            )  # fmt: skip
        db_socket = self.db_dir / "mysql.sock"
        subprocess.Popen(
            [
                "mariadbd", "--no-defaults", f"--datadir={data}", f"--socket={db_socket}", f"--port={self.db_port}",
                "--bind-address=127.0.0.1", "--user=root", f"--pid-file={self.db_dir / 'mariadbd.pid'}",
                f"--log-error={self.workdir / 'log' / 'mariadbd.log'}",
            ],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip
        sql = (
            f"CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY '{self.db_password}'; "
            f"ALTER USER 'slurm'@'127.0.0.1' IDENTIFIED BY '{self.db_password}'; "
            "GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1'; FLUSH PRIVILEGES;"
        )
        self._wait(lambda: subprocess.run(["mariadb", "--no-defaults", f"--socket={db_socket}", "-uroot", "-e", sql], capture_output=True, timeout=10).returncode == 0, "MariaDB to answer")
        subprocess.run(["slurmdbd"], check=True, env=env, capture_output=True, timeout=30)
        self._wait(lambda: self.run("sacctmgr", "--noheader", "show", "cluster").returncode == 0, "slurmdbd to answer")
        for command in (
            ["sacctmgr", "-i", "add", "cluster", "rocboard-test"],
            ["sacctmgr", "-i", "add", "account", ACCOUNT, "Description=tests", "Organization=rocboard"],
            ["sacctmgr", "-i", "add", "user", "root", f"DefaultAccount={ACCOUNT}"],
        ):
            self.run(*command)  # "Nothing new added" when a restarted cluster has them already

    def _nodes_idle(self) -> bool:
        answer = self.run("sinfo", "--noheader", "--Node", "--format=%N %t", "--partition", PARTITION)
        states = dict(line.split() for line in answer.stdout.splitlines() if line.strip())
        return answer.returncode == 0 and all(states.get(name) == "idle" for name in self.nodes)

    def _wait(self, predicate, what: str) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            try:
                if predicate():
                    return
            except (OSError, subprocess.SubprocessError, ValueError):
                pass
            time.sleep(0.3)
        raise RuntimeError(f"the test Slurm cluster did not start: timed out waiting for {what}; see {self.workdir / 'log'}")

    def cancel_all(self) -> None:
        """Cancels every job (the tests' leftovers) and waits for them to end."""
        if not self.conf.exists():
            return
        self.run("scancel", "--full", "--user", "root")
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            answer = self.run("squeue", "--noheader", "--format=%i")
            if answer.returncode != 0 or not answer.stdout.strip():
                return
            time.sleep(0.5)

    def stop(self) -> None:
        """Stops the daemons of this folder (by their pid files), jobs first."""
        if self.conf.exists() and (self.workdir / "slurmctld.pid").exists():
            try:
                self.cancel_all()
            except (OSError, subprocess.SubprocessError):
                pass
        pid_files = [
            self.workdir / "slurmctld.pid",
            *(self.workdir / f"slurmd-{name}.pid" for name in self.nodes),
            self.workdir / "slurmdbd.pid",
            self.db_dir / "mariadbd.pid",
            self.munge_dir / "munged.pid",
        ]
        pids = []
        for pid_file in pid_files:
            try:
                pid = int(pid_file.read_text().strip())
                os.kill(pid, signal.SIGTERM)
                pids.append(pid)
            except (OSError, ValueError):
                continue
        deadline = time.monotonic() + 15
        for pid in pids:
            while time.monotonic() < deadline:
                try:
                    os.kill(pid, 0)
                except OSError:
                    break
                time.sleep(0.1)
            else:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass


@contextmanager
def running_cluster(workdir: Path) -> Iterator[SlurmCluster]:
    """A cluster started in `workdir`, SLURM_CONF pointing at it (for this process and what it
    starts) until the block ends, then stopped."""
    cluster = SlurmCluster(workdir).start()
    previous = os.environ.get("SLURM_CONF")
    os.environ["SLURM_CONF"] = str(cluster.conf)
    try:
        yield cluster
    finally:
        if previous is None:
            os.environ.pop("SLURM_CONF", None)
        else:
            os.environ["SLURM_CONF"] = previous
        cluster.stop()


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] not in ("start", "stop"):
        print("usage: python -m tests.slurm_cluster start|stop DIR", file=sys.stderr)
        return 2
    cluster = SlurmCluster(Path(argv[1]))
    if argv[0] == "start":
        cluster.start()
        print(f"export SLURM_CONF={cluster.conf}")
    else:
        cluster.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
