"""The trusted first code of every sandboxed agent: raise the walls, then become the agent.

sandbox.py decides how an agent is confined; this module does the confining, inside the child.
It is split off because it runs once per agent start, before the agent's first line, on the
critical path of every wave: each module it imports is paid again by every agent. So it imports
only ctypes (no stdlib binding exists for Landlock, libseccomp or capabilities), errno (built in)
and os and stat (which `site` loads anyway), and it reads its orders from a flat command line
instead of JSON (json drags in re and enum). dataclasses, pathlib, functools, typing, urllib and
collections stay in sandbox.py, and tests/test_sandbox.py holds the list of what may be imported.
The mechanisms live here once: sandbox.py imports `landlock_abi` and `no_new_privs` to probe
the machine and to build its preexec hook.

The child is started as `python -X utf8 -I -S sandbox_boot.py <Walls.to_argv()> agent.py ...`.
First every inherited fd but 0, 1, 2 and the kept ones (the broker's socket) is closed, then:

- **pids** (when given a task limit): RLIMIT_NPROC, in a user namespace of the agent's own, where
  the kernel counts only this agent's tasks (a uid's count is kept per user namespace).
- **caps**: every capability goes, bounding set and ambient set included, locked by securebits.
- **landlock**: the filesystem shrinks to read-only paths plus read-write ones (no /proc unless
  listed), TCP to the given ports only (ABI >= 4; none at all without a network), signals and
  abstract sockets to the sandbox (ABI >= 6).
- **seccomp**: the filter sandbox_seccomp.py builds (a denylist of system calls, through the
  system libseccomp), compiled first and loaded last. That module sits beside this file and is
  imported only when the layer is asked for; both are CHILD_FILES, which the child must be able
  to read, as is agent_runtime.py: a process started before its code compiles the runtime every
  agent file inlines while it waits, so once named only the model's part and the footer compile.

Only then does it run `site` (so a venv's `.pth` code is already confined) and the agent, as
`__main__`, with `sys.argv` as if it had been started directly. A wall that cannot be raised stops
the child before the agent runs, with exit status BOOT_FAILURE_EXIT.
"""

import ctypes
import errno
import os
import stat
import sys
from types import CodeType, TracebackType  # already loaded by ctypes

BOOT_FAILURE_EXIT = 125  # the bootstrap could not raise a wall it was asked for
_FOLDER = os.path.dirname(os.path.realpath(__file__))
_RUNTIME = os.path.join(_FOLDER, "agent_runtime.py")
CHILD_FILES = (os.path.realpath(__file__), os.path.join(_FOLDER, "sandbox_seccomp.py"), _RUNTIME)
"""What the child reads: this script, the seccomp module and the agent runtime beside it."""
_RUNTIME_LINES = (b"\n# ---- agent runtime: begin ----\n", b"# ---- agent runtime: end ----\n")
"""agent_runtime's marker lines: what lies between them is inlined into every agent file."""
_AFTER_RUNTIME = b"\nAGENT_NAME = "
"""What follows the runtime in an agent file: the trusted header's first statement of its own."""
LANDLOCK_NET_ABI = 4  # the first Landlock ABI with TCP port rules
LANDLOCK_SCOPE_ABI = 6  # the first that scopes signals and abstract unix sockets


