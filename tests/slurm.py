"""A single-node Slurm on this machine, for tests: munged, slurmctld and slurmd as root on
private ports, sockets and folders (Debian's slurm-wlm and munge; tests/services installs
them). The node advertises two GPUs as plain files, so that `--gres=gpu:1` is scheduled
as on a GPU node; a job sees none (a CPU worker). Every daemon is a child of the test
process in the foreground, and is stopped, with every job, on the way out."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _config(root: Path, host: str) -> str:
    return "\n".join([
        "ClusterName=specfarmtest", f"SlurmctldHost={host}(127.0.0.1)",
        f"SlurmctldPort={_free_port()}", f"SlurmdPort={_free_port()}",
        "SlurmUser=root", "SlurmdUser=root", "AuthType=auth/munge", "CredType=cred/munge",
        f"AuthInfo=socket={root / 'munge.socket'}", "MpiDefault=none",
        # What runs as root without cgroups (docs: ../shared/REFERENCE.md §10).
        "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none",
        "JobAcctGatherType=jobacct_gather/none", "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core", "SchedulerType=sched/builtin", "ReturnToService=2",
        # Between a job's TERM (a time limit, scancel) and its KILL.
        "KillWait=10", "MinJobAge=300", "GresTypes=gpu",
        f"StateSaveLocation={root / 'state'}", f"SlurmdSpoolDir={root / 'spool'}",
        f"SlurmctldPidFile={root / 'slurmctld.pid'}", f"SlurmdPidFile={root / 'slurmd.pid'}",
        f"SlurmctldLogFile={root / 'slurmctld.log'}", f"SlurmdLogFile={root / 'slurmd.log'}",
        f"NodeName={host} NodeAddr=127.0.0.1 CPUs=2 RealMemory=2000 Gres=gpu:2 State=UNKNOWN",
        "PartitionName=test Nodes=ALL Default=YES MaxTime=INFINITE State=UP", ""])


@dataclass
class LocalSlurm:
    """The running cluster: ``env`` has SLURM_CONF for its commands (and the jobs, which
    inherit the submitter's environment)."""

    root: Path
    env: dict[str, str]

    def run(self, *argv: str, env: dict[str, str] | None = None) -> str:
        """A Slurm command's output; an AssertionError with its stderr if it failed."""
        done = subprocess.run(list(argv), capture_output=True, text=True, timeout=60,
                              env={**(env or os.environ), **self.env}, check=False)
        assert done.returncode == 0, f"{argv[0]}: {done.stderr}"
        return done.stdout

    def jobs(self) -> list[str]:
        """Job ids (array tasks as ARRAY_TASK) not yet ended."""
        return self.run("squeue", "-h", "-o", "%i").split()

    def state(self) -> str:
        """The node's state in sinfo."""
        return self.run("sinfo", "-h", "-o", "%T").strip()


def _wait(condition: object, seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if callable(condition) and condition():
            return
        time.sleep(0.2)
    raise AssertionError(f"local Slurm: timed out after {seconds:.0f} s waiting for {what}")


@contextmanager
def local_slurm(root: Path) -> Iterator[LocalSlurm]:
    """munged, slurmctld and slurmd under ``root``, stopped (jobs first) on the way out."""
    for tool in ("munged", "slurmctld", "slurmd", "sbatch"):
        assert shutil.which(tool), f"{tool} is missing: run tests/services (installs Slurm)"
    host = socket.gethostname().split(".")[0]
    for folder in ("state", "spool", "dev"):
        (root / folder).mkdir(parents=True)
    key = root / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o600)
    (root / "slurm.conf").write_text(_config(root, host))
    gpus = [root / "dev" / f"gpu{index}" for index in range(2)]
    for gpu in gpus:
        gpu.touch()
    (root / "gres.conf").write_text(f"NodeName={host} Name=gpu File={root / 'dev'}/gpu[0-1]\n")
    env = {"SLURM_CONF": str(root / "slurm.conf")}
    daemons = [subprocess.Popen(
        ["munged", "--foreground", "--force", f"--socket={root / 'munge.socket'}",
         f"--key-file={key}", f"--pid-file={root / 'munged.pid'}",
         f"--log-file={root / 'munged.log'}", f"--seed-file={root / 'munged.seed'}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)]
    slurm = LocalSlurm(root, env)
    try:
        _wait((root / "munge.socket").exists, 10, "munged's socket")
        for argv in (["slurmctld", "-D", "-i"], ["slurmd", "-D", "-N", host]):
            daemons.append(subprocess.Popen(
                [*argv, "-f", env["SLURM_CONF"]], env={**os.environ, **env},
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        _wait(lambda: _answers(slurm) == "idle", 30, "the node to be idle")
        yield slurm
    finally:
        if len(daemons) == 3:
            subprocess.run(["scancel", "--user=root"],
                           env={**os.environ, **env}, capture_output=True, timeout=30,
                           check=False)
            with contextlib.suppress(AssertionError):
                _wait(lambda: not slurm.jobs(), 30, "every job to end")
        for daemon in reversed(daemons):
            daemon.terminate()
            try:
                daemon.wait(15)
            except subprocess.TimeoutExpired:
                daemon.kill()
                daemon.wait()


def _answers(slurm: LocalSlurm) -> str:
    try:
        return slurm.state()
    except AssertionError:
        return "down"

