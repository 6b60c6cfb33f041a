"""guardpolicy.py - what generated agents may install, import and touch, and why not the rest.

The policy alone, as tables a reviewer can read without the checker: every entry carries the reason
an agent is told when it breaks the rule. codeguard.py applies these tables to a syntax tree;
executor.py reads ALLOWED_PACKAGES to decide what it installs. Nothing here parses Python: the
functions at the end judge names and strings - dotted module paths, open modes, format strings,
SQL, coding cookies - because what those may say is policy too.
"""

import re
import string
import sys

# ---- what agents may install and import ----------------------------------------------------------

ALLOWED_PACKAGES: dict[str, str] = {
    # HTTP client, pure Python. Reaches only the URLs it is given (no unix sockets without extras).
    "requests": "requests",
    # HTML parsing, pure Python on the stdlib html.parser (lxml is not installed, so not native).
    "beautifulsoup4": "bs4",
    # YAML. Its full/unsafe loaders construct arbitrary objects (!!python/object/apply runs any
    # callable), so only the safe_* and dump* surface is reachable (MODULE_ALLOWLISTS).
    "pyyaml": "yaml",
    # Date parsing and arithmetic, pure Python. dateutil.zoneinfo.rebuild runs `zic`: blocked.
    "python-dateutil": "dateutil",
    # Plain-text tables, pure Python; formats strings and nothing else.
    "tabulate": "tabulate",
    # XML <-> dict, pure Python on the stdlib expat parser with entities disabled by default.
    "xmltodict": "xmltodict",
}
# Deliberately absent, each for a concrete reason: numpy (numpy.ctypeslib loads native libraries on
# request; numpy.load can unpickle), pandas (read_clipboard spawns xclip/pbpaste, read_pickle runs
# pickles, DataFrame.query resolves `@` names to arbitrary callables, dozens of to_* writers),
# markdown (imports extensions by dotted name), jinja2 (template sandbox escapes), lxml (native,
# resolves external entities), httpx (unix-socket transports reach local daemons).

PROCESS = "starts or signals processes; agents may not start processes"
FILES = "writes, moves or deletes files; agents may only read files"
DYNAMIC = "runs code chosen at runtime, which no static check can see"
INTERNALS = "reaches interpreter internals that can undo these checks"
SYSTEM = "controls terminals, devices or system-wide state"
NETWORK = "serves, opens local sockets or speaks non-HTTP protocols; agents are HTTP clients"
ENVIRON = "changes the process environment; agents may only read it (os.environ.get)"
TERMINAL = "waits for a person at a terminal; agents have none (stdin carries the task)"
FINALISER = "runs code at an unpredictable moment (collection, exit), after run() has answered"
BUILDS_CLASSES = "builds a class from a namespace these checks never see; write a class statement"
HOME = (
    "leads to where the agent is stored, AgentGOD's home, which holds the key; agents read only"
    " the files input_files() gives"
)
RUNTIME_PRIVATE = (
    "is none of this code's own names, so it is the trusted runtime's private part; agents use"
    " call_llm, input_files, save_artifact and format_previous"
)
TROJAN_SOURCE = (
    "is an invisible bidi control character, which makes code read differently from how it runs"
    " (Trojan Source); write it as an escape such as \\u202e inside a string if the text needs it"
)


def _group(reason: str, *modules: str) -> dict[str, str]:
    return dict.fromkeys(modules, reason)


