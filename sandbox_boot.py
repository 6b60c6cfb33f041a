"""The trusted first code of every sandboxed agent: raise the walls, then become the agent.

sandbox.py decides how an agent is confined; this module does the confining, inside the child.
It is split off because it runs once per agent start, before the agent's first line, on the
critical path of every wave: each module it imports is paid again by every agent. So it imports
only ctypes (no stdlib binding exists for Landlock, libseccomp or capabilities), errno (built in)
and os and stat (which `site` loads anyway), and it reads its orders from a flat command line
instead of JSON (json drags in re and enum). dataclasses, pathlib, functools, typing, urllib and
collections stay in sandbox.py, and tests/test_sandbox.py holds the list of what may be imported.
The mechanisms live here once: sandbox.py imports `landlock_abi`, `seccomp_problem` and
`no_new_privs` to probe the machine and to build its preexec hook.

The child is started as `python -X utf8 -I -S sandbox_boot.py <Walls.to_argv()> agent.py ...`.
First every inherited fd but 0, 1, 2 and the kept ones (the broker's socket) is closed, then:

- **pids** (when given a task limit): RLIMIT_NPROC, in a user namespace of the agent's own, where
  the kernel counts only this agent's tasks (a uid's count is kept per user namespace).
- **caps**: every capability goes, bounding set and ambient set included, locked by securebits.
- **landlock**: the filesystem shrinks to read-only paths plus read-write ones (no /proc unless
  listed), TCP to the given ports only (ABI >= 4; none at all without a network), signals and
  abstract sockets to the sandbox (ABI >= 6).
- **seccomp**: a filter (the system libseccomp, through ctypes) refuses new processes, exec,
  ptrace, mounts, namespaces, kernel-wide knobs, chmod/chown/utime, System V and POSIX IPC, TCP
  Fast Open, and sockets other than TCP/UDP over IPv4/IPv6 — or, without a network, every new
  socket and every use of one but sending and receiving on what is already connected. Refusals
  are EPERM, so agents die with a readable `PermissionError`.

Only then does it run `site` (so a venv's `.pth` code is already confined) and the agent, as
`__main__`, with `sys.argv` as if it had been started directly. A wall that cannot be raised stops
the child before the agent runs, with exit status BOOT_FAILURE_EXIT.
"""

import ctypes
import errno
import os
import stat
import sys
from types import TracebackType  # already loaded by ctypes

BOOT_FAILURE_EXIT = 125  # the bootstrap could not raise a wall it was asked for
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


