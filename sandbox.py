"""OS-level confinement of a generated agent's process: the second wall behind codeguard.

Static validation is not a sandbox, so the executor asks this module how to launch each agent.
`prepare()` answers with a `Launch`: a command line, a preexec hook, a uid/gid to drop to, the fds
to pass on, and the layers that are really active. An agent has one of two networks:

- **tcp** (`api_url=`): today's agents, which call the API themselves. TCP to the API's port
  only (Landlock), no other socket kinds (seccomp), the host's network namespace (bwrap).
- **none** (`broker_fd=`, or neither): the agent reaches the model only through one inherited,
  connected AF_UNIX stream socket to a broker in the parent. It can create no socket, connect,
  bind, listen or accept nothing, and send only where that socket already goes; bwrap gives it an
  empty network namespace.

Each layer is used when the platform has it (probed once per process):

- **landlock**: a trusted bootstrap (sandbox_boot.py, run as the child's main script) restricts
  the filesystem to read-only system, interpreter and agent paths plus a read-write scratch
  directory (no /proc at all), TCP to the API's port only or to none (ABI >= 4), and signals and
  abstract sockets to the sandbox (ABI >= 6).
- **seccomp**: the same bootstrap then loads a filter (the system libseccomp, through ctypes) that
  refuses new processes, exec, ptrace, mounts, namespaces, kernel-wide knobs, chmod/chown/utime,
  System V and POSIX IPC, TCP Fast Open and interface ioctls, and the sockets the network forbids.
  Refusals are EPERM, so agents die with a readable `PermissionError`, not a signal.
- **caps**: the bootstrap drops every capability (bounding and ambient sets too), so an agent
  started by root is a capability-less uid 0.
- **pids**: at most TASK_LIMIT processes and threads per agent, its own count, so one agent's
  thread bomb cannot starve its siblings or the host. A child running as root escapes
  RLIMIT_NPROC, so it joins a cgroup v1 pids group of its own (made here, joined in the preexec
  hook before bwrap forks, removed once its agent is gone); any other uid gets RLIMIT_NPROC in a
  user namespace of its own, where the kernel counts its tasks alone (sandbox_boot.py).
- **uid**: a root parent drops the child to an unprivileged uid when it can reach the interpreter.
- **bwrap**: bubblewrap as an outer layer, with allow-list binds only and no capabilities.

This module is the parent's half: it probes, decides and builds the command line, and may import
whatever it likes. The child's half is sandbox_boot.py (with sandbox_seccomp.py, the filter),
kept apart because everything it imports is paid again by every agent start; the Landlock,
seccomp and capability mechanisms live there, once, and are imported here for probing. The
executor's own wall (environment, scratch cwd, process group, rlimits) is not repeated in either.
"""

import atexit
import errno
import functools
import itertools
import os
import shutil
import socket
import stat
import subprocess
import sys
import threading
import weakref
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from agentgod import sandbox_boot, sandbox_seccomp
from agentgod.attachments import file_identity
from agentgod.kinds import SandboxMode

MODES: tuple[str, ...] = tuple(SandboxMode)
LAYERS = ("landlock", "seccomp", "caps", "pids", "uid", "bwrap")
DROP_UID = DROP_GID = 65534  # nobody/nogroup: owns no files, so it can change none
# Processes and threads per agent, bwrap's two included. RLIMIT_AS (2 GiB) allows about 250
# threads at the default 8 MiB stack; far more with small stacks, which this bounds.
TASK_LIMIT = 256
BOOT_FAILURE_EXIT = sandbox_boot.BOOT_FAILURE_EXIT  # a wall asked for could not be raised
_BOOTSTRAP = Path(sandbox_boot.__file__).resolve()
_CHILD_FILES = tuple(Path(path).resolve() for path in sandbox_boot.CHILD_FILES)
_TRUE = next((p for p in ("/usr/bin/true", "/bin/true") if os.path.exists(p)), "true")