BLOCKED_REASONS: dict[str, str] = {
    # Processes. platform and pydoc shell out from ordinary functions (uname/file, the pager),
    # antigravity opens a browser on import, mailcap builds shell command lines, Tcl (tkinter,
    # turtle, idlelib) can exec programs, signal delivers kills and runs handlers at any point.
    **_group(
        PROCESS,
        "subprocess", "multiprocessing", "concurrent.futures.process", "asyncio.subprocess",
        "asyncio.base_subprocess", "asyncio.unix_events", "asyncio.windows_events",
        "asyncio.windows_utils", "pty", "pipes", "posix", "nt", "signal", "platform", "pydoc",
        "webbrowser", "antigravity", "mailcap", "ensurepip", "venv", "distutils", "idlelib",
        "tkinter", "turtle", "turtledemo",
    ),
    # Code chosen at runtime: importers, (un)picklers, debuggers and profilers that run strings,
    # doctest/unittest (run docstrings, load and call objects by dotted name), site (.pth lines
    # execute), pyclbr/modulefinder (import packages to inspect them), logging.config
    # (dictConfig instantiates any dotted name, fileConfig evals).
    **_group(
        DYNAMIC,
        "builtins", "importlib", "imp", "zipimport", "pkgutil", "runpy", "code", "codeop",
        "pickle", "marshal", "shelve", "doctest", "unittest", "timeit", "profile",
        "cProfile", "trace", "pdb", "bdb", "site", "modulefinder", "pyclbr", "logging.config",
    ),
    # Reflection that reaches any live object, frame or raw memory.
    **_group(INTERNALS, "inspect", "gc", "ctypes", "faulthandler"),
    # File writers with no read-only use worth keeping: fileinput(inplace=True) rewrites files,
    # uu.decode writes the name found in its input, cgitb writes to logdir, tracemalloc and
    # pstats dump to paths, cookiejar saves, readline writes history, mmap maps fds writable.
    **_group(
        FILES,
        "shutil", "fileinput", "mailbox", "http.cookiejar", "dbm", "py_compile", "compileall",
        "zipapp", "lib2to3", "uu", "cgitb", "tracemalloc", "pstats", "logging.handlers",
        "msilib", "readline", "mmap",
    ),
    # resource can lift the limits the executor set; the rest drive terminals and devices.
    **_group(
        SYSTEM,
        "resource", "fcntl", "termios", "tty", "curses", "syslog", "winreg", "winsound",
        "msvcrt", "ossaudiodev", "spwd",
    ),
    # Raw sockets reach local daemons (docker.sock); imaplib.IMAP4_stream runs a command.
    **_group(
        NETWORK,
        "socket", "socketserver", "http.server", "wsgiref", "xmlrpc.server", "smtplib", "smtpd",
        "ftplib", "poplib", "imaplib", "nntplib", "telnetlib", "asynchat", "asyncore",
    ),
    **_group(TERMINAL, "getpass"),
    **_group(FINALISER, "atexit"),
    # Where the interpreter and its venv are installed: the agents' venv is in AgentGOD's home.
    **_group(HOME, "sysconfig"),
}  # fmt: skip
# Kept on purpose: os and sys (read-only use is needed; their dangerous attributes are refused
# below), threading and asyncio (no process or server helpers reachable), tempfile (writes only
# inside TMPDIR, the agent's scratch directory, and `dir=` is refused), sqlite3 (":memory:" only),
# types (allowlisted attributes), ast (literal_eval is useful and nothing can compile a tree),
# weakref, dis, pickletools (read-only introspection), zipfile/tarfile/gzip (read modes only).

BLOCKED_STDLIB: frozenset[str] = frozenset(BLOCKED_REASONS)
"""Standard-library modules agents may not import. Dotted entries block a submodule only."""

BLOCKED_PACKAGE_MODULES: dict[str, str] = {
    "dateutil.zoneinfo.rebuild": PROCESS,  # runs `zic` and writes tarballs
    "bs4.diagnose": DYNAMIC,  # profiles parsers with cProfile.runctx on a code string
}

PACKAGE_IMPORTS = frozenset(ALLOWED_PACKAGES.values())


# ---- what agents may touch inside allowed modules ------------------------------------------------

