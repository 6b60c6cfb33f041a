"""OS-level confinement of a generated agent's process: the second wall behind codeguard.

Static validation is not a sandbox, so the executor asks this module how to launch each agent.
`prepare()` answers with a `Launch`: a command line, a preexec hook (no_new_privs), a uid/gid to
drop to, and the layers that are really active. Each layer is used when the platform has it
(probed once per process):

- **landlock**: a trusted bootstrap (this file, run as the child's main script) restricts the
  filesystem to read-only system, interpreter and agent paths plus a read-write scratch directory
  (no /proc at all), TCP to the API's port only (ABI >= 4), and signals and abstract sockets to
  the sandbox (ABI >= 6).
- **seccomp**: the same bootstrap then loads a filter (the system libseccomp, through ctypes) that
  refuses new processes, exec, ptrace, mounts, namespaces, kernel-wide knobs, chmod/chown/utime,
  and sockets other than TCP/UDP over IPv4/IPv6. Refusals are EPERM, so agents die with a
  readable `PermissionError`, not a signal.
- **uid**: a root parent drops the child to an unprivileged uid when it can reach the interpreter.
- **bwrap**: bubblewrap as an outer layer, with allow-list binds only and no capabilities.

Only then does the bootstrap run `site` (so a venv's `.pth` code is already confined) and the agent,
as `__main__`, with `sys.argv` as if it had been started directly. The executor's own wall
(environment, scratch cwd, process group, rlimits) is not repeated here.
"""

import ctypes
import errno
import functools
import json
import os
import stat
import sys
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from urllib.parse import urlsplit

# subprocess and shutil are imported inside the parent-side functions that need them: this file
# is also the child's bootstrap, and every module it imports is start-up time for every agent.

MODES = ("auto", "strict", "off")
LAYERS = ("landlock", "seccomp", "uid", "bwrap")
DROP_UID = DROP_GID = 65534  # nobody/nogroup: owns no files, so it can change none
BOOT_FAILURE_EXIT = 125  # the bootstrap could not raise a wall it was asked for
_BOOTSTRAP = Path(__file__).resolve()

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


@functools.cache
def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    return libc


def _syscall(number: int, *args: object) -> int:
    """Every argument is passed as a full machine word: variadic calls would truncate ints."""
    result = _libc().syscall(ctypes.c_long(number), *args)
    if result < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return result


def _no_new_privs() -> None:
    """Nothing this process executes can gain privileges (setuid binaries); Landlock needs it."""
    flag = (ctypes.c_ulong(1), ctypes.c_ulong(0), ctypes.c_ulong(0), ctypes.c_ulong(0))
    if _libc().prctl(_PR_SET_NO_NEW_PRIVS, *flag) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS) failed")


def _landlock_abi() -> int:
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
    abi: int, read_only: Sequence[str], read_write: Sequence[str], tcp_ports: Sequence[int]
) -> None:
    """Confine this thread and all it starts, for good (the bootstrap has no other threads)."""
    handled_fs = _handled_fs(abi)
    handled_net = _NET_BIND_TCP | _NET_CONNECT_TCP if abi >= 4 else 0
    scoped = _SCOPE_ABSTRACT_UNIX_SOCKET | _SCOPE_SIGNAL if abi >= 6 else 0
    attr = _RulesetAttr(handled_fs, handled_net, scoped)
    size = 8 if abi < 4 else 16 if abi < 6 else 24
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
_SOCK_RAW, _SOCK_PACKET = 3, 10
_IPPROTO_TCP, _IPPROTO_UDP = 6, 17
_TIOCSTI, _TIOCLINUX = 0x5412, 0x541C

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


def _seccomp_rules(pid: int) -> list[_Rule]:
    """The filter as data: libseccomp ORs rules, ANDs a rule's conditions, and allows the rest."""

    def one_of(arg: int, allowed: Collection[int], top: int) -> list[tuple[_Cmp, ...]]:
        # libseccomp accepts one comparison per argument per rule, so "not in" is spelled out.
        refused = [((arg, _CMP_EQ, value, 0),) for value in range(top + 1) if value not in allowed]
        return [*refused, ((arg, _CMP_GT, top, 0),)]

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
    socket_conditions = [
        *one_of(0, {_AF_INET, _AF_INET6}, _AF_INET6),
        *(((1, _CMP_MASKED_EQ, 0xF, kind),) for kind in (_SOCK_RAW, _SOCK_PACKET)),
        *one_of(2, {0, _IPPROTO_TCP, _IPPROTO_UDP}, _IPPROTO_UDP),
    ]
    rules += [("socket", eperm, conditions) for conditions in socket_conditions]
    rules += [("socketpair", eperm, c) for c in one_of(0, {_AF_UNIX}, _AF_UNIX)]
    for request in (_TIOCSTI, _TIOCLINUX):  # typing into the parent's terminal
        rules.append(("ioctl", eperm, ((1, _CMP_MASKED_EQ, 0xFFFFFFFF, request),)))
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


def _seccomp_problem() -> str | None:
    try:
        lib = _libseccomp()
    except OSError:
        return "seccomp: libseccomp.so.2 is not installed (apt-get install libseccomp2)"
    if not hasattr(lib, "seccomp_api_get") or lib.seccomp_api_get() < 3:
        return "seccomp: the kernel or libseccomp is too old (need seccomp API level 3)"
    return None