# Read-only paths every agent needs: shared libraries, TLS roots (never /etc/ssl/private),
# name resolution and the files the stdlib reads on its own. Missing ones are skipped.
_SYSTEM_READ_ONLY = (
    "/usr",
    "/lib",
    "/lib64",
    "/lib32",
    "/etc/ssl/certs",
    "/etc/ssl/openssl.cnf",
    "/etc/ca-certificates",
    "/etc/pki/tls/certs",
    "/etc/pki/ca-trust",
    "/etc/resolv.conf",
    "/etc/hosts",
    "/etc/host.conf",
    "/etc/nsswitch.conf",
    "/etc/gai.conf",
    "/etc/services",
    "/etc/protocols",
    "/etc/ld.so.cache",
    "/etc/localtime",
    "/etc/mime.types",
)


@dataclass(frozen=True)
class Capabilities:
    """What this machine offers, probed once: decides which layers `prepare` can use."""

    landlock_abi: int  # 0 = no Landlock
    seccomp: bool
    bwrap: str | None  # path of a bwrap binary that was seen to work, else None
    bwrap_unprivileged: bool  # bwrap also works when started as DROP_UID
    can_drop_uid: bool
    pids_cgroup: str | None  # where a root parent makes each agent's pids cgroup
    userns_problem: str | None  # why a child not running as root cannot get its own task count
    why_not: dict[str, str]  # layer -> one sentence, for every layer that is unavailable


@dataclass(frozen=True)
class Launch:
    """How to start one agent: the executor passes these to Popen unchanged.

    `pass_fds` goes to Popen's `pass_fds` (with close_fds left True): bwrap and the bootstrap
    keep those fds at the same numbers and close every other one above 2.
    """

    argv: list[str]
    preexec: Callable[[], None] | None
    user: int | None
    group: int | None
    layers: tuple[str, ...]
    skipped: tuple[str, ...]
    pass_fds: tuple[int, ...] = ()


class SandboxUnavailable(RuntimeError):
    """Strict mode was asked for on a machine without Landlock or seccomp."""


# ----------------------------------------------------------------------------------------------
# uid: a root parent can hand the child to an unprivileged uid, if that uid can reach everything
# the child must read (a pyenv under /root, mode 700, is the common reason it cannot).


def _reachable(path: Path, need: int) -> bool:
    """Whether DROP_UID/DROP_GID may `need` (os.R_OK | os.X_OK) the path, checked by mode bits."""
    for candidate in {Path(os.path.abspath(path)), path.resolve()}:
        chain = [*reversed(candidate.parents), candidate]
        for step in chain:
            try:
                st = step.stat()
            except OSError:
                return False
            want = need if step == candidate else os.X_OK
            shift = 6 if st.st_uid == DROP_UID else 3 if st.st_gid == DROP_GID else 0
            if (st.st_mode >> shift) & want != want:
                return False
    return True


def _hand_over(scratch: Path) -> None:
    """Give scratch (created by root) to the unprivileged uid, contents included."""
    os.chown(scratch, DROP_UID, DROP_GID)
    for root, dirs, files in os.walk(scratch):
        for name in dirs + files:
            os.lchown(os.path.join(root, name), DROP_UID, DROP_GID)


# ----------------------------------------------------------------------------------------------
# bwrap: an outer layer of fresh namespaces. Only allow-listed paths exist inside, read-only
# except scratch; `--ro-bind / /` would expose /root and the projects, and a root child that
# keeps its capabilities can remount it read-write, hence `--cap-drop ALL`. Without a network
# the namespace is an empty one (loopback only). Inherited fds pass through at their numbers.


def _bwrap_argv(
    bwrap: str,
    read_only: Sequence[str],
    scratch: str,
    command: list[str],
    *,
    share_net: bool,
    given: Sequence[str] = (),
) -> list[str]:
    """`read_only` paths are bound if they exist; `given` ones (the user's attachments) must be:
    an agent never runs with an attachment silently missing."""
    argv = [bwrap, "--unshare-all", *(["--share-net"] if share_net else [])]
    argv += ["--die-with-parent", "--new-session"]
    argv += ["--cap-drop", "ALL", "--dev", "/dev", "--size", str(64 << 20), "--tmpfs", "/tmp"]
    for path in read_only:
        argv += ["--ro-bind-try", path, path]
    for path in given:
        argv += ["--ro-bind", path, path]
    argv += ["--bind", scratch, scratch, "--remount-ro", "/", "--chdir", scratch, "--", *command]
    return argv