class Walls:
    """The confinement the parent chose for one agent, as it travels on the child's command line.

    `layers` are all the layers confining the child (uid and bwrap too, for the refusal line);
    the bootstrap raises the ones it owns (pids, caps, landlock, seccomp) when they are listed.
    `network` is "tcp" (TCP to `tcp_ports`, as agents that call the API themselves need) or
    "none" (no new socket at all: the agent talks only over `keep_fds`, the broker's socket).
    `task_limit` > 0 asks the bootstrap for the pids wall; 0 leaves it to the parent (a cgroup).
    """

    _FLAGS = (
        "--layers",
        "--landlock-abi",
        "--network",
        "--task-limit",
        "--read-only",
        "--read-write",
        "--tcp-port",
        "--keep-fd",
        "--preload",
        "--exact",
    )
    NETWORKS = ("tcp", "none")

    def __init__(
        self,
        layers: tuple[str, ...],
        *,
        landlock_abi: int = 0,
        network: str = "none",
        task_limit: int = 0,
        read_only: tuple[str, ...] = (),
        read_write: tuple[str, ...] = (),
        tcp_ports: tuple[int, ...] = (),
        keep_fds: tuple[int, ...] = (),
        preload: tuple[str, ...] = (),
        exact: tuple[str, ...] = (),
    ) -> None:
        if network not in self.NETWORKS:
            raise ValueError(f"network must be one of {self.NETWORKS}, not {network!r}")
        self.layers = layers
        self.landlock_abi = landlock_abi
        self.network = network
        self.task_limit = task_limit
        self.read_only = read_only
        self.read_write = read_write
        self.tcp_ports = tcp_ports
        self.keep_fds = keep_fds
        self.preload = preload
        """Not a wall: modules to import, confined, while the agent's code is being written."""
        self.exact = exact
        """"DEVICE:INODE:CTIME:PATH" of each attached file as it was vetted: the path must still
        lead, without a link, to that very file, unchanged, or the agent does not run."""

    def to_argv(self) -> list[str]:
        """Flag-value pairs ended by `--`: any path survives, as a value is never read as a flag."""
        argv = ["--layers", ",".join(self.layers), "--landlock-abi", str(self.landlock_abi)]
        argv += ["--network", self.network, "--task-limit", str(self.task_limit)]
        for flag, values in (
            ("--read-only", self.read_only),
            ("--read-write", self.read_write),
            ("--tcp-port", self.tcp_ports),
            ("--keep-fd", self.keep_fds),
            ("--preload", self.preload),
            ("--exact", self.exact),
        ):
            for value in values:
                argv += [flag, str(value)]
        return [*argv, "--"]

    @classmethod
    def parse(cls, argv: list[str]) -> tuple["Walls", list[str]]:
        """The walls from `to_argv()`'s output, and the agent's command line that follows it.

        Raises LookupError or ValueError for anything `to_argv` does not write.
        """
        values: dict[str, list[str]] = {flag: [] for flag in cls._FLAGS}
        index = 0
        while argv[index] != "--":
            values[argv[index]].append(argv[index + 1])
            index += 2
        [layers] = values["--layers"]
        [abi] = values["--landlock-abi"]
        [network] = values["--network"]
        [task_limit] = values["--task-limit"]
        walls = cls(
            tuple(filter(None, layers.split(","))),
            landlock_abi=int(abi),
            network=network,
            task_limit=int(task_limit),
            read_only=tuple(values["--read-only"]),
            read_write=tuple(values["--read-write"]),
            tcp_ports=tuple(map(int, values["--tcp-port"])),
            keep_fds=tuple(map(int, values["--keep-fd"])),
            preload=tuple(values["--preload"]),
            exact=tuple(values["--exact"]),
        )
        return walls, argv[index + 1 :]


# ----------------------------------------------------------------------------------------------
# Landlock: raw syscalls through libc, because no stdlib binding exists.

_SYS_CREATE_RULESET, _SYS_ADD_RULE, _SYS_RESTRICT_SELF = 444, 445, 446
_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH, _RULE_NET_PORT = 1, 2

_FS_EXECUTE = 1 << 0
_FS_WRITE_FILE = 1 << 1
_FS_READ_FILE = 1 << 2
_FS_READ_DIR = 1 << 3
_FS_REMOVE_DIR = 1 << 4
_FS_REMOVE_FILE = 1 << 5
_FS_MAKE_DIR = 1 << 7
_FS_MAKE_REG = 1 << 8
_FS_REFER = 1 << 13
_FS_TRUNCATE = 1 << 14
_FS_IOCTL_DEV = 1 << 15
_FS_FILE_ONLY = _FS_EXECUTE | _FS_WRITE_FILE | _FS_READ_FILE | _FS_TRUNCATE | _FS_IOCTL_DEV
_NET_BIND_TCP, _NET_CONNECT_TCP = 1 << 0, 1 << 1
_SCOPE_ABSTRACT_UNIX_SOCKET, _SCOPE_SIGNAL = 1 << 0, 1 << 1

