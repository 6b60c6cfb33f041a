"""OS-level confinement of a generated agent's process: the second wall behind codeguard.

Static validation is not a sandbox, so the executor asks this module how to launch each agent.
`prepare()` answers with a `Launch`: a command line, a preexec hook (no_new_privs), a uid/gid to
drop to, and the layers that are really active. Each layer is used when the platform has it
(probed once per process):

- **landlock**: a trusted bootstrap (sandbox_boot.py, run as the child's main script) restricts
  the filesystem to read-only system, interpreter and agent paths plus a read-write scratch
  directory (no /proc at all), TCP to the API's port only (ABI >= 4), and signals and abstract
  sockets to the sandbox (ABI >= 6).
- **seccomp**: the same bootstrap then loads a filter (the system libseccomp, through ctypes) that
  refuses new processes, exec, ptrace, mounts, namespaces, kernel-wide knobs, chmod/chown/utime,
  and sockets other than TCP/UDP over IPv4/IPv6. Refusals are EPERM, so agents die with a
  readable `PermissionError`, not a signal.
- **uid**: a root parent drops the child to an unprivileged uid when it can reach the interpreter.
- **bwrap**: bubblewrap as an outer layer, with allow-list binds only and no capabilities.

This module is the parent's half: it probes, decides and builds the command line, and may import
whatever it likes. The child's half is sandbox_boot.py, kept apart because everything it imports
is paid again by every agent start; the Landlock and seccomp mechanisms live there, once, and are
imported here for probing. The executor's own wall (environment, scratch cwd, process group,
rlimits) is not repeated in either.
"""

import functools
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import sandbox_boot

MODES = ("auto", "strict", "off")
LAYERS = ("landlock", "seccomp", "uid", "bwrap")
DROP_UID = DROP_GID = 65534  # nobody/nogroup: owns no files, so it can change none
BOOT_FAILURE_EXIT = sandbox_boot.BOOT_FAILURE_EXIT  # a wall asked for could not be raised
_BOOTSTRAP = Path(sandbox_boot.__file__).resolve()

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
    why_not: dict[str, str]  # layer -> one sentence, for every layer that is unavailable


@dataclass(frozen=True)
class Launch:
    """How to start one agent: the executor passes these to Popen unchanged."""

    argv: list[str]
    preexec: Callable[[], None] | None
    user: int | None
    group: int | None
    layers: tuple[str, ...]
    skipped: tuple[str, ...]


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
# keeps its capabilities can remount it read-write, hence `--cap-drop ALL`.


def _bwrap_argv(
    bwrap: str, read_only: Sequence[str], scratch: str, command: list[str]
) -> list[str]:
    argv = [bwrap, "--unshare-all", "--share-net", "--die-with-parent", "--new-session"]
    argv += ["--cap-drop", "ALL", "--dev", "/dev", "--size", str(64 << 20), "--tmpfs", "/tmp"]
    for path in read_only:
        argv += ["--ro-bind-try", path, path]
    argv += ["--bind", scratch, scratch, "--remount-ro", "/", "--chdir", scratch, "--", *command]
    return argv


def _bwrap_problem(bwrap: str | None, user: int | None) -> str | None:
    """Run `true` in the same kind of sandbox: bwrap fails where user namespaces are blocked."""
    if bwrap is None:
        return "bwrap: not installed (apt-get install bubblewrap)"
    true = next((p for p in ("/usr/bin/true", "/bin/true") if os.path.exists(p)), "true")
    argv = _bwrap_argv(bwrap, _SYSTEM_READ_ONLY, "/tmp", [true])
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


@functools.cache
def probe() -> Capabilities:
    """Probe each layer once per process; the answers do not change while we run."""
    if not sys.platform.startswith("linux"):  # sandbox_boot's syscall numbers are Linux's
        why_not = {layer: f"{layer}: only on Linux" for layer in LAYERS}
        return Capabilities(0, False, None, False, False, why_not)
    why_not: dict[str, str] = {}
    abi = sandbox_boot.landlock_abi()
    if not abi:
        why_not["landlock"] = "landlock: the kernel has no Landlock (Linux >= 5.13 with it enabled)"
    seccomp_problem = sandbox_boot.seccomp_problem()
    if seccomp_problem:
        why_not["seccomp"] = seccomp_problem
    can_drop_uid = os.geteuid() == 0
    if not can_drop_uid:
        why_not["uid"] = "uid: not running as root, so there is no identity to drop"
    elif not _reachable(_BOOTSTRAP, os.R_OK):
        can_drop_uid = False
        why_not["uid"] = f"uid: {_BOOTSTRAP} is not readable by uid {DROP_UID}"
    bwrap = shutil.which("bwrap")
    bwrap_problem = _bwrap_problem(bwrap, None)
    if bwrap_problem:
        why_not["bwrap"] = bwrap_problem
    unprivileged = can_drop_uid and not bwrap_problem and not _bwrap_problem(bwrap, DROP_UID)
    return Capabilities(
        abi,
        not seccomp_problem,
        None if bwrap_problem else bwrap,
        unprivileged,
        can_drop_uid,
        why_not,
    )