def _bwrap_problem(bwrap: str | None, user: int | None) -> str | None:
    """Run `true` in the same kind of sandbox: bwrap fails where user namespaces are blocked.

    An empty network namespace needs more (a loopback set up over netlink) than sharing the
    host's, so that is what is tried.
    """
    if bwrap is None:
        return "bwrap: not installed (apt-get install bubblewrap)"
    argv = _bwrap_argv(bwrap, _SYSTEM_READ_ONLY, "/tmp", [_TRUE], share_net=False)
    who = "" if user is None else f" as uid {user}"
    try:
        done = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            timeout=10,
            cwd="/",
            user=user,
            group=user,
            extra_groups=None if user is None else [],
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return f"bwrap: could not run{who}: {exc}"
    if done.returncode != 0:
        return f"bwrap: `bwrap ... true` failed{who}: {done.stderr.strip() or done.returncode}"
    return None


# ----------------------------------------------------------------------------------------------
# pids: each agent's own count of processes and threads. The kernel exempts uid 0 from
# RLIMIT_NPROC, capabilities or not, so a root child joins a pids cgroup of its own. Measured
# here, the join costs 15-20 ms of the child's start (cgroup v1 waits for an RCU grace period)
# and a few ms to a process started right after it. Any other uid gets RLIMIT_NPROC in a user
# namespace of its own instead (see sandbox_boot._limit_tasks), at no measurable cost.

_CGROUP_PARENT = "agentgod"
_cgroup_numbers = itertools.count()
_unremoved: set[Path] = set()  # agents' cgroups that were still busy when last tried
_unremoved_lock = threading.Lock()


def _pids_hierarchy() -> Path | None:
    """Where the cgroup v1 pids controller is mounted, if it is."""
    try:
        mounts = Path("/proc/self/mounts").read_text(encoding="utf-8")
    except OSError:
        return None
    for line in mounts.splitlines():
        fields = line.split()
        if len(fields) >= 4 and fields[2] == "cgroup" and "pids" in fields[3].split(","):
            return Path(fields[1])
    return None


def _cgroup_problem() -> tuple[str | None, str | None]:
    """The folder our agents' cgroups go in, or why a root child's tasks cannot be counted."""
    hierarchy = _pids_hierarchy()
    if hierarchy is None:
        return None, (
            "pids: no cgroup v1 pids hierarchy is mounted, and RLIMIT_NPROC does not bind root, "
            "so an agent running as root can start threads until the host has none left"
        )
    parent = hierarchy / _CGROUP_PARENT
    try:
        parent.mkdir(exist_ok=True)
    except OSError as exc:
        return None, f"pids: cannot make cgroups under {hierarchy}: {exc}"
    _sweep_orphans(parent)
    return str(parent), None


def _sweep_orphans(parent: Path) -> None:
    """Remove empty cgroups that a process which has since died made for its agents."""
    for group in parent.iterdir():
        maker = group.name.partition("-")[0]
        if maker.isdigit() and int(maker) != os.getpid() and not Path(f"/proc/{maker}").exists():
            _remove_cgroup(group, remember=False)


def _new_cgroup(parent: Path) -> Path:
    while True:
        group = parent / f"{os.getpid()}-{next(_cgroup_numbers)}"
        try:
            group.mkdir()
            break
        except FileExistsError:  # left by an earlier process with our pid, still busy
            continue
    (group / "pids.max").write_text(str(TASK_LIMIT), encoding="ascii")
    return group


def _remove_cgroup(group: Path, *, remember: bool = True) -> None:
    """rmdir succeeds once the agent's last task is gone (EBUSY until then: tried again later)."""
    try:
        group.rmdir()
    except FileNotFoundError:
        pass
    except OSError as exc:
        if remember and exc.errno == errno.EBUSY:
            with _unremoved_lock:
                _unremoved.add(group)
        return
    with _unremoved_lock:
        _unremoved.discard(group)