_READ = _FS_READ_FILE | _FS_READ_DIR
# No exec, no symlinks (the parent may later walk scratch), no devices, sockets or fifos.
_READ_WRITE = (
    _READ
    | _FS_WRITE_FILE
    | _FS_REMOVE_DIR
    | _FS_REMOVE_FILE
    | _FS_MAKE_DIR
    | _FS_MAKE_REG
    | _FS_REFER
    | _FS_TRUNCATE
)


class _RulesetAttr(ctypes.Structure):
    _fields_ = (
        ("handled_access_fs", ctypes.c_uint64),
        ("handled_access_net", ctypes.c_uint64),
        ("scoped", ctypes.c_uint64),
    )


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1
    _fields_ = (("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32))


class _NetPortAttr(ctypes.Structure):
    _fields_ = (("allowed_access", ctypes.c_uint64), ("port", ctypes.c_uint64))


_PR_SET_NO_NEW_PRIVS = 38
_opened_libc: ctypes.CDLL | None = None


def _libc() -> ctypes.CDLL:
    """Opened on first use, so that importing this module costs nothing on any platform."""
    global _opened_libc
    if _opened_libc is None:
        _opened_libc = ctypes.CDLL(None, use_errno=True)
        _opened_libc.syscall.restype = ctypes.c_long
    return _opened_libc


def _syscall(number: int, *args: object) -> int:
    """Every argument is passed as a full machine word: variadic calls would truncate ints."""
    result: int = _libc().syscall(ctypes.c_long(number), *args)
    if result < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return int(result)


def no_new_privs() -> None:
    """Nothing this process executes can gain privileges (setuid binaries); Landlock needs it."""
    flag = (ctypes.c_ulong(1), ctypes.c_ulong(0), ctypes.c_ulong(0), ctypes.c_ulong(0))
    if _libc().prctl(_PR_SET_NO_NEW_PRIVS, *flag) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS) failed")


def landlock_abi() -> int:
    """The kernel's Landlock ABI version; 0 when it has none."""
    try:
        return _syscall(
            _SYS_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_long(_CREATE_RULESET_VERSION)
        )
    except OSError:  # ENOSYS: kernel too old; EOPNOTSUPP: Landlock not enabled at boot
        return 0


def _handled_fs(abi: int) -> int:
    """Each ABI knows more access rights; asking for an unknown one is EINVAL."""
    if abi >= 5:
        return (1 << 16) - 1
    if abi >= 3:
        return (1 << 15) - 1
    return (1 << 14) - 1 if abi == 2 else (1 << 13) - 1


def _vetted(exact: tuple[str, ...]) -> dict[str, tuple[int, int, int]]:
    """{path: (device, inode, change time)} from Walls.exact's "DEVICE:INODE:CTIME:PATH"."""
    found = {}
    for entry in exact:
        device, inode, changed, path = entry.split(":", 3)
        found[path] = (int(device), int(inode), int(changed))
    return found


def _open_vetted(path: str, vetted: tuple[int, int, int]) -> int:
    """An O_PATH fd of `path`, which must be, without a link, the very file vetted."""
    try:
        fd = os.open(path, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        raise _failure(f"attachment {path} cannot be opened: {exc.strerror}") from None
    status = os.fstat(fd)
    found = (status.st_dev, status.st_ino, status.st_ctime_ns)
    if found != vetted or not stat.S_ISREG(status.st_mode):
        os.close(fd)
        raise _failure(
            f"attachment {path} was replaced since it was attached (it is not the file that "
            "was checked); refused"
        )
    return fd


def _restrict_landlock(
    abi: int,
    read_only: tuple[str, ...],
    read_write: tuple[str, ...],
    tcp_ports: tuple[int, ...],
    vetted: dict[str, tuple[int, int, int]],
) -> None:
    """Confine this thread and all it starts, for good (the bootstrap has no other threads)."""
    handled_fs = _handled_fs(abi)
    handled_net = _NET_BIND_TCP | _NET_CONNECT_TCP if abi >= LANDLOCK_NET_ABI else 0
    scoped = _SCOPE_ABSTRACT_UNIX_SOCKET | _SCOPE_SIGNAL if abi >= LANDLOCK_SCOPE_ABI else 0
    attr = _RulesetAttr(handled_fs, handled_net, scoped)
    size = 8 if abi < LANDLOCK_NET_ABI else 16 if abi < LANDLOCK_SCOPE_ABI else 24
    ruleset = _syscall(_SYS_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size), None)
    try:
        for path in read_only:
            _allow_path(ruleset, path, _READ & handled_fs, required=False, vetted=vetted.get(path))
        for path in read_write:
            _allow_path(ruleset, path, _READ_WRITE & handled_fs, required=True)
        for port in tcp_ports if handled_net else ():
            _add_landlock_rule(ruleset, _RULE_NET_PORT, _NetPortAttr(_NET_CONNECT_TCP, port))
        _syscall(_SYS_RESTRICT_SELF, ctypes.c_long(ruleset), None)
    finally:
        os.close(ruleset)


def _allow_path(
    ruleset: int,
    path: str,
    access: int,
    *,
    required: bool,
    vetted: tuple[int, int, int] | None = None,
) -> None:
    """A rule for `path`; for a `vetted` attachment, on the very file vetted (or none at all)."""
    if vetted is not None:
        fd = _open_vetted(path, vetted)  # the rule goes on this inode: a later swap leads nowhere
    else:
        try:
            fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
        except OSError:
            if required:
                raise
            return  # not on this system, or unreachable for this uid anyway
    try:
        if not stat.S_ISDIR(os.fstat(fd).st_mode):
            access &= _FS_FILE_ONLY  # directory rights on a file are EINVAL
        _add_landlock_rule(ruleset, _RULE_PATH_BENEATH, _PathBeneathAttr(access, fd))
    finally:
        os.close(fd)


def _add_landlock_rule(ruleset: int, rule_type: int, rule: ctypes.Structure) -> None:
    _syscall(
        _SYS_ADD_RULE, ctypes.c_long(ruleset), ctypes.c_long(rule_type), ctypes.byref(rule), None
    )


# ----------------------------------------------------------------------------------------------
# Inherited fds, tasks and capabilities: plain prctl and friends through libc.

_CLONE_NEWUSER = 0x10000000
_RLIMIT_NPROC = 6
_PR_CAPBSET_READ, _PR_CAPBSET_DROP = 23, 24
_PR_SET_DUMPABLE, _PR_SET_SECUREBITS = 4, 28
_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL = 47, 4
# noroot, no_setuid_fixup and no_cap_ambient_raise on, keep_caps off: each one locked.
_SECUREBITS_LOCKED_DOWN = 0xEF
_CAP_SETPCAP = 8
_CAPABILITY_VERSION_3 = 0x20080522


class _Rlimit(ctypes.Structure):
    _fields_ = (("current", ctypes.c_ulong), ("maximum", ctypes.c_ulong))


class _CapHeader(ctypes.Structure):
    _fields_ = (("version", ctypes.c_uint32), ("pid", ctypes.c_int))


class _CapData(ctypes.Structure):
    _fields_ = (
        ("effective", ctypes.c_uint32),
        ("permitted", ctypes.c_uint32),
        ("inheritable", ctypes.c_uint32),
    )


def _checked(result: int, what: str) -> int:
    if result < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")
    return result


def _prctl(option: int, arg: int = 0) -> int:
    zero = ctypes.c_ulong(0)
    return _checked(
        _libc().prctl(ctypes.c_int(option), ctypes.c_ulong(arg), zero, zero, zero),
        f"prctl({option}, {arg})",
    )


def _keep_only(keep_fds: tuple[int, ...]) -> None:
    """Close every inherited fd but 0, 1, 2 and `keep_fds`, which must be open sockets."""
    for fd in keep_fds:
        try:
            is_socket = stat.S_ISSOCK(os.fstat(fd).st_mode)
        except OSError:
            is_socket = False
        if not is_socket:
            raise OSError(errno.EBADF, f"fd {fd} should be an inherited socket, and is not")
    low = 3
    for fd in sorted(keep_fds):
        os.closerange(low, fd)
        low = fd + 1
    os.closerange(low, max(os.sysconf("SC_OPEN_MAX"), low))


def _limit_tasks(limit: int, *, own_namespace: bool) -> None:
    """At most `limit` processes and threads, counted for this agent alone.

    The kernel counts RLIMIT_NPROC per uid and user namespace, checking every level up to the
    host with the limit each namespace's creator had. A namespace made here, before the limit is
    lowered, counts this agent's tasks only (bwrap, when it runs, made one already). It binds only
    a uid other than root, so sandbox.py asks for it only then.
    """
    if own_namespace:
        enter_own_user_namespace()
    current = _Rlimit()
    _checked(_libc().getrlimit(_RLIMIT_NPROC, ctypes.byref(current)), "getrlimit")
    lowered = min(limit, current.maximum)
    _checked(_libc().setrlimit(_RLIMIT_NPROC, ctypes.byref(_Rlimit(lowered, lowered))), "setrlimit")


def set_dumpable() -> None:
    """What an exec does for a process whose uids agree: /proc/self is its own again."""
    _prctl(_PR_SET_DUMPABLE, 1)


def enter_own_user_namespace() -> None:
    """Move into a new user namespace as the same uid and gid (mapped to themselves)."""
    uid, gid = os.getuid(), os.getgid()
    _checked(_libc().unshare(ctypes.c_int(_CLONE_NEWUSER)), "unshare(CLONE_NEWUSER)")
    maps = (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{gid} {gid} 1"))
    for name, text in maps:
        _write_proc(name, text)


def _write_proc(name: str, text: str) -> None:
    fd = os.open(f"/proc/self/{name}", os.O_WRONLY)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def capabilities() -> tuple[int, int, int]:
    """This process's effective, permitted and inheritable capability sets, as bit masks."""
    header = _CapHeader(_CAPABILITY_VERSION_3, 0)
    data = (_CapData * 2)()
    _checked(_libc().capget(ctypes.byref(header), data), "capget")
    return (
        data[0].effective | data[1].effective << 32,
        data[0].permitted | data[1].permitted << 32,
        data[0].inheritable | data[1].inheritable << 32,
    )


def _drop_capabilities() -> None:
    """Leave no capability in any set, so that even root can do only what its uid may.

    Dropping the bounding set needs CAP_SETPCAP, so it comes first; capset is in seccomp's
    denylist, so all of this precedes seccomp. Without CAP_SETPCAP (bwrap's --cap-drop ALL, or
    no privilege to begin with) the bounding set is left as it is: no_new_privs keeps an exec
    from using it.
    """
    effective, _, _ = capabilities()
    if effective >> _CAP_SETPCAP & 1:
        cap = 0
        while True:
            try:
                held = _prctl(_PR_CAPBSET_READ, cap)
            except OSError:  # EINVAL: past the kernel's last capability
                break
            if held:
                _prctl(_PR_CAPBSET_DROP, cap)
            cap += 1
        _prctl(_PR_SET_SECUREBITS, _SECUREBITS_LOCKED_DOWN)
    _prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL)
    header = _CapHeader(_CAPABILITY_VERSION_3, 0)
    _checked(_libc().capset(ctypes.byref(header), (_CapData * 2)()), "capset")
    if any(capabilities()):
        raise OSError(errno.EPERM, "capabilities are still held after dropping them")


# ----------------------------------------------------------------------------------------------
# The child: this file run as its main script.

# What a refusal most likely means, per errno, for the line added under the agent's traceback.
_REFUSALS = {
    errno.EACCES: (
        ("landlock", "path, program or TCP port outside the allow-list"),
        ("uid", "file the unprivileged uid may not use"),
    ),
    errno.EPERM: (
        ("seccomp", "forbidden system call such as fork, exec, mount, chmod, IPC or a socket"),
        ("landlock", "signal to a process outside the sandbox"),
        ("caps", "operation that needs a capability"),
        ("uid", "operation reserved to root"),
    ),
    errno.ENOSYS: (("seccomp", "system call reported as absent"),),
    errno.EXDEV: (("landlock", "link or rename across the allow-list"),),
    errno.EROFS: (("bwrap", "read-only mount"),),
}


def _explain_refusals(active: tuple[str, ...]) -> None:
    """Print tracebacks as a plain run would, plus one `sandbox:` line naming the likely layer."""

    def hook(kind: type[BaseException], exc: BaseException, tb: TracebackType | None) -> None:
        while tb is not None and tb.tb_frame.f_code.co_filename == __file__:
            tb = tb.tb_next  # hide the bootstrap's own frames
        sys.__excepthook__(kind, exc.with_traceback(tb), tb)
        if isinstance(exc, OSError):
            causes = [
                f"{layer} ({what})"
                for layer, what in _REFUSALS.get(exc.errno or 0, ())
                if layer in active
            ]
            if causes:
                print(
                    f"sandbox: refused by {' or '.join(causes)}: {kind.__name__} "
                    f"[Errno {exc.errno}] {exc.strerror}",
                    file=sys.stderr,
                )

    sys.excepthook = hook


def _failure(reason: str) -> SystemExit:
    print(f"sandbox: {reason}", file=sys.stderr)
    return SystemExit(BOOT_FAILURE_EXIT)


def main(argv: list[str]) -> None:
    """Raise the walls `argv` asks for, then become the agent. Fails closed: exit 125."""
    try:
        walls, (agent, *args) = Walls.parse(argv)
    except (LookupError, ValueError) as exc:
        raise _failure(f"the bootstrap's command line is not understood: {exc!r}") from None
    layer = "inherited fds"
    try:
        _keep_only(walls.keep_fds)
        layer = "seccomp"
        seccomp = None
        if "seccomp" in walls.layers:
            sys.path.insert(0, _FOLDER)  # -I keeps this script's own folder off sys.path
            try:
                import sandbox_seccomp  # this file's neighbour, by path: no package here
            finally:
                del sys.path[0]
            seccomp = sandbox_seccomp.build_filter(os.getpid(), walls.network)
        # Order matters: a new user namespace grants capabilities that the next step drops, and
        # capset is among the calls seccomp refuses.
        if "pids" in walls.layers and walls.task_limit:
            layer = "pids"
            _limit_tasks(walls.task_limit, own_namespace="bwrap" not in walls.layers)
        if "caps" in walls.layers:
            layer = "caps"
            _drop_capabilities()
        no_new_privs()
        vetted = _vetted(walls.exact)
        for path, identity in vetted.items():  # under bwrap: the files it mounted
            os.close(_open_vetted(path, identity))
        if "landlock" in walls.layers:
            layer = "landlock"
            _restrict_landlock(
                walls.landlock_abi, walls.read_only, walls.read_write, walls.tcp_ports, vetted
            )
        if seccomp:
            layer = "seccomp"
            sandbox_seccomp.load_filter(*seccomp)
    except (OSError, ImportError) as exc:  # ImportError: sandbox_seccomp.py cannot be read
        raise _failure(f"{layer} could not be applied: {exc}") from None
    _explain_refusals(walls.layers)
    import site  # now, so that .pth files in the venv run confined

    site.main()
    runtime = None
    if os.path.isdir(agent):
        agent, runtime = _await_code(agent, walls.preload)
    sys.argv = [agent, *args]
    with open(agent, "rb") as source:
        parts = _compiled(source.read(), agent, runtime)
    module = type(sys)("__main__")
    module.__file__ = agent
    sys.modules["__main__"] = module
    for code in parts:
        exec(code, module.__dict__)


def _runtime_ahead() -> tuple[bytes, CodeType] | None:
    """The runtime every agent file inlines, and its code, compiled before the agent's own exists.

    Most of an agent file is the runtime: compiling it here, while the process waits for its
    code, leaves only the model's part and the footer to compile once the file is named. None
    when agent_runtime.py cannot be read (then the whole file is compiled, as always).
    """
    begin, end = _RUNTIME_LINES
    try:
        with open(_RUNTIME, "rb") as source:
            text = source.read()
    except OSError:
        return None
    start = text.find(begin) + len(begin)
    stop = text.find(end, start)
    if start < len(begin) or stop < 0:
        return None
    runtime = text[start:stop]
    return runtime, compile(runtime, _RUNTIME, "exec")


def _compiled(
    source: bytes, agent: str, runtime: tuple[bytes, CodeType] | None
) -> tuple[CodeType, ...]:
    """The agent's code: what compiling the whole file gives, in one piece or two.

    A file that is comment lines, then exactly the runtime compiled ahead, then the header's
    `AGENT_NAME = ...` runs as that code, moved to the file's name and lines, followed by the
    rest compiled now behind as many blank lines as precede it, so every line number (and
    so every traceback) is the file's own. Module code runs statement by statement in one
    namespace, so the two pieces in turn do what the whole does. Anything else compiles whole.
    """
    if runtime is not None:
        text, code = runtime
        at = source.find(text)
        head, end = source[:at], at + len(text)
        if (
            at >= 0
            and source.startswith(_AFTER_RUNTIME, end)
            and (not head or head.endswith(b"\n"))
            and b"coding" not in head  # a coding cookie would decode the whole file otherwise
            and all(line.startswith(b"#") for line in head.split(b"\n")[:-1])
        ):
            lines = head.count(b"\n")
            rest = b"\n" * (lines + text.count(b"\n")) + source[end:]
            return _moved(code, agent, lines), compile(rest, agent, "exec")
    return (compile(source, agent, "exec"),)


def _moved(code: CodeType, filename: str, lines: int) -> CodeType:
    """`code` (and every function inside it) as if compiled `lines` further down `filename`."""
    consts = tuple(
        _moved(const, filename, lines) if isinstance(const, CodeType) else const
        for const in code.co_consts
    )
    return code.replace(
        co_filename=filename, co_firstlineno=code.co_firstlineno + lines, co_consts=consts
    )


def _await_code(folder: str, preload: tuple[str, ...]) -> tuple[str, tuple[bytes, CodeType] | None]:
    """Started before the agent's code was written: import what it will, compile the runtime
    its file will hold (`_runtime_ahead`), then learn its name.

    The first line of stdin names the file inside `folder` — a bare name, so it cannot point
    anywhere else — and, after a space, the effort its model calls should use (the plan decides
    it, and the process may be older than the plan). The rest of stdin is the agent's own input.
    """
    for name in preload:
        try:  # noqa: SIM105 - contextlib would be one more import at every agent start
            __import__(name)
        except ImportError:
            pass  # the agent will import it again and see the error where it belongs
    runtime = _runtime_ahead()
    name, _, effort = sys.stdin.readline().strip().partition(" ")
    if not name or "/" in name or name.startswith("."):
        raise _failure(f"no agent file name arrived on stdin (got {name!r})")
    if effort:
        os.environ["LLM_EFFORT"] = effort
    return os.path.join(folder, name), runtime


if __name__ == "__main__":
    main(sys.argv[1:])
