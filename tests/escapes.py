"""The escape corpus of issue 6: agent programs that try to get out of their sandbox.

One copy, shared by the per-layer tests (test_sandbox.py, which launch children through
`sandbox.prepare` directly) and the end-to-end ones (test_escapes.py, through the executor), so
both attack with the same code.

Each source is a whole agent program as the executor runs it, with no runtime header: it reads the
executor's stdin JSON and takes what it needs (paths, ports, a pid) from the task, itself JSON. It
prints ESCAPED only when its attempt visibly worked, and lets every refusal propagate, so the
sandbox's bootstrap can name the layer under the traceback. The shells echo ESCAPED themselves: if
one ever starts, its words land on the agent's stdout, where the harness looks.
"""

from __future__ import annotations

import textwrap

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

SOURCES: dict[str, str] = {name: textwrap.dedent(body).lstrip() for name, body in _SOURCES.items()}
"""Escape name -> agent source."""