OS_READ_ONLY = frozenset(
    {
        "path", "environ", "getenv", "getcwd", "getcwdb", "listdir", "scandir", "walk", "stat",
        "lstat", "fstat", "access", "readlink", "sep", "altsep", "extsep", "pathsep", "linesep",
        "defpath", "devnull", "curdir", "pardir", "name", "cpu_count", "process_cpu_count",
        "getpid", "getppid", "getuid", "geteuid", "getgid", "getegid", "getgroups", "getlogin",
        "uname", "times", "getloadavg", "urandom", "fspath", "fsencode", "fsdecode", "PathLike",
        "DirEntry", "stat_result", "terminal_size", "get_terminal_size", "strerror", "error",
        "get_exec_path", "sched_getaffinity", "isatty", "F_OK", "R_OK", "W_OK", "X_OK",
        "SEEK_SET", "SEEK_CUR", "SEEK_END",
    }
)  # fmt: skip
OS_PROCESS_PREFIXES = ("exec", "spawn", "posix_spawn", "fork", "kill", "wait", "set", "sched_set")
OS_PROCESS = frozenset(
    {"system", "popen", "startfile", "abort", "nice", "plock", "register_at_fork"}
)
OS_FILES = frozenset(
    {
        "remove", "unlink", "rmdir", "removedirs", "rename", "renames", "replace", "mkdir",
        "makedirs", "chmod", "fchmod", "lchmod", "chown", "fchown", "lchown", "chflags",
        "lchflags", "symlink", "link", "truncate", "ftruncate", "open", "fdopen", "write",
        "pwrite", "writev", "pwritev", "sendfile", "copy_file_range", "splice", "mkfifo",
        "mknod", "utime", "dup", "dup2", "setxattr", "removexattr", "memfd_create",
    }
)  # fmt: skip
YAML_SAFE = frozenset(
    {
        "safe_load", "safe_load_all", "safe_dump", "safe_dump_all", "dump", "dump_all", "scan",
        "parse", "compose", "compose_all", "emit", "serialize", "serialize_all",
        "add_representer", "add_multi_representer", "SafeLoader", "CSafeLoader", "SafeDumper",
        "CSafeDumper", "Dumper", "CDumper", "YAMLError", "MarkedYAMLError", "ScannerError",
        "ParserError", "ComposerError", "ConstructorError", "ReaderError", "EmitterError",
        "SerializerError", "RepresenterError", "error", "nodes", "events", "tokens", "reader",
        "scanner", "parser", "composer", "resolver", "emitter", "serializer", "representer",
    }
)  # fmt: skip
TYPES_SAFE = frozenset(
    {
        "SimpleNamespace", "MappingProxyType", "NoneType", "GenericAlias", "UnionType",
        "EllipsisType", "NotImplementedType", "GeneratorType",
    }
)  # fmt: skip
MODULE_ALLOWLISTS: dict[str, tuple[frozenset[str], str]] = {
    # Checked longest prefix first, so os.environ.<x> is judged by the environ list.
    "os.environ": (frozenset({"get", "keys", "values", "items", "copy"}), ENVIRON),
    "os": (OS_READ_ONLY, "is not one of the read-only os functions agents may use"),
    "yaml": (YAML_SAFE, "can construct arbitrary Python objects; use yaml.safe_load/safe_dump"),
    "types": (TYPES_SAFE, "builds functions, code objects or classes at runtime"),
}
QUALIFIED_BLOCKS: dict[str, str] = {
    "sys.modules": INTERNALS,
    "sys.path": INTERNALS,  # a changed path makes a later import run a file the agent wrote
    "sys.meta_path": INTERNALS,
    "sys.path_hooks": INTERNALS,
    "sys.path_importer_cache": INTERNALS,
    "sys.settrace": INTERNALS,
    "sys.setprofile": INTERNALS,
    "sys.addaudithook": INTERNALS,
    "sys.call_tracing": INTERNALS,
    "sys.monitoring": INTERNALS,
    "sys.remote_exec": DYNAMIC,
    "sys.setdlopenflags": INTERNALS,
    "sys.breakpointhook": TERMINAL,
    # The agent's own file and interpreter: both are kept under AgentGOD's home, beside the key.
    "sys.argv": HOME,
    "sys.orig_argv": HOME,
    "sys.executable": HOME,
    "sys.prefix": HOME,
    "sys.exec_prefix": HOME,
    "sys.base_prefix": HOME,
    "sys.base_exec_prefix": HOME,
    "xml.etree.ElementTree.ElementTree.write": FILES,
    "weakref.finalize": FINALISER,
}
# Module-level functions that run a module's command-line program on sys.argv (or the list given);
# several write or extract files (zipfile.main, tarfile.main, gzip.main, json.tool.main).
COMMAND_LINE_MAINS = frozenset({"main", "test", "demo"})
COMMAND_LINE = "runs the module's command-line program, which can write or extract files"
# weakref constructors whose second argument is a callback run when the referent dies.
WEAKREF_CALLBACKS = frozenset(
    f"weakref.{name}" for name in ("ref", "proxy", "WeakMethod", "KeyedRef", "ReferenceType")
)
# Metaclasses: called, or derived from, they build classes the way three-argument type() does.
# Builtin type is judged apart, since type(x) with one argument is ordinary.
METACLASSES = frozenset({"abc.ABCMeta", "enum.EnumMeta", "enum.EnumType", "typing.NamedTupleMeta"})
# Objects whose attribute `send` writes raw bytes to the connection's socket.
HTTP_CONNECTIONS = frozenset({"http.client.HTTPConnection", "http.client.HTTPSConnection"})
# Methods a class may not define, whatever it is named or derived from. Judged by name wherever a
# name is bound, stored or spelled as a string: a base class can hide behind aliases, a method can
# be attached after the class statement, and a class can be built from a dict.
FORBIDDEN_METHODS: dict[str, str] = {
    "__del__": f"a finaliser {FINALISER}; it is the published smolagents escape - use a context"
    " manager instead",
    # string.Formatter walks attribute paths written in a format string ("{0.__init__.__globals__}")
    # and hands what it finds to these hooks.
    **_group(
        "overrides a string.Formatter hook that receives objects reached through attribute paths"
        " written in format strings",
        "get_field",
        "format_field",
        "convert_field",
    ),
}
# Module names that may not be reached as an attribute of another module (`glob.os`,
# `urllib.request.tempfile`): policies are keyed on the canonical name, so a detour would skip them.
DETOUR_MODULES = frozenset(
    {name.split(".")[0] for name in BLOCKED_STDLIB}
    | {"os", "sys", "types", "yaml", "xml", "dateutil", "sqlite3", "tempfile", "io", "codecs"}
    | {"urllib", "bs4"}
)

