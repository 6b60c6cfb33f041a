"""The escape corpus of issue 6: agent programs that try to get out of their sandbox.

One copy, shared by the per-layer tests (test_sandbox.py, which launch children through
`sandbox.prepare` directly) and the end-to-end ones (test_escapes.py, through the executor), so
both attack with the same code.

Each source is a whole agent program as the executor runs it, with no runtime header: it reads the
executor's stdin JSON and takes what it needs (paths, ports, a pid) from the task, itself JSON. It
prints ESCAPED only when its attempt visibly worked, and lets every refusal propagate, so the
sandbox's bootstrap can name the layer under the traceback. The shells echo ESCAPED themselves: if
one ever starts, its words land on the agent's stdout, where the harness looks.

Most escapes suit either network. NO_NETWORK_SOURCES are for agents without one (they take the
broker's inherited socket from the task as `broker_fd`), and THREAD_BOMB holds its threads until
it is killed, so that a sibling can be started while it does.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path

_SOURCES = {
    "write_outside_scratch": """
        import json, sys
        p = json.loads(json.load(sys.stdin)["task"])
        with open("inside.txt", "w") as inside:  # scratch itself stays writable
            inside.write("fine")
        with open(p["outside"], "w") as outside:
            outside.write("planted")
        print("ESCAPED")
    """,
    "read_planted_secret": """
        import json, sys
        p = json.loads(json.load(sys.stdin)["task"])
        with open(p["secret"]) as secret:
            print("ESCAPED", secret.read())
    """,
    "read_parent_environ": """
        import os, sys
        sys.stdin.read()
        with open(f"/proc/{os.getppid()}/environ", "rb") as environ:
            print("ESCAPED", environ.read().decode(errors="replace"))
    """,
    "shell_by_os_system": """
        import os, sys
        sys.stdin.read()
        print("status", os.system("echo ESCAPED by os.system"))
    """,
    "shell_by_subprocess": """
        import subprocess, sys
        sys.stdin.read()
        subprocess.run(["/bin/sh", "-c", "echo ESCAPED by subprocess"])
    """,
    "shell_by_execv": """
        import os, sys
        sys.stdin.read()
        os.execv("/bin/sh", ["sh", "-c", "echo ESCAPED by execv"])
    """,
    "shell_by_ctypes_libc": """
        import ctypes, sys
        sys.stdin.read()
        print("status", ctypes.CDLL(None).system(b"echo ESCAPED by libc.system"))
    """,
    "fork_a_thousand_times": """
        import os, sys, time
        sys.stdin.read()
        forked = 0
        try:
            while forked < 1000:
                if os.fork() == 0:
                    time.sleep(600)
                    os._exit(0)
                forked += 1
            print("ESCAPED")
        finally:
            print("forked", forked)
    """,
    "kill_the_parent": """
        import json, os, signal, sys
        p = json.loads(json.load(sys.stdin)["task"])
        os.kill(p["target"], signal.SIGKILL)
        print("ESCAPED")
    """,
    "connect_to_another_port": """
        import json, socket, sys
        p = json.loads(json.load(sys.stdin)["task"])
        socket.create_connection(("127.0.0.1", p["other_port"]), timeout=10).close()
        print("ESCAPED")
    """,
    "fastopen_to_another_port": """
        import json, socket, sys
        p = json.loads(json.load(sys.stdin)["task"])
        with socket.socket() as tfo:  # TCP Fast Open connects without calling connect()
            sent = tfo.sendto(b"TFO-CANARY", socket.MSG_FASTOPEN, ("127.0.0.1", p["other_port"]))
        print("ESCAPED", sent)
    """,
    "create_ipc_objects": """
        import ctypes, errno, json, os, sys
        p = json.loads(json.load(sys.stdin)["task"])
        libc = ctypes.CDLL(None, use_errno=True)
        key, create = p["ipc_key"], 0o1000 | 0o600  # IPC_CREAT, rw for the owner
        attempts = {
            "shm": lambda: libc.shmget(key, 4096, create),
            "msg": lambda: libc.msgget(key, create),
            "sem": lambda: libc.semget(key, 1, create),
            "mq": lambda: libc.mq_open(p["mq_name"].encode(), os.O_CREAT | os.O_RDWR, 0o600, None),
        }
        made, refused = [], []
        for kind, attempt in attempts.items():
            if attempt() >= 0:
                made.append(kind)
            else:
                refused.append((kind, ctypes.get_errno()))
        print("refused", " ".join(f"{kind} {errno.errorcode[err]}" for kind, err in refused))
        if made:
            print("ESCAPED", made)
        kind, err = refused[-1]
        raise OSError(err, f"{kind}: {os.strerror(err)}")
    """,
    "use_capabilities": """
        import ctypes, json, sys
        p = json.loads(json.load(sys.stdin)["task"])
        header = (ctypes.c_uint32 * 2)(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this process
        sets = (ctypes.c_uint32 * 6)()
        assert ctypes.CDLL(None, use_errno=True).capget(header, sets) == 0, ctypes.get_errno()
        effective = sets[0] | sets[3] << 32
        print("capabilities", hex(effective))
        if effective:
            print("ESCAPED")
        with open(p["foreign"]) as foreign:  # another uid's 0600 file: CAP_DAC_OVERRIDE reads it
            print("ESCAPED", foreign.read())
    """,
    "allocate_4_gib": """
        import sys
        sys.stdin.read()
        hoard = bytearray(4 * 1024**3)
        print("ESCAPED", len(hoard))
    """,
    "fill_the_disk": """
        import os, sys
        sys.stdin.read()
        megabyte = b"x" * (1 << 20)
        fd = os.open("fill.bin", os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        try:
            for _ in range(200):
                os.write(fd, megabyte)
            print("ESCAPED")
        finally:
            print("size", os.fstat(fd).st_size)
    """,
    "lift_the_limits": """
        import resource, sys
        sys.stdin.read()
        for limit in (resource.RLIMIT_AS, resource.RLIMIT_FSIZE, resource.RLIMIT_CPU):
            soft, hard = resource.getrlimit(limit)
            try:
                resource.setrlimit(limit, (hard, hard))
            except (ValueError, OSError):
                pass  # refused: fine, the allocation below is what must fail
        hoard = bytearray(4 * 1024**3)
        print("ESCAPED", len(hoard))
    """,
    "daemonise": """
        import os, sys, time
        sys.stdin.read()
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                time.sleep(600)
            os._exit(0)
        print("ESCAPED: a daemon outlives me")
    """,
    "linger_in_a_thread": """
        import sys, threading, time
        sys.stdin.read()
        threading.Thread(target=time.sleep, args=(600,)).start()
        print("answered, yet still here", flush=True)
    """,
}

_NO_NETWORK_SOURCES = {
    "no_socket_of_any_family": """
        import errno, socket, sys
        sys.stdin.read()
        made, refusals, last = [], {}, None
        for family in range(46):  # AF_UNSPEC .. AF_MCTP
            for kind in (socket.SOCK_STREAM, socket.SOCK_DGRAM, socket.SOCK_RAW):
                try:
                    socket.socket(family, kind).close()
                    made.append((family, kind.name))
                except OSError as exc:
                    name = errno.errorcode[exc.errno]
                    refusals[name] = refusals.get(name, 0) + 1
                    last = exc
        print("refused", refusals)
        if made:
            print("ESCAPED", made)
        raise last
    """,
    "use_the_socket_it_has": """
        import array, errno, fcntl, json, socket, struct, sys
        p = json.loads(json.load(sys.stdin)["task"])
        broker = socket.socket(fileno=p["broker_fd"])
        ours, _ = socket.socketpair()  # a unix stream pair is allowed: asyncio needs one
        listing = array.array("B", bytes(40 * 32))  # SIOCGIFCONF: the host's interfaces
        ifconf = struct.pack("iL", len(listing), listing.buffer_info()[0])
        attempts = {
            "bind": lambda: ours.bind("\\0agentgod-escape-" + p["tag"]),
            "listen": lambda: broker.listen(),
            "connect": lambda: ours.connect("\\0" + p["abstract"]),
            "sendto": lambda: broker.sendto(b"x", "\\0" + p["abstract"]),
            "sendmsg": lambda: broker.sendmsg([b"x"], [], 0, "\\0" + p["abstract"]),
            "ioctl": lambda: fcntl.ioctl(broker.fileno(), 0x8912, ifconf),
        }
        worked, last = [], None
        for name, attempt in attempts.items():
            try:
                attempt()
                worked.append(name)
            except OSError as exc:
                print(name, errno.errorcode[exc.errno])
                last = exc
        if worked:
            print("ESCAPED", worked)
        raise last
    """,
    "udp_to_a_host_port": """
        import json, socket, sys
        p = json.loads(json.load(sys.stdin)["task"])
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
            sent = udp.sendto(b"UDP-CANARY", ("127.0.0.1", p["udp_port"]))
        print("ESCAPED", sent)
    """,
}

THREAD_BOMB = textwrap.dedent(
    """
    import sys, threading
    sys.stdin.read()
    threading.stack_size(64 * 1024)  # small stacks: the address-space limit is not what stops it
    hold = threading.Event()
    started = 0
    try:
        while started < 1000:
            threading.Thread(target=hold.wait, daemon=True).start()
            started += 1
    except RuntimeError as exc:  # can't start new thread
        print("stopped:", exc)
    print("threads", started, flush=True)
    if started == 1000:
        print("ESCAPED", flush=True)
    open("holding", "w").close()  # in its scratch: what a harness that cannot see stdout waits for
    hold.wait()
    """
).lstrip()
"""Starts up to 1000 threads, says how many it got, then holds them until it is killed."""

SOURCES: dict[str, str] = {name: textwrap.dedent(body).lstrip() for name, body in _SOURCES.items()}
"""Escape name -> agent source."""

NO_NETWORK_SOURCES: dict[str, str] = {
    name: textwrap.dedent(body).lstrip() for name, body in _NO_NETWORK_SOURCES.items()
}
"""Escape name -> agent source, for agents whose only link is the broker's socket."""


# What create_ipc_objects would leave behind on the host, checked and removed after it ran.


def _ipc_leftovers(key: int, mq_name: str) -> list[str]:
    """System V objects with `key`, and the POSIX queue `mq_name`, that exist on the host."""
    found = []
    for kind in ("shm", "msg", "sem"):
        rows = Path(f"/proc/sysvipc/{kind}").read_text(encoding="ascii").splitlines()[1:]
        found += [f"{kind} {row.split()[1]}" for row in rows if int(row.split()[0]) == key]
    libc = ctypes.CDLL(None, use_errno=True)
    queue = libc.mq_open(mq_name.encode(), os.O_RDONLY)
    if queue >= 0:
        libc.mq_close(queue)
        found.append(f"mq {mq_name}")
    return found


def _remove_ipc(found: list[str]) -> None:
    """Clean up after an escape that got through, so that the next run starts clean."""
    libc = ctypes.CDLL(None, use_errno=True)
    rmid = 0  # IPC_RMID
    for kind, _, which in (entry.partition(" ") for entry in found):
        if kind == "mq":
            libc.mq_unlink(which.encode())
        elif kind == "sem":
            libc.semctl(int(which), 0, rmid)
        else:
            getattr(libc, f"{kind}ctl")(int(which), rmid, None)


@contextlib.contextmanager
def ipc_names() -> Iterator[dict[str, object]]:
    """A key and a queue name no one else uses; whatever the agent made with them must be gone."""
    key = int.from_bytes(os.urandom(3), "big") + 1
    mq_name = f"/agentgod-{uuid.uuid4().hex[:8]}"
    try:
        yield {"ipc_key": key, "mq_name": mq_name}
    finally:
        left = _ipc_leftovers(key, mq_name)
        _remove_ipc(left)
    assert left == [], "an IPC object outlived the agent"
