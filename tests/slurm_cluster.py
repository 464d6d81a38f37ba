"""A real one-node Slurm cluster on this machine, for the tests: munged, MariaDB, slurmdbd, slurmctld, slurmd.

Debian's `slurm-wlm`, `slurmdbd`, `munge` and `mariadb-server` packages (`.ci/run` installs them).
Everything lives in one folder: the configuration, the state, the logs, the MUNGE key and socket,
the database files; the daemons listen on free loopback ports, run as root and stop on exit.
The node is this machine's CPUs under the name `gpurig-test` (no GPU, no cgroups).

    with slurm_cluster(tmp_path) as cluster:
        job = cluster.sbatch(script_path, cwd=tmp_path)
        state = cluster.wait(job, timeout=300)       # "COMPLETED", as sacct says
        cluster.env                                  # SLURM_CONF etc. for sbatch/squeue/sacct/scancel

With `hosts` (two network namespaces from tests/netns.py) the cluster has two nodes, `n1` and `n2`,
one slurmd in each namespace with its own host name (a UTS namespace) and a hosts file naming both
(bind-mounted in a mount namespace of its own), the controller, the accounting and MUNGE on `n1`.
Commands (`cmd`, `sbatch`) then run on `n1`.

`slurm_unavailable()` says why such a cluster cannot run here (a program missing, not root), or None.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

NODE = "gpurig-test"
PARTITION = "cpu"
PROGRAMS = ("munged", "mungekey", "mariadbd", "mariadb-install-db", "slurmdbd", "slurmctld", "slurmd",
            "sbatch", "sacct", "scancel", "sacctmgr")
_END_STATES = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "OUT_OF_MEMORY",
               "BOOT_FAIL", "DEADLINE"}


def slurm_unavailable() -> str | None:
    missing = [p for p in PROGRAMS if shutil.which(p) is None and not Path("/usr/sbin", p).exists()]
    if missing:
        return f"Slurm test cluster needs {', '.join(missing)} (Debian: slurm-wlm slurmdbd munge mariadb-server)"
    if os.geteuid() != 0:
        return "the Slurm test cluster runs its daemons as root"
    return None


def _which(name: str) -> str:
    return shutil.which(name) or str(Path("/usr/sbin", name))


def _free_ports(n: int) -> list[int]:
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _wait_for(check, what: str, timeout: float, logs: list[Path]) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if check():
            return
        time.sleep(0.2)
    tails = "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-2000:]}" for p in logs if p.exists())
    raise RuntimeError(f"{what} did not come up within {timeout:.0f} s\n{tails}")


@dataclass
class Cluster:
    root: Path
    env: dict[str, str]
    pid_files: list[Path] = field(default_factory=list)  # the daemons, in the order they started
    on_node: list[list[str]] = field(default_factory=lambda: [[]])  # argv prefix that runs a command on node i
    nodes: tuple[str, ...] = (NODE,)

    def cmd(self, *argv: str, check: bool = True, timeout: float = 60, **kw) -> subprocess.CompletedProcess:
        return subprocess.run([*self.on_node[0], *argv], env=self.env, capture_output=True, text=True,
                              timeout=timeout, check=check, **kw)

    def sbatch(self, script: Path, cwd: Path, *extra: str) -> str:
        out = self.cmd("sbatch", "--parsable", *extra, str(script), cwd=cwd)
        return out.stdout.strip().split(";")[0]

    def sacct_state(self, job: str) -> str | None:
        """The job's state in the accounting database (the allocation's line), or None before it is there."""
        out = self.cmd("sacct", "-n", "-X", "-P", "-j", job, "-o", "State", check=False)
        lines = [ln.strip() for ln in out.stdout.splitlines() if ln.strip()]
        return lines[0].split()[0] if lines else None

    def squeue_state(self, job: str) -> str | None:
        out = self.cmd("squeue", "-h", "-j", job, "-o", "%T", check=False)
        return out.stdout.strip() or None

    def wait(self, job: str, timeout: float = 300, states: set[str] = _END_STATES) -> str:
        """Wait until sacct shows the job in one of `states`; its state."""
        end = time.monotonic() + timeout
        state = None
        while time.monotonic() < end:
            state = self.sacct_state(job)
            if state in states:
                return state
            time.sleep(1)
        raise TimeoutError(f"job {job} still {state} after {timeout:.0f} s\n{self.logs()}")

    def logs(self) -> str:
        return "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-3000:]}"
                         for p in sorted((self.root / "log").glob("*.log")))

    def stop(self) -> None:
        """SIGTERM each daemon, last started first; SIGKILL one that is still there after 20 s."""
        for pid_file in reversed(self.pid_files):
            with contextlib.suppress(FileNotFoundError, ValueError):
                pid = int(pid_file.read_text().split()[0])
                for sig, wait in ((signal.SIGTERM, 20.0), (signal.SIGKILL, 5.0)):
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, sig)
                    end = time.monotonic() + wait
                    while _alive(pid) and time.monotonic() < end:
                        time.sleep(0.1)
                    if not _alive(pid):
                        break


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with contextlib.suppress(OSError):  # a zombie of ours is not running
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[-1][0] != "Z"
    return True


def _start(cluster: Cluster, name: str, argv: list[str], pid_file: Path, node: int = 0) -> None:
    """Start a daemon on node `node`, detached from the tests (`setsid -f`: it is not their child);
    it writes `pid_file`."""
    log = cluster.root / "log" / f"{name}.log"
    with open(log, "ab") as out:
        subprocess.run(["setsid", "-f", *cluster.on_node[node], *argv], env=cluster.env, stdout=out,
                       stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, check=True, timeout=30)
    cluster.pid_files.append(pid_file)


def _mariadb(cluster: Cluster, port: int) -> Path:
    data, sock = cluster.root / "db", cluster.root / "run" / "mysqld.sock"
    subprocess.run([_which("mariadb-install-db"), f"--datadir={data}", "--user=root", "--auth-root-authentication-method=normal",
                    "--skip-test-db"], check=True, capture_output=True, timeout=120)
    pid = cluster.root / "run" / "mysqld.pid"
    _start(cluster, "mariadb", [_which("mariadbd"), f"--datadir={data}", f"--socket={sock}", f"--port={port}",
                                "--bind-address=127.0.0.1", "--user=root", f"--pid-file={pid}",
                                "--skip-log-bin", "--innodb-buffer-pool-size=32M", "--skip-name-resolve"], pid)
    _wait_for(sock.exists, "MariaDB", 60, [cluster.root / "log" / "mariadb.log"])
    return sock


def _node_lines(cluster: Cluster, addrs: tuple[str, ...]) -> list[str]:
    cpus = os.cpu_count() or 1
    return [f"NodeName={name} NodeAddr={addr} CPUs={cpus} State=UNKNOWN" for name, addr in zip(cluster.nodes, addrs, strict=True)]


@contextlib.contextmanager
def slurm_cluster(root: Path, hosts=None) -> Iterator[Cluster]:
    root = Path(root)
    for sub in ("etc", "log", "run", "state", "spool", "munge"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    ctld_port, slurmd_port, dbd_port, db_port = _free_ports(4)
    conf = root / "etc" / "slurm.conf"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "SBATCH_", "SALLOC_", "SRUN_"))}
    env["SLURM_CONF"] = str(conf)
    cluster = Cluster(root, env)
    addrs: tuple[str, ...] = ("127.0.0.1",)
    if hosts is not None:
        cluster.nodes, addrs = ("n1", "n2"), tuple(hosts.addrs)
        table = root / "etc" / "hosts"
        table.write_text("127.0.0.1 localhost\n" + "".join(f"{a} {n}\n" for a, n in zip(addrs, cluster.nodes, strict=True)))
        # Each node: its network namespace, its own host name and hosts file, as on two machines.
        # (nsenter, not `ip netns exec`, which would mount a /sys without the cgroups slurmd reads.)
        cluster.on_node = [["nsenter", f"--net=/run/netns/{ns}", "unshare", "--uts", "--mount", "sh", "-c",
                            'mount --bind "$1" /etc/hosts && hostname "$0" && shift && exec "$@"', name, str(table)]
                           for ns, name in zip(hosts.names, cluster.nodes, strict=True)]
    for name in cluster.nodes:
        (root / "spool" / name).mkdir(parents=True, exist_ok=True)
    try:
        # MUNGE: its own key, socket and files.
        key, munge_sock = root / "munge" / "munge.key", root / "run" / "munge.socket"
        subprocess.run([_which("mungekey"), "--create", f"--keyfile={key}", "--force"], check=True, capture_output=True)
        key.chmod(0o600)
        (root / "munge").chmod(0o700)
        _start(cluster, "munged", [_which("munged"), "--foreground", "--force", f"--key-file={key}",
                                   f"--socket={munge_sock}", f"--pid-file={root / 'run' / 'munged.pid'}",
                                   f"--log-file={root / 'log' / 'munged-file.log'}",
                                   f"--seed-file={root / 'munge' / 'munged.seed'}"], root / "run" / "munged.pid")
        _wait_for(munge_sock.exists, "munged", 30, [root / "log" / "munged.log"])

        db_sock = _mariadb(cluster, db_port)
        auth = f"socket={munge_sock}"
        dbd_conf = root / "etc" / "slurmdbd.conf"
        dbd_conf.write_text("\n".join([
            f"AuthType=auth/munge\nAuthInfo={auth}", "DbdHost=localhost", "DbdAddr=127.0.0.1", f"DbdPort={dbd_port}",
            "SlurmUser=root", f"LogFile={root / 'log' / 'slurmdbd.log'}", f"PidFile={root / 'run' / 'slurmdbd.pid'}",
            "StorageType=accounting_storage/mysql", "StorageHost=localhost", f"StorageLoc=slurm_acct_{ctld_port}",
            "StorageUser=root",
            "DebugLevel=info", "",
        ]))
        dbd_conf.chmod(0o600)
        env["MYSQL_UNIX_PORT"] = str(db_sock)  # the MySQL client library's socket when StorageHost is localhost
        conf.write_text("\n".join([
            "ClusterName=gpurig-test",
            f"SlurmctldHost={'localhost' if hosts is None else cluster.nodes[0]}({addrs[0]})",
            f"SlurmctldPort={ctld_port}",
            f"SlurmdPort={slurmd_port}",
            "SlurmUser=root",
            "SlurmdUser=root",
            f"AuthType=auth/munge\nAuthInfo={auth}",
            "CredType=cred/munge",
            f"StateSaveLocation={root / 'state'}",
            f"SlurmdSpoolDir={root / 'spool' / '%n'}",
            f"SlurmctldPidFile={root / 'run' / 'slurmctld.pid'}",
            f"SlurmdPidFile={root / 'run' / 'slurmd-%n.pid'}",
            f"SlurmctldLogFile={root / 'log' / 'slurmctld.log'}",
            f"SlurmdLogFile={root / 'log' / 'slurmd-%n.log'}",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/slurmdbd",
            "AccountingStorageHost=localhost",
            f"AccountingStoragePort={dbd_port}",
            f"AccountingStoragePass={munge_sock}",  # with slurmdbd: the MUNGE socket, not a password
            "SchedulerType=sched/backfill",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core",
            "ReturnToService=2",
            "MpiDefault=none",
            "KillWait=30",
            "MinJobAge=600",
            "SlurmctldTimeout=30",
            "SlurmdTimeout=60",
            *_node_lines(cluster, addrs),
            f"PartitionName={PARTITION} Nodes={','.join(cluster.nodes)} Default=YES MaxTime=INFINITE State=UP",
            "",
        ]))
        # slurmdbd reads slurmdbd.conf beside $SLURM_CONF.
        _start(cluster, "slurmdbd", [_which("slurmdbd"), "-D"], root / "run" / "slurmdbd.pid")
        _wait_for(lambda: _port_open(cluster, dbd_port), "slurmdbd", 60,
                  [root / "log" / "slurmdbd.log", root / "log" / "mariadb.log"])
        _start(cluster, "slurmctld", [_which("slurmctld"), "-D", "-i", "-f", str(conf)], root / "run" / "slurmctld.pid")
        _wait_for(lambda: _port_open(cluster, ctld_port), "slurmctld", 60, [root / "log" / "slurmctld.log"])
        for i, name in enumerate(cluster.nodes):
            _start(cluster, f"slurmd-{name}", [_which("slurmd"), "-D", "-N", name, "-f", str(conf)],
                   root / "run" / f"slurmd-{name}.pid", node=i)

        def nodes_idle() -> bool:
            out = cluster.cmd("sinfo", "-h", "-N", "-o", "%N %t", check=False)
            states = dict(ln.split() for ln in out.stdout.splitlines() if len(ln.split()) == 2)
            return all(states.get(n) in ("idle", "mix", "alloc") for n in cluster.nodes)

        _wait_for(nodes_idle, "slurmd (every node idle in sinfo)", 60,
                  [*(root / "log").glob("slurmd*.log"), root / "log" / "slurmctld.log"])
        yield cluster
    finally:
        with contextlib.suppress(Exception):
            cluster.cmd("scancel", "--full", "-u", "root", check=False, timeout=10)
        cluster.stop()


def _port_open(cluster: Cluster, port: int) -> bool:
    """Whether a daemon listens on `port` of node 0's loopback (inside its namespace, if it has one)."""
    if cluster.on_node[0]:
        probe = f"import socket,sys; s=socket.socket(); s.settimeout(0.5); sys.exit(s.connect_ex(('127.0.0.1', {port})))"
        return subprocess.run([*cluster.on_node[0], sys.executable, "-c", probe], capture_output=True,
                              timeout=30).returncode == 0
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0