MAC_LOOKUP = "may shell out to ifconfig/ip to find a MAC address; use uuid.uuid4()"
ANYWHERE: dict[str, str] = {
    # Attribute names that mean one dangerous thing on whatever object carries them.
    **_group(
        PROCESS,
        "popen", "Popen", "fork", "forkpty", "posix_spawn", "posix_spawnp", "startfile",
        "create_subprocess_exec", "create_subprocess_shell", "subprocess_exec",
        "subprocess_shell", "ProcessPoolExecutor",
    ),
    **_group(MAC_LOOKUP, "uuid1", "getnode"),
    **_group(
        FILES,
        "write_text", "write_bytes", "unlink", "rmdir", "mkdir", "makedirs", "removedirs",
        "touch", "chmod", "lchmod", "fchmod", "chown", "lchown", "fchown", "symlink_to",
        "hardlink_to", "link_to", "symlink", "extractall", "makefile", "makedir", "makelink",
        "makefifo", "makedev", "mkfifo", "mknod", "utime", "urlretrieve", "URLopener",
        "FancyURLopener", "PyZipFile", "FileHandler", "WatchedFileHandler",
        "RotatingFileHandler", "TimedRotatingFileHandler", "write_history_file",
        "append_history_file", "dump_stats", "keylog_filename", "Wave_write", "Aifc_write",
        "Au_write",
    ),
    # typing.get_type_hints and ForwardRef evaluate strings; Formatter.get_field walks attribute
    # paths written in a string; sqlite extensions are native code; the yaml names build objects.
    **_group(
        DYNAMIC,
        "eval", "exec", "get_type_hints", "ForwardRef", "evaluate_forward_ref", "get_field",
        "import_module", "load_extension", "enable_load_extension", "unsafe_load",
        "unsafe_load_all", "full_load", "full_load_all", "UnsafeLoader", "FullLoader",
        "CLoader", "CUnsafeLoader", "CFullLoader", "UnsafeConstructor", "FullConstructor",
    ),
    # Frames and code objects lead to every namespace (f_globals["__builtins__"]).
    **_group(
        INTERNALS,
        "tb_frame", "f_back", "f_builtins", "f_code", "f_globals", "f_locals", "f_trace",
        "f_lineno", "gi_frame", "gi_code", "cr_frame", "cr_code", "ag_frame", "ag_code",
        "settrace", "setprofile", "settrace_all_threads", "setprofile_all_threads",
    ),
    **_group(
        NETWORK,
        "start_server", "start_unix_server", "open_unix_connection", "create_server",
        "create_unix_server", "create_unix_connection", "open_connection", "create_connection",
        "create_datagram_endpoint", "connect_accepted_socket", "sock_connect", "sock_accept",
        "sock_recv", "sock_recv_into", "sock_recvfrom", "sock_recvfrom_into", "sock_sendall",
        "sock_sendto", "sock_sendfile", "connect_read_pipe", "connect_write_pipe", "add_reader",
        "add_writer", "sock",
    ),
    # A module reached through another object is a module the import allowlist never saw.
    **_group(
        "reaches a module through another object; import what you need directly",
        "os", "sys", "subprocess", "builtins", "ctypes", "importlib", "shutil", "pickle",
        "marshal", "shelve", "socket", "multiprocessing", "posix", "pty", "runpy", "webbrowser",
        "pydoc",
    ),
}  # fmt: skip