def _build_seccomp(pid: int) -> tuple[ctypes.CDLL, int]:
    """Compile the filter before Landlock is up; loading it is the very last step."""
    lib = _libseccomp()
    ctx = lib.seccomp_init(_SCMP_ACT_ALLOW)
    if not ctx:
        raise OSError(errno.ENOMEM, "seccomp_init failed")
    lib.seccomp_attr_set(ctx, _SCMP_FLTATR_ACT_BADARCH, _SCMP_ACT_KILL_PROCESS)
    lib.seccomp_attr_set(ctx, _SCMP_FLTATR_CTL_OPTIMIZE, 2)  # binary tree; older libs ignore it
    ruled: set[int] = set()
    for syscall, err, conditions in _seccomp_rules(pid):
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
    import subprocess

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
    import shutil

    if not sys.platform.startswith("linux"):  # the syscall numbers below mean other things
        why_not = {layer: f"{layer}: only on Linux" for layer in LAYERS}
        return Capabilities(0, False, None, False, False, why_not)
    why_not: dict[str, str] = {}
    abi = _landlock_abi()
    if not abi:
        why_not["landlock"] = "landlock: the kernel has no Landlock (Linux >= 5.13 with it enabled)"
    seccomp_problem = _seccomp_problem()
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
) -> Launch:
    """How to launch `agent` with `python`, confined as far as this machine allows.

    `scratch` must exist; with the uid layer it is chowned to DROP_UID. `read_only` adds paths
    the agent may read (the venv is found from `python` already). `layers` narrows the choice
    to some of LAYERS (for tests and benchmarks); strict mode still insists that Landlock and
    seccomp exist on the machine. Raises SandboxUnavailable in strict mode when they do not.
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
    plain = [python, "-X", "utf8", "-I", str(agent)]
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
        config = {
            "landlock": caps.landlock_abi if "landlock" in active else 0,
            "seccomp": "seccomp" in active,
            "read_only": [*read_paths, "/dev/urandom"],
            "read_write": [str(scratch), "/dev/null"],
            "tcp_ports": [api_port],
            "layers": active,
        }
        boot = [python, "-X", "utf8", "-I", "-S", str(_BOOTSTRAP)]
        argv = [*boot, json.dumps(config, separators=(",", ":")), str(agent)]
    if "bwrap" in active:
        argv = _bwrap_argv(caps.bwrap or "bwrap", read_paths, str(scratch), argv)
    uid = DROP_UID if "uid" in active else None
    gid = DROP_GID if "uid" in active else None
    preexec = _no_new_privs if active else None  # also before bwrap, or for the uid alone
    return Launch(argv, preexec, uid, gid, tuple(active), tuple(skipped))


def require_strict() -> None:
    """Raise SandboxUnavailable unless this machine has both Landlock and seccomp."""
    caps = probe()
    missing = [caps.why_not[layer] for layer in ("landlock", "seccomp") if layer in caps.why_not]
    if missing:
        raise SandboxUnavailable("strict sandbox refused to run agents: " + "; ".join(missing))


def _landlock_gaps(abi: int) -> list[str]:
    gaps = []
    if abi < 4:
        gaps.append(f"landlock: ABI {abi} has no network rules, so any TCP port is reachable")
    if abi < 6:
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


# ----------------------------------------------------------------------------------------------
# The child side: this file run as `python -X utf8 -I -S sandbox.py <config> <agent.py>`.

# What a refusal most likely means, per errno, for the line added under the agent's traceback.
_REFUSALS = {
    errno.EACCES: (
        ("landlock", "path, program or TCP port outside the allow-list"),
        ("uid", "file the unprivileged uid may not use"),
    ),
    errno.EPERM: (
        ("seccomp", "forbidden system call such as fork, exec, mount, chmod or a socket kind"),
        ("landlock", "signal to a process outside the sandbox"),
        ("uid", "operation reserved to root"),
    ),
    errno.ENOSYS: (("seccomp", "system call reported as absent"),),
    errno.EXDEV: (("landlock", "link or rename across the allow-list"),),
    errno.EROFS: (("bwrap", "read-only mount"),),
}


def _explain_refusals(active: Sequence[str]) -> None:
    """Print tracebacks as a plain run would, plus one `sandbox:` line naming the likely layer."""

    def hook(kind: type[BaseException], exc: BaseException, tb: TracebackType | None) -> None:
        while tb is not None and tb.tb_frame.f_code.co_filename == __file__:
            tb = tb.tb_next  # hide the bootstrap's own frames
        sys.__excepthook__(kind, exc.with_traceback(tb), tb)
        if isinstance(exc, OSError):
            causes = [
                f"{layer} ({what})"
                for layer, what in _REFUSALS.get(exc.errno, ())
                if layer in active
            ]
            if causes:
                print(
                    f"sandbox: refused by {' or '.join(causes)}: {kind.__name__} "
                    f"[Errno {exc.errno}] {exc.strerror}",
                    file=sys.stderr,
                )

    sys.excepthook = hook


def _boot(config_json: str, agent: str, *args: str) -> None:
    """Raise the walls the parent chose, then become the agent. Fails closed: exit 125."""
    config = json.loads(config_json)
    layer = "seccomp"
    try:
        seccomp = _build_seccomp(os.getpid()) if config["seccomp"] else None
        _no_new_privs()
        if config["landlock"]:
            layer = "landlock"
            _restrict_landlock(
                config["landlock"], config["read_only"], config["read_write"], config["tcp_ports"]
            )
        if seccomp:
            layer = "seccomp"
            _load_seccomp(*seccomp)
    except OSError as exc:
        print(f"sandbox: {layer} could not be applied: {exc}", file=sys.stderr)
        sys.exit(BOOT_FAILURE_EXIT)
    _explain_refusals(config["layers"])
    sys.argv = [agent, *args]
    import site  # now, so that .pth files in the venv run confined

    site.main()
    with open(agent, "rb") as source:
        code = compile(source.read(), agent, "exec")
    main = type(sys)("__main__")
    main.__file__ = agent
    sys.modules["__main__"] = main
    exec(code, main.__dict__)


if __name__ == "__main__":
    _boot(*sys.argv[1:])
