"""The seccomp layer of the child's walls: the denylist as data, compiled and loaded.

sandbox_boot.py raises the walls in the child and asks this module for the last of them: a
filter, compiled by the system libseccomp through ctypes, that refuses new processes, exec,
ptrace, mounts, namespaces, kernel-wide knobs, chmod/chown/utime, System V and POSIX IPC, TCP
Fast Open, and sockets other than TCP/UDP over IPv4/IPv6 — or, without a network, every new
socket and every use of one but sending and receiving on what is already connected. Refusals
are EPERM, so agents die with a readable `PermissionError`. libseccomp knows each
architecture's syscall numbers and guards the x32 and 32-bit entry points that a hand-written
BPF filter tends to forget. (pyseccomp would run `ldconfig -p` on import: +30 ms, and it fails
once Landlock is up.)

It is a module of its own because the filter is a policy to review alone, like the guard's. It
is held to the bootstrap's rules: it runs before the agent's first line at every start, so it
imports only ctypes, errno and os, and nothing of the project. The bootstrap imports it only
when the seccomp layer is asked for, from beside itself (the child runs under `-I`, so that
folder is not on sys.path); sandbox.py lets the child read it (sandbox_boot.CHILD_FILES) and
imports `seccomp_problem` to probe the machine.
"""

import ctypes
import errno
import os

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
_NEWEST_LISTED = 446  # landlock_restrict_self
_NEWER_SYSCALLS = range(_NEWEST_LISTED + 1, 512)
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


def build_filter(pid: int, network: str) -> tuple[ctypes.CDLL, int]:
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
    if _syscall_number(lib, "landlock_restrict_self") == _NEWEST_LISTED:
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


def load_filter(lib: ctypes.CDLL, ctx: int) -> None:
    """Confine this thread and all it starts, for good; the filter is released either way."""
    result = lib.seccomp_load(ctx)
    lib.seccomp_release(ctx)
    if result < 0:
        raise OSError(-result, f"seccomp_load: {os.strerror(-result)}")