# Callables judged by their arguments. They may only be called directly: passed around uncalled
# they would be called somewhere the argument checks cannot see. Value: where the mode argument
# sits when the receiver is a module or class (open(file, mode), ZipFile(file, mode), ...).
OPENERS: dict[str, int] = {
    "open": 1, "FileIO": 1, "ZipFile": 1, "TarFile": 1, "GzipFile": 1, "BZ2File": 1,
    "LZMAFile": 1, "taropen": 1, "gzopen": 1, "bz2open": 1, "xzopen": 1, "FileType": 0,
}  # fmt: skip
# tempfile makers: how many positional arguments come before suffix/prefix/dir.
TEMPFILE_MAKERS: dict[str, int] = {
    "NamedTemporaryFile": 4, "TemporaryFile": 4, "SpooledTemporaryFile": 5,
    "TemporaryDirectory": 0, "mkstemp": 0, "mkdtemp": 0,
}  # fmt: skip
CALL_ONLY = frozenset(
    {*OPENERS, *TEMPFILE_MAKERS, "replace", "rename", "extract", "basicConfig"}
    | {"attrgetter", "methodcaller", "getattr", "setattr", "delattr", "hasattr"}
    | {"execute", "executemany", "executescript"}
)
# Judged by qualified name only: sqlite3 cannot travel as a value, so `client.connect(url)` on
# some other object is never sqlite3's.
SQLITE_CONNECTORS = frozenset(
    f"{module}.{name}"
    for module in ("sqlite3", "sqlite3.dbapi2")
    for name in ("connect", "Connection")
)
TYPING_FACTORIES = frozenset(
    {"TypeVar", "NewType", "NamedTuple", "TypedDict", "make_dataclass", "ParamSpec"}
)