# ----------------------------------------------------------------------------------------------
# The parent side: decide the layers and build the command line.


def prepare(
    agent: Path,
    *,
    python: str,
    scratch: Path,
    api_url: str,
    mode: str = "auto",
    read_only: Sequence[Path] = (),
    layers: Collection[str] | None = None,
    preload: Sequence[str] = (),
) -> Launch:
    """How to launch `agent` with `python`, confined as far as this machine allows.

    `agent` may be a folder instead of a file: the agent's code is not written yet, so the child
    raises its walls, imports `preload`, and then waits for the file's name on the first line of
    stdin; it may read only that folder's files, not any one of them alone. `scratch` must exist;
    with the uid layer it is chowned to DROP_UID. `read_only` adds paths the agent may read (the
    venv is found from `python` already). `layers` narrows the choice to some of LAYERS (for tests
    and benchmarks); strict mode still insists that Landlock and seccomp exist on the machine.
    Raises SandboxUnavailable in strict mode when they do not.
    """
    if mode not in MODES:
        raise ValueError(f"sandbox mode must be one of {', '.join(MODES)}, not {mode!r}")
    wanted = set(LAYERS if layers is None else layers)
    if not wanted <= set(LAYERS):
        raise ValueError(f"unknown sandbox layers: {', '.join(sorted(wanted - set(LAYERS)))}")
    if not os.path.isabs(python):
        raise ValueError(f"the interpreter must be an absolute path, not {python!r}")
    api_port = _api_port(api_url)
    agent = Path(agent).resolve()
    interpreter = [python, "-X", "utf8", "-I"]
    boot = [*interpreter, "-S", str(_BOOTSTRAP)]  # -S: site runs confined
    if agent.is_dir():  # no walls yet, but the bootstrap is what waits for the code
        waiting = sandbox_boot.Walls((), preload=tuple(preload))
        plain = [*boot, *waiting.to_argv(), str(agent)]
    else:
        plain = [*interpreter, str(agent)]
    if mode == "off":
        return Launch(
            plain, None, None, None, (), ("sandbox is off: only the executor's limits apply",)
        )
    caps = probe()
    if mode == "strict":
        require_strict()
    available = {
        "landlock": caps.landlock_abi > 0,
        "seccomp": caps.seccomp,
        "uid": caps.can_drop_uid,
        "bwrap": caps.bwrap is not None,
    }
    active = [layer for layer in LAYERS if layer in wanted and available[layer]]
    skipped = [caps.why_not[layer] for layer in LAYERS if layer in wanted and not available[layer]]
    if "landlock" in active:
        skipped += _landlock_gaps(caps.landlock_abi)

    readable = [*_interpreter_roots(python), agent, _BOOTSTRAP, *map(Path, read_only)]
    if "uid" in active:
        problem = _uid_problem(python, readable, scratch)
        if problem:
            active.remove("uid")
            skipped.append(problem)
        else:
            _hand_over(scratch)
    if "bwrap" in active and "uid" in active and not caps.bwrap_unprivileged:
        active.remove("bwrap")
        skipped.append(f"bwrap: does not work when started as uid {DROP_UID}, so it was left out")

    read_paths = [*_SYSTEM_READ_ONLY, *(str(p) for p in readable)]
    read_paths = list(dict.fromkeys(p for p in read_paths if os.path.exists(p)))
    argv = plain
    if "landlock" in active or "seccomp" in active:
        walls = sandbox_boot.Walls(
            tuple(active),
            landlock_abi=caps.landlock_abi if "landlock" in active else 0,
            read_only=(*read_paths, "/dev/urandom"),
            read_write=(str(scratch), "/dev/null"),
            tcp_ports=(api_port,),
            preload=tuple(preload),
        )
        argv = [*boot, *walls.to_argv(), str(agent)]
    if "bwrap" in active:
        argv = _bwrap_argv(caps.bwrap or "bwrap", read_paths, str(scratch), argv)
    uid = DROP_UID if "uid" in active else None
    gid = DROP_GID if "uid" in active else None
    # no_new_privs in the parent's hook as well: it must hold before bwrap, or for the uid alone.
    preexec = sandbox_boot.no_new_privs if active else None
    return Launch(argv, preexec, uid, gid, tuple(active), tuple(skipped))


def require_strict() -> None:
    """Raise SandboxUnavailable unless this machine has both Landlock and seccomp."""
    caps = probe()
    missing = [caps.why_not[layer] for layer in ("landlock", "seccomp") if layer in caps.why_not]
    if missing:
        raise SandboxUnavailable("strict sandbox refused to run agents: " + "; ".join(missing))


def _landlock_gaps(abi: int) -> list[str]:
    gaps = []
    if abi < sandbox_boot.LANDLOCK_NET_ABI:
        gaps.append(f"landlock: ABI {abi} has no network rules, so any TCP port is reachable")
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


def _api_port(api_url: str) -> int:
    parts = urlsplit(api_url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"the API URL must be http(s)://host[:port], not {api_url!r}")
    return parts.port or (443 if parts.scheme == "https" else 80)