def _sweep() -> None:
    """Try again to remove the cgroups of agents that were still running last time."""
    with _unremoved_lock:
        groups = list(_unremoved)
    for group in groups:
        _remove_cgroup(group)


atexit.register(_sweep)


def _hook(cgroup: Path | None) -> Callable[[], None]:
    """The preexec hook: join the agent's cgroup (before bwrap forks), then no_new_privs.

    The cgroup lives as long as this hook can still be called; once it is garbage, the cgroup
    is removed when empty, now or at a later `prepare`.
    """
    if cgroup is None:
        return sandbox_boot.no_new_privs
    procs = str(cgroup / "cgroup.procs")

    def join_then_no_new_privs() -> None:
        fd = os.open(procs, os.O_WRONLY)
        try:
            os.write(fd, b"0")  # 0: the writer itself
        finally:
            os.close(fd)
        sandbox_boot.no_new_privs()

    weakref.finalize(join_then_no_new_privs, _remove_cgroup, cgroup)
    return join_then_no_new_privs


def _userns_problem(user: int | None) -> str | None:
    """Whether `user` (None: ourselves) may make a user namespace, as the bootstrap will."""
    who = "this uid" if user is None else f"uid {user}"

    def as_after_exec() -> None:
        # A uid change clears the dumpable flag, making /proc/self root's; exec sets it again.
        sandbox_boot.set_dumpable()
        sandbox_boot.enter_own_user_namespace()

    try:
        done = subprocess.run(
            [_TRUE],
            capture_output=True,
            timeout=10,
            cwd="/",
            preexec_fn=as_after_exec,
            user=user,
            group=user,
            extra_groups=None if user is None else [],
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return f"pids: {who} cannot make a user namespace, so its tasks cannot be counted: {exc}"
    if done.returncode != 0:
        return f"pids: `true` in a new user namespace failed as {who}: {done.returncode}"
    return None


@functools.cache
def probe() -> Capabilities:
    """Probe each layer once per process; the answers do not change while we run."""
    if not sys.platform.startswith("linux"):  # sandbox_boot's syscall numbers are Linux's
        why_not = {layer: f"{layer}: only on Linux" for layer in LAYERS}
        return Capabilities(0, False, None, False, False, None, why_not["pids"], why_not)
    why_not: dict[str, str] = {}
    abi = sandbox_boot.landlock_abi()
    if not abi:
        why_not["landlock"] = "landlock: the kernel has no Landlock (Linux >= 5.13 with it enabled)"
    seccomp_problem = sandbox_seccomp.seccomp_problem()
    if seccomp_problem:
        why_not["seccomp"] = seccomp_problem
    can_drop_uid = os.geteuid() == 0
    if not can_drop_uid:
        why_not["uid"] = "uid: not running as root, so there is no identity to drop"
    elif unreadable := [path for path in _CHILD_FILES if not _reachable(path, os.R_OK)]:
        can_drop_uid = False
        why_not["uid"] = f"uid: {unreadable[0]} is not readable by uid {DROP_UID}"
    bwrap = shutil.which("bwrap")
    bwrap_problem = _bwrap_problem(bwrap, None)
    if bwrap_problem:
        why_not["bwrap"] = bwrap_problem
    unprivileged = can_drop_uid and not bwrap_problem and not _bwrap_problem(bwrap, DROP_UID)
    pids_cgroup, userns_problem = None, None
    if os.geteuid() == 0:
        pids_cgroup, cgroup_problem = _cgroup_problem()
        if cgroup_problem:
            why_not["pids"] = cgroup_problem
        if can_drop_uid:
            userns_problem = _userns_problem(DROP_UID)
    else:
        userns_problem = _userns_problem(None)
        if userns_problem:
            why_not["pids"] = userns_problem
    return Capabilities(
        abi,
        not seccomp_problem,
        None if bwrap_problem else bwrap,
        unprivileged,
        can_drop_uid,
        pids_cgroup,
        userns_problem,
        why_not,
    )


# ----------------------------------------------------------------------------------------------
# The parent side: decide the layers and build the command line.


def prepare(
    agent: Path,
    *,
    python: str,
    scratch: Path,
    api_url: str | None = None,
    broker_fd: int | None = None,
    mode: str = "auto",
    read_only: Sequence[Path] = (),
    identities: Mapping[Path, tuple[int, int, int]] = {},
    layers: Collection[str] | None = None,
    preload: Sequence[str] = (),
) -> Launch:
    """How to launch `agent` with `python`, confined as far as this machine allows.

    The network: with `api_url` (http(s)://host[:port]) the agent may open TCP connections to that
    port, as today's agents do. Without it the agent has no network: no new socket of any kind,
    only `broker_fd` — an AF_UNIX SOCK_STREAM socket connected to the broker, which the agent
    inherits at that number (Launch.pass_fds). Giving both is an error.

    `agent` may be a folder instead of a file: the agent's code is not written yet, so the child
    raises its walls, imports `preload`, and then waits for the file's name on the first line of
    stdin; it may read only that folder's files, not any one of them alone. `scratch` must exist;
    with the uid layer it is chowned to DROP_UID. `read_only` adds files and folders the agent may
    read, and only read, at their own paths (the user's attachments; the venv is found from
    `python` already): Landlock read rules, bubblewrap `--ro-bind`s. The uid layer is left out
    when DROP_UID could not read one of them (`skipped` says which). `layers` narrows the choice
    to some of LAYERS (for tests and benchmarks); strict mode still insists that Landlock and
    seccomp exist on the machine. Raises SandboxUnavailable in strict mode when they do not.

    `identities` are the read-only files as they were vetted (attachments.file_identity): each
    must still be that very file, reached without a link, or the agent is not started
    (AttachmentReplaced); the bootstrap checks again, on the file it then mounts or grants,
    so a swap in between is refused too, never followed.
    """
    if mode not in MODES:
        raise ValueError(f"sandbox mode must be one of {', '.join(MODES)}, not {mode!r}")
    wanted = set(LAYERS if layers is None else layers)
    if not wanted <= set(LAYERS):
        raise ValueError(f"unknown sandbox layers: {', '.join(sorted(wanted - set(LAYERS)))}")
    if not os.path.isabs(python):
        raise ValueError(f"the interpreter must be an absolute path, not {python!r}")
    if api_url is not None and broker_fd is not None:
        raise ValueError("an agent reaches the model over TCP (api_url) or the broker, not both")
    network = "none" if api_url is None else "tcp"
    tcp_ports = () if api_url is None else (_api_port(api_url),)
    keep_fds = () if broker_fd is None else (_broker_socket(broker_fd),)
    agent = Path(agent).resolve()
    interpreter = [python, "-X", "utf8", "-I"]
    boot = [*interpreter, "-S", str(_BOOTSTRAP)]  # -S: site runs confined
    if agent.is_dir():  # no walls yet, but the bootstrap is what waits for the code
        waiting = sandbox_boot.Walls((), keep_fds=keep_fds, preload=tuple(preload))
        plain = [*boot, *waiting.to_argv(), str(agent)]
    else:
        plain = [*interpreter, str(agent)]
    _check_identities(identities)
    if mode == "off":
        off = ("sandbox is off: only the executor's limits apply",)
        return Launch(plain, None, None, None, (), off, keep_fds)
    _sweep()
    caps = probe()
    if mode == "strict":
        require_strict()
    available = {
        "landlock": caps.landlock_abi > 0,
        "seccomp": caps.seccomp,
        "caps": "caps" not in caps.why_not,
        "pids": "pids" not in caps.why_not or caps.userns_problem is None,
        "uid": caps.can_drop_uid,
        "bwrap": caps.bwrap is not None,
    }
    active = [layer for layer in LAYERS if layer in wanted and available[layer]]
    skipped = [caps.why_not[layer] for layer in LAYERS if layer in wanted and not available[layer]]
    if "landlock" in active:
        skipped += _landlock_gaps(caps.landlock_abi, network)

    readable = [*_interpreter_roots(python), agent, *_CHILD_FILES]
    given = list(dict.fromkeys(Path(path).absolute() for path in read_only))
    given = [path for path in given if path.exists()]
    if "uid" in active:
        problem = _uid_problem(python, readable, scratch) or _given_problem(given)
        if problem:
            active.remove("uid")
            skipped.append(problem)
        else:
            _hand_over(scratch)
    if "bwrap" in active and "uid" in active and not caps.bwrap_unprivileged:
        active.remove("bwrap")
        skipped.append(f"bwrap: does not work when started as uid {DROP_UID}, so it was left out")
    cgroup, task_limit = None, 0
    if "pids" in active:
        root_child = os.geteuid() == 0 and "uid" not in active
        problem = caps.why_not.get("pids") if root_child else caps.userns_problem
        if problem:
            active.remove("pids")
            skipped.append(problem)
        elif root_child:
            cgroup = _new_cgroup(Path(caps.pids_cgroup or ""))
        else:
            task_limit = TASK_LIMIT

    read_paths = [*_SYSTEM_READ_ONLY, *(str(p) for p in readable)]
    read_paths = list(dict.fromkeys(p for p in read_paths if os.path.exists(p)))
    argv = plain
    exact = tuple(
        f"{device}:{inode}:{changed}:{path}"
        for path, (device, inode, changed) in identities.items()
        if Path(path).absolute() in given
    )
    if {"landlock", "seccomp", "caps"} & set(active) or task_limit or exact:
        walls = sandbox_boot.Walls(
            tuple(active),
            landlock_abi=caps.landlock_abi if "landlock" in active else 0,
            network=network,
            task_limit=task_limit,
            read_only=(*read_paths, *map(str, given), "/dev/urandom"),
            read_write=(str(scratch), "/dev/null"),
            exact=exact,
            tcp_ports=tcp_ports,
            keep_fds=keep_fds,
            preload=tuple(preload),
        )
        argv = [*boot, *walls.to_argv(), str(agent)]
    if "bwrap" in active:
        bwrap = caps.bwrap or "bwrap"
        argv = _bwrap_argv(
            bwrap,
            read_paths,
            str(scratch),
            argv,
            share_net=network == "tcp",
            given=[str(path) for path in given],
        )
    uid = DROP_UID if "uid" in active else None
    gid = DROP_GID if "uid" in active else None
    # no_new_privs in the parent's hook as well: it must hold before bwrap, or for the uid alone.
    preexec = _hook(cgroup) if active else None
    return Launch(argv, preexec, uid, gid, tuple(active), tuple(skipped), keep_fds)


def unconfined_warning(mode: str) -> str | None:
    """The plain warning for a run whose agents will have no OS wall between them and the
    user's files or the network (SANDBOX=off, or a machine without the layers); None when the
    walls are up. Said at the start of every such run."""
    if mode == "off":
        why, files, network = "SANDBOX=off", True, True
    else:
        caps = probe()
        files = not caps.landlock_abi and caps.bwrap is None
        network = not caps.seccomp and caps.bwrap is None
        missing = [name for name, gone in (("Landlock", files), ("seccomp", network)) if gone]
        why = f"no OS walls on this machine ({' and '.join(missing)}, and no bubblewrap)"
    if not (files or network):
        return None
    can = []
    if files:
        can.append("read any file you can read, the key in your AgentGOD home's .env included")
    if network:
        can.append("open connections of their own")
    return (
        f"{why}: agents run with your own permissions, so code an agent runs could "
        f"{' and '.join(can)}; only the code guard and the limits stand in its way "
        "(SANDBOX=strict refuses to run agents without the walls)"
    )


class AttachmentReplaced(OSError):
    """An attached file is not the file that was vetted any more: the agent is not started."""


def _check_identities(identities: Mapping[Path, tuple[int, int, int]]) -> None:
    """Each path still leads, without a link, to the very file vetted, unchanged."""
    for path, vetted in identities.items():
        try:
            status = os.lstat(path)
        except OSError as error:
            raise AttachmentReplaced(error.errno, f"attachment {path}: {error.strerror}") from None
        if not stat.S_ISREG(status.st_mode) or file_identity(status) != tuple(vetted):
            raise AttachmentReplaced(
                errno.EPERM,
                f"attachment {path} was replaced since it was attached (it is not the file that "
                "was checked), so no agent is given it",
            )


def require_strict() -> None:
    """Raise SandboxUnavailable unless this machine has both Landlock and seccomp."""
    caps = probe()
    missing = [caps.why_not[layer] for layer in ("landlock", "seccomp") if layer in caps.why_not]
    if missing:
        raise SandboxUnavailable("strict sandbox refused to run agents: " + "; ".join(missing))


def _landlock_gaps(abi: int, network: str) -> list[str]:
    gaps = []
    if abi < sandbox_boot.LANDLOCK_NET_ABI:
        reach = "any TCP port is reachable" if network == "tcp" else "only seccomp refuses TCP"
        gaps.append(f"landlock: ABI {abi} has no network rules, so {reach}")
    if abi < sandbox_boot.LANDLOCK_SCOPE_ABI:
        gaps.append(f"landlock: ABI {abi} cannot scope signals (seccomp's kill rule still does)")
    return gaps


def _interpreter_roots(python: str) -> list[Path]:
    """The prefix of the real interpreter (<prefix>/bin/python) and of the venv it may be in."""
    exe = Path(python)
    roots = [exe.resolve().parent.parent]
    venv = exe.parent.parent
    if (venv / "pyvenv.cfg").is_file():
        roots.append(venv)
        for line in (venv / "pyvenv.cfg").read_text(encoding="utf-8").splitlines():
            key, _, value = line.partition("=")
            if key.strip() == "home" and value.strip():
                roots.append(Path(value.strip()).resolve().parent)
    return list(dict.fromkeys(roots))


def _uid_problem(python: str, readable: Sequence[Path], scratch: Path) -> str | None:
    for path in [Path(python), *readable]:
        need = os.R_OK | os.X_OK if path.is_dir() or path == Path(python) else os.R_OK
        if path.exists() and not _reachable(path, need):
            return (
                f"uid: not dropping to uid {DROP_UID}: {path} is not readable by it "
                "(keep the interpreter, venv and agents in a world-readable place such as /opt)"
            )
    if not _reachable(scratch.parent, os.X_OK):
        return f"uid: not dropping to uid {DROP_UID}: it cannot reach the scratch {scratch}"
    return None


GIVEN_ENTRIES_CHECKED = 1000
"""How many entries of a folder given to read are checked for DROP_UID before it is trusted."""


def _given_problem(given: Sequence[Path]) -> str | None:
    """Why DROP_UID cannot read a file or folder the agent was given to read (an attachment)."""
    for root in given:
        paths = [root]
        if root.is_dir():
            walked = (
                Path(parent) / name
                for parent, dirs, files in os.walk(root)
                for name in dirs + files
            )
            paths += itertools.islice(walked, GIVEN_ENTRIES_CHECKED)
        for path in paths:
            need = os.R_OK | os.X_OK if path.is_dir() else os.R_OK
            if path.exists() and not _reachable(path, need):
                inside = "" if path == root else f" (in {root})"
                return (
                    f"uid: not dropping to uid {DROP_UID}: it cannot read {path}{inside}, which "
                    "the agent was given to read (an attachment); make it readable by others to "
                    "keep this layer"
                )
    return None


def _broker_socket(fd: int) -> int:
    """The broker's end must be a unix stream socket: a datagram one could send to any name."""
    if fd <= 2:
        raise ValueError(f"broker_fd must be above 2 (stdin, stdout, stderr), not {fd}")
    copy = os.dup(fd)
    try:
        sock = socket.socket(fileno=copy)
    except OSError as exc:
        os.close(copy)
        raise ValueError(f"broker_fd {fd} is not a socket: {exc}") from None
    with sock:
        kind = (sock.family, sock.type)
    if kind != (socket.AF_UNIX, socket.SOCK_STREAM):
        raise ValueError(f"broker_fd {fd} must be an AF_UNIX SOCK_STREAM socket, not {kind}")
    return fd


def _api_port(api_url: str) -> int:
    parts = urlsplit(api_url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"the API URL must be http(s)://host[:port], not {api_url!r}")
    return parts.port or (443 if parts.scheme == "https" else 80)