# Builtins refused wherever they appear, called or not.
FORBIDDEN_BUILTINS: dict[str, str] = {
    **_group(DYNAMIC, "eval", "exec", "compile", "__import__"),
    **_group("exposes a namespace dict, and __builtins__ with it", "globals", "locals", "vars"),
    **_group(TERMINAL, "input", "breakpoint", "help"),
}
# Builtins agents may call with checked arguments. Every use of these names is judged as the
# builtin, whatever else they are bound to, so rebinding cannot hide one; rebinding is refused as
# well except for `type`, which agents often reuse as a variable and whose rule is harmless there.
CHECKED_BUILTINS = frozenset({"getattr", "setattr", "delattr", "hasattr", "open", "type"})
PROTECTED_NAMES = frozenset({*FORBIDDEN_BUILTINS, *CHECKED_BUILTINS - {"type"}, "__builtins__"})
HOME_NAMES = frozenset({"__file__", "__cached__"})
"""Module names that hold the agent's own path, under AgentGOD's home."""
HOME_WORDS = re.compile(
    r"\.env\b|\.agentgod\b|AGENTGOD_HOME|ANTHROPIC_API_KEY|/proc/", re.IGNORECASE
)
"""Text that names the home's .env, the home itself, the key's variable, or the process's own
files (/proc/self/cmdline and friends lead to the agent's path): refused in any string literal."""
FORBIDDEN_DUNDER_NAMES = frozenset(
    {"__builtins__", "__loader__", "__spec__", "__build_class__", "__class__", "__annotations__"}
)
# Dunder attributes that are harmless: reading a name or docstring, and calling the ordinary
# data-model methods (super().__init__(...) is in every subclass).
DUNDER_READS = frozenset({"__name__", "__qualname__", "__doc__", "__module__"})
DUNDER_CALLS = frozenset(
    {
        "__init__", "__post_init__", "__repr__", "__str__", "__format__", "__eq__", "__ne__",
        "__lt__", "__le__", "__gt__", "__ge__", "__hash__", "__bool__", "__len__", "__iter__",
        "__next__", "__contains__", "__getitem__", "__setitem__", "__delitem__", "__enter__",
        "__exit__", "__missing__",
    }
)  # fmt: skip
DUNDER_KEYS = frozenset({"__builtins__", "__import__", "__globals__", "__loader__", "__dict__"})
NAMEDTUPLE_API = frozenset({"_asdict", "_replace", "_fields", "_make", "_field_defaults"})
# Modules with rules keyed on their qualified names (an allowlist, a blocked submodule, a blocked
# member), so they may not travel as values: a parameter holding one would escape resolution.
POLICED_MODULES = frozenset(
    {
        "os", "sys", "types", "yaml", "xml", "xml.etree", "xml.etree.ElementTree", "sqlite3",
        "sqlite3.dbapi2", "dateutil", "dateutil.zoneinfo", "bs4", "asyncio", "concurrent",
        "concurrent.futures", "logging", "http", "xmlrpc", "urllib", "urllib.request",
    }
)  # fmt: skip
ENVIRON_COPIERS = frozenset({"dict", "len", "sorted", "list", "set", "tuple", "str", "repr"})
# SQL statements whose kind cannot write a file, whatever text is spliced into them at runtime:
# sqlite3's execute() runs exactly one statement, so its first keyword decides what it can do.
SAFE_SQL_STATEMENTS = frozenset(
    {
        "select", "insert", "update", "delete", "replace", "create", "drop", "alter", "with",
        "values", "begin", "commit", "end", "rollback", "savepoint", "release", "analyze",
        "reindex", "detach",
    }
)  # fmt: skip
# Pragmas that choose where SQLite writes files.
FILE_PRAGMAS = frozenset({"temp_store_directory", "data_store_directory"})
# Source encodings under which the text this checker reads is the text Python runs.
UTF8_NAMES = frozenset({"utf-8", "utf8", "utf-8-sig", "ascii", "us-ascii"})


def os_reason(name: str) -> str:
    """Why os.<name> is refused: the specific harm if it has one, else the allowlist's reason."""
    if name in OS_PROCESS or name.startswith(OS_PROCESS_PREFIXES):
        return PROCESS
    if name in ("putenv", "unsetenv"):
        return ENVIRON
    if name in OS_FILES:
        return FILES
    return "is not one of the read-only os functions agents may use (os.path, os.listdir, ...)"