def _restrict_landlock(
    abi: int, read_only: tuple[str, ...], read_write: tuple[str, ...], tcp_ports: tuple[int, ...]
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
            _allow_path(ruleset, path, _READ & handled_fs, required=False)
        for path in read_write:
            _allow_path(ruleset, path, _READ_WRITE & handled_fs, required=True)
        for port in tcp_ports if handled_net else ():
            _add_landlock_rule(ruleset, _RULE_NET_PORT, _NetPortAttr(_NET_CONNECT_TCP, port))
        _syscall(_SYS_RESTRICT_SELF, ctypes.c_long(ruleset), None)
    finally:
        os.close(ruleset)


def _allow_path(ruleset: int, path: str, access: int, *, required: bool) -> None:
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
# seccomp: libseccomp through ctypes. It knows each architecture's syscall numbers and guards
# the x32 and 32-bit entry points that a hand-written BPF filter tends to forget. (pyseccomp
# would run `ldconfig -p` on import: +30 ms, and it fails once Landlock is up.)

_SCMP_ACT_ALLOW = 0x7FFF0000
_SCMP_ACT_ERRNO = 0x00050000  # | errno
_SCMP_ACT_KILL_PROCESS = 0x80000000
_SCMP_FLTATR_ACT_BADARCH = 2
_SCMP_FLTATR_CTL_OPTIMIZE = 8
_CMP_NE, _CMP_EQ, _CMP_GT, _CMP_MASKED_EQ = 1, 4, 6, 7
_ALL_BITS = (1 << 64) - 1

_CLONE_THREAD = 0x00010000
_CLONE_NAMESPACES = (
    0x00020000,
    0x02000000,
    0x04000000,
    0x08000000,
    0x10000000,
    0x20000000,
    0x40000000,
)
_AF_UNIX, _AF_INET, _AF_INET6 = 1, 2, 10
_SOCK_STREAM, _SOCK_RAW, _SOCK_PACKET, _SOCK_TYPE_MASK = 1, 3, 10, 0xF
_IPPROTO_TCP, _IPPROTO_UDP = 6, 17
_MSG_FASTOPEN = 0x20000000
_TIOCSTI, _TIOCLINUX = 0x5412, 0x541C
_SIOC_MASK, _SIOC_GROUP = 0xFF00, 0x8900  # socket and interface ioctls: SIOCGIFCONF, SIOCSIFMTU...

_DENIED_SYSCALLS = (
    # new processes and programs (clone and clone3 are handled below)
    *("fork", "vfork", "execve", "execveat"),
    # other processes
    *("ptrace", "process_vm_readv", "process_vm_writev", "kcmp", "pidfd_open", "pidfd_getfd"),
    *("tkill", "ioprio_set"),
    # namespaces and mounts
    *("unshare", "setns", "mount", "umount", "umount2", "pivot_root", "chroot", "open_tree"),
    *("move_mount", "fsopen", "fsconfig", "fsmount", "fspick", "mount_setattr"),
    # the kernel and the machine
    *("bpf", "perf_event_open", "userfaultfd", "io_uring_setup", "io_uring_enter"),
    *("io_uring_register", "reboot", "kexec_load", "kexec_file_load", "init_module"),
    *("finit_module", "delete_module", "sethostname", "setdomainname", "swapon", "swapoff"),
    *("acct", "settimeofday", "clock_settime", "clock_adjtime", "adjtimex", "syslog", "quotactl"),
    *("quotactl_fd", "iopl", "ioperm", "modify_ldt", "lookup_dcookie", "fanotify_init"),
    *("open_by_handle_at", "name_to_handle_at", "vhangup", "uselib", "nfsservctl"),
    *("add_key", "request_key", "keyctl"),
    # identity
    *("setuid", "setgid", "setreuid", "setregid", "setresuid", "setresgid", "setfsuid"),
    *("setfsgid", "setgroups", "capset"),
    # System V and POSIX IPC: objects that outlive the agent, shared with whoever guesses the key
    *("shmget", "shmat", "shmctl", "shmdt", "msgget", "msgsnd", "msgrcv", "msgctl", "semget"),
    *("semop", "semtimedop", "semctl", "mq_open", "mq_unlink", "mq_timedsend", "mq_timedreceive"),
    *("mq_notify", "mq_getsetattr"),
    # file metadata, which Landlock does not cover
    *("chmod", "fchmod", "fchmodat", "fchmodat2", "chown", "fchown", "lchown", "fchownat"),
    *("utime", "utimes", "futimesat", "utimensat", "setxattr", "lsetxattr", "fsetxattr"),
    *("removexattr", "lremovexattr", "fremovexattr", "mknod", "mknodat"),
)
# Syscalls numbered after landlock_restrict_self (446, the same on every modern architecture)
# postdate this list: they answer ENOSYS, as on an older kernel, which glibc and CPython handle.
# These few are known to be harmless and may be used by a newer glibc.
_NEWER_SYSCALLS = range(447, 512)
_NEWER_ALLOWED = frozenset({449, 453, 454, 455, 456, 462})  # futex*, map_shadow_stack, mseal

_Cmp = tuple[int, int, int, int]  # argument index, operator, datum a, datum b
_Rule = tuple[str | int, int, tuple[_Cmp, ...]]  # syscall, errno returned, conditions (AND)


def _seccomp_rules(pid: int, network: str) -> list[_Rule]:
    """The filter as data: libseccomp ORs rules, ANDs a rule's conditions, and allows the rest."""

    def one_of(arg: int, allowed: set[int], top: int, mask: int = 0) -> list[tuple[_Cmp, ...]]:
        # libseccomp accepts one comparison per argument per rule, so "not in" is spelled out.
        def refuse(value: int) -> _Cmp:
            return (arg, _CMP_MASKED_EQ, mask, value) if mask else (arg, _CMP_EQ, value, 0)

        refused: list[tuple[_Cmp, ...]] = [
            (refuse(value),) for value in range(top + 1) if value not in allowed
        ]
        return refused if mask else [*refused, ((arg, _CMP_GT, top, 0),)]

    eperm = errno.EPERM
    rules: list[_Rule] = [(name, eperm, ()) for name in _DENIED_SYSCALLS]
    rules.append(("clone3", errno.ENOSYS, ()))  # its flags hide behind a pointer; glibc falls back
    rules.append(("clone", eperm, ((0, _CMP_MASKED_EQ, _CLONE_THREAD, 0),)))  # threads only
    rules += [("clone", eperm, ((0, _CMP_MASKED_EQ, flag, flag),)) for flag in _CLONE_NAMESPACES]
    for name in ("kill", "tgkill", "rt_sigqueueinfo", "rt_tgsigqueueinfo"):
        rules.append((name, eperm, ((0, _CMP_NE, pid, 0),)))  # signal only itself
    for name in (
        "sched_setaffinity",
        "sched_setscheduler",
        "sched_setparam",
        "sched_setattr",
        "migrate_pages",
        "move_pages",
    ):
        rules.append((name, eperm, ((0, _CMP_NE, 0, 0),)))  # pid 0 means itself
    # Reading limits is fine; setting any, even its own, is not: the executor's hard limits
    # hold only while nothing can raise them (root with CAP_SYS_RESOURCE could).
    rules.append(("prlimit64", eperm, ((2, _CMP_NE, 0, 0),)))
    rules.append(("setrlimit", eperm, ()))
    rules += [("setpriority", eperm, ((arg, _CMP_NE, 0, 0),)) for arg in (0, 1)]
    for request in (_TIOCSTI, _TIOCLINUX):  # typing into the parent's terminal
        rules.append(("ioctl", eperm, ((1, _CMP_MASKED_EQ, 0xFFFFFFFF, request),)))
    # Interface ioctls reach the host's network namespace through any socket, even an inherited
    # one inside an empty namespace (listing eth0; with capabilities, changing it).
    rules.append(("ioctl", eperm, ((1, _CMP_MASKED_EQ, _SIOC_MASK, _SIOC_GROUP),)))
    # TCP Fast Open connects from sendto/sendmsg without the connect() that Landlock checks.
    fastopen = (_CMP_MASKED_EQ, _MSG_FASTOPEN, _MSG_FASTOPEN)
    rules.append(("sendto", eperm, ((3, *fastopen),)))
    if network == "tcp":
        socket_conditions = [
            *one_of(0, {_AF_INET, _AF_INET6}, _AF_INET6),
            *(((1, _CMP_MASKED_EQ, _SOCK_TYPE_MASK, t),) for t in (_SOCK_RAW, _SOCK_PACKET)),
            *one_of(2, {0, _IPPROTO_TCP, _IPPROTO_UDP}, _IPPROTO_UDP),
        ]
        rules += [("socket", eperm, conditions) for conditions in socket_conditions]
        rules += [("socketpair", eperm, c) for c in one_of(0, {_AF_UNIX}, _AF_UNIX)]
        rules += [("sendmsg", eperm, ((2, *fastopen),)), ("sendmmsg", eperm, ((3, *fastopen),))]
        return rules
    # No network: what is connected already may send and receive, and nothing else happens.
    # Unix stream pairs stay, for asyncio's and multiprocessing's self-pipes; datagrams do not
    # (SOCK_RAW is a datagram in disguise for AF_UNIX), as one can be sent to any abstract name.
    rules.append(("socket", eperm, ()))
    rules += [("socketpair", eperm, c) for c in one_of(0, {_AF_UNIX}, _AF_UNIX)]
    types = one_of(1, {_SOCK_STREAM}, _SOCK_TYPE_MASK, mask=_SOCK_TYPE_MASK)
    rules += [("socketpair", eperm, c) for c in types]
    for name in ("connect", "bind", "listen", "accept", "accept4", "sendmsg", "sendmmsg"):
        rules.append((name, eperm, ()))  # sendmsg's address hides behind a pointer
    rules.append(("sendto", eperm, ((4, _CMP_NE, 0, 0),)))  # a NULL address is send()
    return rules


class _ArgCmp(ctypes.Structure):
    _fields_ = (
        ("arg", ctypes.c_uint),
        ("op", ctypes.c_int),
        ("datum_a", ctypes.c_uint64),
        ("datum_b", ctypes.c_uint64),
    )


def _libseccomp() -> ctypes.CDLL:
    lib = ctypes.CDLL("libseccomp.so.2")
    lib.seccomp_init.restype = ctypes.c_void_p
    lib.seccomp_init.argtypes = (ctypes.c_uint32,)
    lib.seccomp_attr_set.argtypes = (ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32)
    lib.seccomp_syscall_resolve_name.argtypes = (ctypes.c_char_p,)
    lib.seccomp_rule_add_array.argtypes = (
        ctypes.c_void_p,
        ctypes.c_uint32,
        ctypes.c_int,
        ctypes.c_uint,
        ctypes.POINTER(_ArgCmp),
    )
    lib.seccomp_load.argtypes = lib.seccomp_release.argtypes = (ctypes.c_void_p,)
    return lib


def seccomp_problem() -> str | None:
    """Why the seccomp layer cannot be used here, in one sentence; None when it can."""
    try:
        lib = _libseccomp()
    except OSError:
        return "seccomp: libseccomp.so.2 is not installed (apt-get install libseccomp2)"
    if not hasattr(lib, "seccomp_api_get") or lib.seccomp_api_get() < 3:
        return "seccomp: the kernel or libseccomp is too old (need seccomp API level 3)"
    return None


def _build_seccomp(pid: int, network: str) -> tuple[ctypes.CDLL, int]:
    """Compile the filter before Landlock is up; loading it is the very last step."""
    lib = _libseccomp()
    ctx = lib.seccomp_init(_SCMP_ACT_ALLOW)
    if not ctx:
        raise OSError(errno.ENOMEM, "seccomp_init failed")
    lib.seccomp_attr_set(ctx, _SCMP_FLTATR_ACT_BADARCH, _SCMP_ACT_KILL_PROCESS)
    lib.seccomp_attr_set(ctx, _SCMP_FLTATR_CTL_OPTIMIZE, 2)  # binary tree; older libs ignore it
    ruled: set[int] = set()
    for syscall, err, conditions in _seccomp_rules(pid, network):
        number = _syscall_number(lib, syscall)
        if number is None:
            continue
        ruled.add(number)
        _add_rule(lib, ctx, _SCMP_ACT_ERRNO | err, number, conditions)
    if _syscall_number(lib, "landlock_restrict_self") == _SYS_RESTRICT_SELF:
        for number in _NEWER_SYSCALLS:
            if number not in ruled and number not in _NEWER_ALLOWED:
                _add_rule(lib, ctx, _SCMP_ACT_ERRNO | errno.ENOSYS, number, ())
    return lib, ctx


def _syscall_number(lib: ctypes.CDLL, syscall: str | int) -> int | None:
    if isinstance(syscall, int):
        return syscall
    number = lib.seccomp_syscall_resolve_name(syscall.encode())
    return None if number == -1 else number  # -1: unknown to this libseccomp


def _add_rule(lib: ctypes.CDLL, ctx: int, action: int, number: int, cmps: tuple[_Cmp, ...]) -> None:
    array = (_ArgCmp * len(cmps))(*(_ArgCmp(a, op, x & _ALL_BITS, y) for a, op, x, y in cmps))
    result = lib.seccomp_rule_add_array(ctx, action, number, len(cmps), array)
    if result < 0:
        raise OSError(-result, f"seccomp rule for syscall {number}: {os.strerror(-result)}")


def _load_seccomp(lib: ctypes.CDLL, ctx: int) -> None:
    result = lib.seccomp_load(ctx)
    lib.seccomp_release(ctx)
    if result < 0:
        raise OSError(-result, f"seccomp_load: {os.strerror(-result)}")


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
        seccomp = _build_seccomp(os.getpid(), walls.network) if "seccomp" in walls.layers else None
        # Order matters: a new user namespace grants capabilities that the next step drops, and
        # capset is among the calls seccomp refuses.
        if "pids" in walls.layers and walls.task_limit:
            layer = "pids"
            _limit_tasks(walls.task_limit, own_namespace="bwrap" not in walls.layers)
        if "caps" in walls.layers:
            layer = "caps"
            _drop_capabilities()
        no_new_privs()
        if "landlock" in walls.layers:
            layer = "landlock"
            _restrict_landlock(
                walls.landlock_abi, walls.read_only, walls.read_write, walls.tcp_ports
            )
        if seccomp:
            layer = "seccomp"
            _load_seccomp(*seccomp)
    except OSError as exc:
        raise _failure(f"{layer} could not be applied: {exc}") from None
    _explain_refusals(walls.layers)
    import site  # now, so that .pth files in the venv run confined

    site.main()
    if os.path.isdir(agent):
        agent = _await_code(agent, walls.preload)
    sys.argv = [agent, *args]
    with open(agent, "rb") as source:
        code = compile(source.read(), agent, "exec")
    module = type(sys)("__main__")
    module.__file__ = agent
    sys.modules["__main__"] = module
    exec(code, module.__dict__)


def _await_code(folder: str, preload: tuple[str, ...]) -> str:
    """Started before the agent's code was written: import what it will, then learn its name.

    The first line of stdin names the file inside `folder` — a bare name, so it cannot point
    anywhere else — and, after a space, the effort its model calls should use (the plan decides
    it, and the process may be older than the plan). The rest of stdin is the agent's own input.
    """
    for name in preload:
        try:  # noqa: SIM105 - contextlib would be one more import at every agent start
            __import__(name)
        except ImportError:
            pass  # the agent will import it again and see the error where it belongs
    name, _, effort = sys.stdin.readline().strip().partition(" ")
    if not name or "/" in name or name.startswith("."):
        raise _failure(f"no agent file name arrived on stdin (got {name!r})")
    if effort:
        os.environ["LLM_EFFORT"] = effort
    return os.path.join(folder, name)


if __name__ == "__main__":
    main(sys.argv[1:])