def import_refusal(dotted: str, declared: frozenset[str] | None = None) -> str | None:
    """Why `import <dotted>` is refused (text to follow the import as shown), else None.

    `declared` is the import names of the packages this agent's plan asked for; when given, any
    other package is refused too: it is not installed for this agent, so the import would crash.
    """
    top = dotted.split(".")[0]
    if top == "__future__":
        return None
    if declared is not None and top in PACKAGE_IMPORTS and top not in declared:
        return (
            f": {top} is not installed for this agent (its plan did not ask for it);"
            " use the standard library instead"
        )
    if top in PACKAGE_IMPORTS or (top in sys.stdlib_module_names and not top.startswith("_")):
        return qualified_refusal(dotted)
    if top in sys.stdlib_module_names:
        return f": {top} is a private implementation module"
    packages = ", ".join(sorted(PACKAGE_IMPORTS))
    return (
        f": {top} is not an allowed module; use the standard library or one of the allowed"
        f" packages ({packages})"
    )


def qualified_refusal(qname: str) -> str | None:
    """Why a module-qualified name (os.system, glob.os, sys.modules) is refused, as text to follow
    the name as shown, else None. Every prefix counts: os.environ.pop is judged as os.environ's."""
    parts = qname.split(".")
    for i in range(1, len(parts) + 1):
        prefix = ".".join(parts[:i])
        reason = BLOCKED_REASONS.get(prefix) or BLOCKED_PACKAGE_MODULES.get(prefix)
        if reason is not None:
            return f": {prefix} {reason}"
    for i, part in enumerate(parts[1:], start=1):
        owner = ".".join(parts[:i])
        if part.startswith("_") and not is_dunder(part):
            return f": {part} is private to {owner}; {INTERNALS}"
        if part in DETOUR_MODULES:
            return f" reaches module {part} through {owner}; import {part} directly"
    for prefix in sorted(MODULE_ALLOWLISTS, key=len, reverse=True):
        allowed, reason = MODULE_ALLOWLISTS[prefix]
        depth = prefix.count(".") + 1
        if qname.startswith(prefix + ".") and parts[depth] not in allowed:
            return f" {os_reason(parts[depth]) if prefix == 'os' else reason}"
    if len(parts) > 1 and parts[-1] in COMMAND_LINE_MAINS:
        return f" {COMMAND_LINE}"
    for i in range(2, len(parts) + 1):
        prefix = ".".join(parts[:i])
        if prefix in QUALIFIED_BLOCKS:
            return f" {QUALIFIED_BLOCKS[prefix]}"
    return None


def _mode_head(mode: str) -> str:
    """The open-mode part of a mode string ("w:gz" -> "w", "r|*" -> "r")."""
    return mode.split(":")[0].split("|")[0]


def looks_like_mode(text: str) -> bool:
    """Whether a string could be an open mode rather than, say, an archive member's name."""
    head = _mode_head(text)
    return 0 < len(head) <= 3 and set(head) <= set("rwxabtU+")


def opens_for_writing(mode: str) -> bool:
    """Whether an open mode can write, create, append or truncate."""
    return bool(set(_mode_head(mode)) & set("wxa+"))


def is_dunder(name: str) -> bool:
    """Whether a name is a data-model name (__x__), not merely private (_x, __x)."""
    return len(name) > 4 and name.startswith("__") and name.endswith("__")


def home_reference(text: str) -> str | None:
    """What in a string literal names AgentGOD's home, its .env or the key, else None."""
    found = HOME_WORDS.search(text)
    return None if found is None else f"names {found.group()!r}, which {HOME}"


def attribute_refusal(name: str) -> str | None:
    """Why reaching attribute `name` through a string (a format field) is refused, else None."""
    if is_dunder(name):
        return None if name in DUNDER_READS else INTERNALS
    if name.startswith("_") and name not in NAMEDTUPLE_API:
        return f"is private to another object; {INTERNALS}"
    if name.startswith("co_"):
        return INTERNALS
    return ANYWHERE.get(name)


_FIELD_STEP = re.compile(r"\.([^.\[]*)|\[([^\]]*)\]")


def format_field_problem(text: str) -> str | None:
    """What a format string's fields reach that code may not ("{0.__globals__}" is f.__globals__).

    str.format and string.Formatter walk attribute and index paths written in the string itself, so
    a field is judged like the attribute or subscript it stands for, nested fields in a format spec
    ("{0:{1.__class__}}") included. A string str.format would reject is no format string.
    """
    if "{" not in text:
        return None
    try:
        fields = [(field, spec) for _, field, spec, _ in string.Formatter().parse(text) if field]
    except ValueError:
        return None
    for field, spec in fields:
        start = min((i for i in (field.find("."), field.find("[")) if i >= 0), default=len(field))
        for step in _FIELD_STEP.finditer(field, start):
            attr, key = step.groups()
            if attr is not None and (reason := attribute_refusal(attr)) is not None:
                return f"its field {{{field}}} reaches {attr}, which {reason}"
            if key in DUNDER_KEYS:
                return f"its field {{{field}}} reaches key {key}, which {INTERNALS}"
        nested = format_field_problem(spec) if spec else None
        if nested is not None:
            return nested
    return None


_SQL_LEXEME = re.compile(
    r"--[^\n]*|/\*.*?(?:\*/|\Z)|'(?:[^']|'')*'?|\"(?:[^\"]|\"\")*\"?|`[^`]*`?|\[[^\]]*\]?"
    r"|[a-z_][a-z0-9_$]*|\S",
    re.DOTALL,
)
SQL_HOLE = "\x00"
"""Stands for SQL text only known at runtime (an f-string field, a variable) in sql_problem."""


def _sql_statements(text: str) -> list[list[str]]:
    """SQL as statements of lower-case tokens: comments dropped and each quoted string or name one
    token ("'"), so comments, line breaks, spacing and case cannot hide a keyword."""
    statements: list[list[str]] = [[]]
    for match in _SQL_LEXEME.finditer(text.lower()):
        lexeme = match.group()
        if lexeme.startswith(("--", "/*")):
            continue
        if lexeme == ";":
            statements.append([])
        else:
            statements[-1].append("'" if lexeme[0] in "'\"`[" else lexeme)
    return [tokens for tokens in statements if tokens]


def sql_problem(parts: list[str | None], script: bool) -> str | None:
    """What SQL handed to sqlite3 (None parts are runtime text) may do that agents may not.

    An in-memory database writes files only through ATTACH, VACUUM INTO and a few pragmas. Text
    spliced in at runtime is harmless only where it cannot start a statement: execute() runs one
    statement whose kind its first keyword fixes; executescript() runs any number.
    """
    text = "".join(SQL_HOLE if part is None else part for part in parts)
    if script and SQL_HOLE in text:
        return "is a script built at runtime, so any part of it could be another statement"
    for tokens in _sql_statements(text):
        while tokens[:1] == ["explain"] or tokens[:2] == ["query", "plan"]:
            tokens = tokens[2:] if tokens[0] == "query" else tokens[1:]
        head = tokens[0] if tokens else ""
        if head == "attach":
            return "attaches a database file"
        if head == "vacuum" and ("into" in tokens or SQL_HOLE in tokens):
            return "writes the database to a file (VACUUM INTO)"
        if head == "pragma":
            named = tokens[3:4] if tokens[2:3] == ["."] else tokens[1:2]  # [schema .] name
            if not named or named[0] == SQL_HOLE or named[0] in FILE_PRAGMAS:
                return "sets a pragma that chooses where SQLite writes files"
        elif SQL_HOLE in tokens and head not in SAFE_SQL_STATEMENTS:
            return "is a statement whose kind is only known at runtime"
    return None


def foreign_encoding(source: str) -> str | None:
    """A non-UTF-8 coding cookie in the first two lines, else None.

    Python decodes a file by its cookie, but this checker sees already-decoded text: under
    `# coding: utf-7`, a comment here (`+AAo-os.system(...)`) is a statement there.
    """
    for line in source.splitlines()[:2]:
        text = line.lstrip(" \t\f")
        if not text.startswith("#"):
            continue
        at = text.find("coding")
        while at != -1:
            if text[at + 6 : at + 7] in (":", "="):
                name = ""
                for char in text[at + 7 :].lstrip(" \t"):
                    if not (char.isalnum() or char in "-_."):
                        break
                    name += char
                if name.lower().replace("_", "-") not in UTF8_NAMES:
                    return name
            at = text.find("coding", at + 1)
    return None
