"""codeguard.py - the first wall: refuse unsafe or malformed agent source before it lands.

Why static: generated code is data until executor.py runs it, so everything here works on the
syntax tree alone - no I/O, no project imports, nothing executed - and every rule is testable
without an API key.

What it is not: a sandbox. Python is too dynamic for a checker to prove an escape impossible; the
OS-level confinement behind this wall is the boundary that holds. This wall makes every escape a
reviewer could name take deliberate work, and it reports all of its complaints at once, in line
order, so the generator can hand them back to the model and an honest mistake is fixed in one
retry.

How it judges, in order:
- run(task, previous_outputs) is a plain top-level def with two positional parameters, bound once.
- Imports are an allowlist: the standard library minus BLOCKED_STDLIB, plus ALLOWED_PACKAGES.
- Names are resolved through imports and simple assignments, flow-insensitively (any binding
  anywhere counts everywhere), so an alias (`import os as o`, `s = o.system`) is judged as the
  thing it names. Modules and argument-checked callables may not travel as values, which is what
  keeps that resolution honest.
- Dynamic code (eval, exec, computed getattr), dunder attributes and interpreter internals
  (frames, sys.modules) are refused wherever they appear, called or not.
- Processes, file writes and environment changes are refused by module-qualified rules (an
  allowlist of read-only os functions) and by attribute names that mean one thing on any object
  (write_text, unlink, create_subprocess_exec).
- Calls that are dangerous only with some arguments (open's mode, sqlite3.connect's database,
  tempfile's dir, Path.replace's one-argument shape) must pass literal, harmless ones.
"""

import ast
import sys

# ---- what agents may install and import ----------------------------------------------------------

ALLOWED_PACKAGES: dict[str, str] = {
    # HTTP client, pure Python. Reaches only the URLs it is given (no unix sockets without extras).
    "requests": "requests",
    # HTML parsing, pure Python on the stdlib html.parser (lxml is not installed, so not native).
    "beautifulsoup4": "bs4",
    # YAML. Its full/unsafe loaders construct arbitrary objects (!!python/object/apply runs any
    # callable), so only the safe_* and dump* surface is reachable (_MODULE_ALLOWLISTS).
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

_PROCESS = "starts or signals processes; agents may not start processes"
_FILES = "writes, moves or deletes files; agents may only read files"
_DYNAMIC = "runs code chosen at runtime, which no static check can see"
_INTERNALS = "reaches interpreter internals that can undo these checks"
_SYSTEM = "controls terminals, devices or system-wide state"
_NETWORK = "serves, opens local sockets or speaks non-HTTP protocols; agents are HTTP clients"
_ENVIRON = "changes the process environment; agents may only read it (os.environ.get)"
_TERMINAL = "waits for a person at a terminal; agents have none (stdin carries the task)"


def _group(reason: str, *modules: str) -> dict[str, str]:
    return dict.fromkeys(modules, reason)


_BLOCKED_REASONS: dict[str, str] = {
    # Processes. platform and pydoc shell out from ordinary functions (uname/file, the pager),
    # antigravity opens a browser on import, mailcap builds shell command lines, Tcl (tkinter,
    # turtle, idlelib) can exec programs, signal delivers kills and runs handlers at any point.
    **_group(
        _PROCESS,
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
        _DYNAMIC,
        "builtins", "importlib", "imp", "zipimport", "pkgutil", "runpy", "code", "codeop",
        "pickle", "marshal", "shelve", "doctest", "unittest", "timeit", "profile",
        "cProfile", "trace", "pdb", "bdb", "site", "modulefinder", "pyclbr", "logging.config",
    ),
    # Reflection that reaches any live object, frame or raw memory.
    **_group(_INTERNALS, "inspect", "gc", "ctypes", "faulthandler"),
    # File writers with no read-only use worth keeping: fileinput(inplace=True) rewrites files,
    # uu.decode writes the name found in its input, cgitb writes to logdir, tracemalloc and
    # pstats dump to paths, cookiejar saves, readline writes history, mmap maps fds writable.
    **_group(
        _FILES,
        "shutil", "fileinput", "mailbox", "http.cookiejar", "dbm", "py_compile", "compileall",
        "zipapp", "lib2to3", "uu", "cgitb", "tracemalloc", "pstats", "logging.handlers",
        "msilib", "readline", "mmap",
    ),
    # resource can lift the limits the executor set; the rest drive terminals and devices.
    **_group(
        _SYSTEM,
        "resource", "fcntl", "termios", "tty", "curses", "syslog", "winreg", "winsound",
        "msvcrt", "ossaudiodev", "spwd",
    ),
    # Raw sockets reach local daemons (docker.sock); imaplib.IMAP4_stream runs a command.
    **_group(
        _NETWORK,
        "socket", "socketserver", "http.server", "wsgiref", "xmlrpc.server", "smtplib", "smtpd",
        "ftplib", "poplib", "imaplib", "nntplib", "telnetlib", "asynchat", "asyncore",
    ),
    **_group(_TERMINAL, "getpass"),
}  # fmt: skip
# Kept on purpose: os and sys (read-only use is needed; their dangerous attributes are refused
# below), threading and asyncio (no process or server helpers reachable), tempfile (writes only
# inside TMPDIR, the agent's scratch directory, and `dir=` is refused), sqlite3 (":memory:" only),
# types (allowlisted attributes), ast (literal_eval is useful and nothing can compile a tree),
# weakref, dis, pickletools (read-only introspection), zipfile/tarfile/gzip (read modes only).

BLOCKED_STDLIB: frozenset[str] = frozenset(_BLOCKED_REASONS)
"""Standard-library modules agents may not import. Dotted entries block a submodule only."""

_BLOCKED_PACKAGE_MODULES: dict[str, str] = {
    "dateutil.zoneinfo.rebuild": _PROCESS,  # runs `zic` and writes tarballs
    "bs4.diagnose": _DYNAMIC,  # profiles parsers with cProfile.runctx on a code string
}

_PACKAGE_IMPORTS = frozenset(ALLOWED_PACKAGES.values())


def allowed_import_names() -> frozenset[str]:
    """Top-level module names an agent may import (for the generator's prompt)."""
    stdlib = {
        name
        for name in sys.stdlib_module_names
        if not name.startswith("_") and name not in BLOCKED_STDLIB
    }
    return frozenset(stdlib | _PACKAGE_IMPORTS | {"__future__"})


# ---- what agents may touch inside allowed modules ------------------------------------------------

_OS_READ_ONLY = frozenset(
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
_OS_PROCESS_PREFIXES = ("exec", "spawn", "posix_spawn", "fork", "kill", "wait", "set", "sched_set")
_OS_PROCESS = frozenset(
    {"system", "popen", "startfile", "abort", "nice", "plock", "register_at_fork"}
)
_OS_FILES = frozenset(
    {
        "remove", "unlink", "rmdir", "removedirs", "rename", "renames", "replace", "mkdir",
        "makedirs", "chmod", "fchmod", "lchmod", "chown", "fchown", "lchown", "chflags",
        "lchflags", "symlink", "link", "truncate", "ftruncate", "open", "fdopen", "write",
        "pwrite", "writev", "pwritev", "sendfile", "copy_file_range", "splice", "mkfifo",
        "mknod", "utime", "dup", "dup2", "setxattr", "removexattr", "memfd_create",
    }
)  # fmt: skip
_YAML_SAFE = frozenset(
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
_TYPES_SAFE = frozenset(
    {
        "SimpleNamespace", "MappingProxyType", "NoneType", "GenericAlias", "UnionType",
        "EllipsisType", "NotImplementedType", "GeneratorType",
    }
)  # fmt: skip
_MODULE_ALLOWLISTS: dict[str, tuple[frozenset[str], str]] = {
    # Checked longest prefix first, so os.environ.<x> is judged by the environ list.
    "os.environ": (frozenset({"get", "keys", "values", "items", "copy"}), _ENVIRON),
    "os": (_OS_READ_ONLY, "is not one of the read-only os functions agents may use"),
    "yaml": (_YAML_SAFE, "can construct arbitrary Python objects; use yaml.safe_load/safe_dump"),
    "types": (_TYPES_SAFE, "builds functions, code objects or classes at runtime"),
}
_QUALIFIED_BLOCKS: dict[str, str] = {
    "sys.modules": _INTERNALS,
    "sys.path": _INTERNALS,  # a changed path makes a later import run a file the agent wrote
    "sys.meta_path": _INTERNALS,
    "sys.path_hooks": _INTERNALS,
    "sys.path_importer_cache": _INTERNALS,
    "sys.settrace": _INTERNALS,
    "sys.setprofile": _INTERNALS,
    "sys.addaudithook": _INTERNALS,
    "sys.call_tracing": _INTERNALS,
    "sys.monitoring": _INTERNALS,
    "sys.remote_exec": _DYNAMIC,
    "sys.setdlopenflags": _INTERNALS,
    "sys.breakpointhook": _TERMINAL,
    "xml.etree.ElementTree.ElementTree.write": _FILES,
}
# Methods a class may not define, whatever it is named or derived from.
_FORBIDDEN_METHODS: dict[str, str] = {
    "__del__": "a finaliser runs at an unpredictable moment (collection, exit); it is the"
    " published smolagents escape - use a context manager instead",
    # string.Formatter walks attribute paths written in a format string ("{0.__init__.__globals__}")
    # and hands what it finds to these hooks. Judged by name: a base class can hide behind aliases.
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
_DETOUR_MODULES = frozenset(
    {name.split(".")[0] for name in BLOCKED_STDLIB}
    | {"os", "sys", "types", "yaml", "xml", "dateutil", "sqlite3", "tempfile", "io", "codecs"}
    | {"urllib", "bs4"}
)

_MAC_LOOKUP = "may shell out to ifconfig/ip to find a MAC address; use uuid.uuid4()"
_ANYWHERE: dict[str, str] = {
    # Attribute names that mean one dangerous thing on whatever object carries them.
    **_group(
        _PROCESS,
        "popen", "Popen", "fork", "forkpty", "posix_spawn", "posix_spawnp", "startfile",
        "create_subprocess_exec", "create_subprocess_shell", "subprocess_exec",
        "subprocess_shell", "ProcessPoolExecutor",
    ),
    **_group(_MAC_LOOKUP, "uuid1", "getnode"),
    **_group(
        _FILES,
        "write_text", "write_bytes", "unlink", "rmdir", "mkdir", "makedirs", "removedirs",
        "touch", "chmod", "lchmod", "fchmod", "chown", "lchown", "fchown", "symlink_to",
        "hardlink_to", "link_to", "symlink", "extractall", "makefile", "makedir", "makelink",
        "makefifo", "makedev", "mkfifo", "mknod", "utime", "urlretrieve", "URLopener",
        "FancyURLopener", "PyZipFile", "FileHandler", "WatchedFileHandler",
        "RotatingFileHandler", "TimedRotatingFileHandler", "write_history_file",
        "append_history_file", "dump_stats", "keylog_filename",
    ),
    # typing.get_type_hints and ForwardRef evaluate strings; Formatter.get_field walks attribute
    # paths written in a string; sqlite extensions are native code; the yaml names build objects.
    **_group(
        _DYNAMIC,
        "eval", "exec", "get_type_hints", "ForwardRef", "evaluate_forward_ref", "get_field",
        "import_module", "load_extension", "enable_load_extension", "unsafe_load",
        "unsafe_load_all", "full_load", "full_load_all", "UnsafeLoader", "FullLoader",
        "CLoader", "CUnsafeLoader", "CFullLoader", "UnsafeConstructor", "FullConstructor",
    ),
    # Frames and code objects lead to every namespace (f_globals["__builtins__"]).
    **_group(
        _INTERNALS,
        "tb_frame", "f_back", "f_builtins", "f_code", "f_globals", "f_locals", "f_trace",
        "f_lineno", "gi_frame", "gi_code", "cr_frame", "cr_code", "ag_frame", "ag_code",
        "settrace", "setprofile", "settrace_all_threads", "setprofile_all_threads",
    ),
    **_group(
        _NETWORK,
        "start_server", "start_unix_server", "open_unix_connection", "create_server",
        "create_unix_server", "create_unix_connection",
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
_OPENERS: dict[str, int] = {
    "open": 1, "FileIO": 1, "ZipFile": 1, "TarFile": 1, "GzipFile": 1, "BZ2File": 1,
    "LZMAFile": 1, "taropen": 1, "gzopen": 1, "bz2open": 1, "xzopen": 1, "FileType": 0,
}  # fmt: skip
# tempfile makers: how many positional arguments come before suffix/prefix/dir.
_TEMPFILE_MAKERS: dict[str, int] = {
    "NamedTemporaryFile": 4, "TemporaryFile": 4, "SpooledTemporaryFile": 5,
    "TemporaryDirectory": 0, "mkstemp": 0, "mkdtemp": 0,
}  # fmt: skip
_CALL_ONLY = frozenset(
    {*_OPENERS, *_TEMPFILE_MAKERS, "replace", "rename", "extract", "basicConfig"}
    | {"attrgetter", "methodcaller", "getattr", "setattr", "delattr", "hasattr"}
)
# Judged by qualified name only: sqlite3 cannot travel as a value, so `client.connect(url)` on
# some other object is never sqlite3's.
_SQLITE_CONNECTORS = frozenset(
    f"{module}.{name}"
    for module in ("sqlite3", "sqlite3.dbapi2")
    for name in ("connect", "Connection")
)
_TYPING_FACTORIES = frozenset(
    {"TypeVar", "NewType", "NamedTuple", "TypedDict", "make_dataclass", "ParamSpec"}
)

# Builtins refused wherever they appear, called or not.
_FORBIDDEN_BUILTINS: dict[str, str] = {
    **_group(_DYNAMIC, "eval", "exec", "compile", "__import__"),
    **_group("exposes a namespace dict, and __builtins__ with it", "globals", "locals", "vars"),
    **_group(_TERMINAL, "input", "breakpoint", "help"),
}
# Builtins agents may call with checked arguments. Every use of these names is judged as the
# builtin, whatever else they are bound to, so rebinding cannot hide one; rebinding is refused as
# well except for `type`, which agents often reuse as a variable and whose rule is harmless there.
_CHECKED_BUILTINS = frozenset({"getattr", "setattr", "delattr", "hasattr", "open", "type"})
_PROTECTED_NAMES = frozenset({*_FORBIDDEN_BUILTINS, *_CHECKED_BUILTINS - {"type"}, "__builtins__"})
_FORBIDDEN_DUNDER_NAMES = frozenset(
    {"__builtins__", "__loader__", "__spec__", "__build_class__", "__class__", "__annotations__"}
)
# Dunder attributes that are harmless: reading a name or docstring, and calling the ordinary
# data-model methods (super().__init__(...) is in every subclass).
_DUNDER_READS = frozenset({"__name__", "__qualname__", "__doc__", "__module__"})
_DUNDER_CALLS = frozenset(
    {
        "__init__", "__post_init__", "__repr__", "__str__", "__format__", "__eq__", "__ne__",
        "__lt__", "__le__", "__gt__", "__ge__", "__hash__", "__bool__", "__len__", "__iter__",
        "__next__", "__contains__", "__getitem__", "__setitem__", "__delitem__", "__enter__",
        "__exit__", "__missing__",
    }
)  # fmt: skip
_DUNDER_KEYS = frozenset({"__builtins__", "__import__", "__globals__", "__loader__", "__dict__"})
_NAMEDTUPLE_API = frozenset({"_asdict", "_replace", "_fields", "_make", "_field_defaults"})

# Names the trusted runtime header binds. generator.check_assembled checks the model's body on its
# own, so these must resolve as the header binds them even where the body never imports them.
_RUNTIME_NAMES: dict[str, str] = {
    "json": "json", "os": "os", "sys": "sys", "time": "time", "urllib": "urllib",
    "Path": "pathlib.Path",
}  # fmt: skip
_BUILTIN = "builtin."  # prefix of the qualified names given to unshadowed builtins

_PATH_CLASSES = frozenset(
    {"pathlib.Path", "pathlib.PosixPath", "pathlib.WindowsPath", "pathlib.PurePath"}
)
_PATH_METHODS = frozenset(
    {
        "joinpath", "resolve", "absolute", "expanduser", "with_name", "with_suffix", "with_stem",
        "with_segments", "relative_to", "readlink", "home", "cwd",
    }
)  # fmt: skip
_PATH_ITERATORS = frozenset({"iterdir", "glob", "rglob"})
_ETREE_MAKERS = frozenset({"xml.etree.ElementTree.parse", "xml.etree.ElementTree.ElementTree"})
# Modules with rules keyed on their qualified names (an allowlist, a blocked submodule, a blocked
# member), so they may not travel as values: a parameter holding one would escape resolution.
_POLICED_MODULES = frozenset(
    {
        "os", "sys", "types", "yaml", "xml", "xml.etree", "xml.etree.ElementTree", "sqlite3",
        "sqlite3.dbapi2", "dateutil", "dateutil.zoneinfo", "bs4", "asyncio", "concurrent",
        "concurrent.futures", "logging", "http", "xmlrpc", "urllib", "urllib.request",
    }
)  # fmt: skip
_ENVIRON_COPIERS = frozenset({"dict", "len", "sorted", "list", "set", "tuple", "str", "repr"})
_MAX_QUALNAME_PARTS = 8
_MAX_MEANINGS = 32
_UTF8_NAMES = frozenset({"utf-8", "utf8", "utf-8-sig", "ascii", "us-ascii"})
# SQL that makes an in-memory sqlite3 database write a file.
_SQL_FILE_WRITERS = ("attach database", "attach '", 'attach "', "vacuum into")


# ---- public entry point --------------------------------------------------------------------------


def check_agent_source(source: str) -> list[str]:
    """Every reason to refuse `source`, as "line N: ..." strings in line order; [] accepts it."""
    if not isinstance(source, str):
        return [f"line 1: expected source text (str), got {type(source).__name__}"]
    try:
        tree = ast.parse(source)
    except SyntaxError as error:
        return [f"line {error.lineno or 1}: syntax error: {error.msg}"]
    except (ValueError, RecursionError, MemoryError) as error:
        return [f"line 1: the source cannot be parsed ({type(error).__name__}); simplify it"]
    complaints = _Complaints()
    cookie = _foreign_encoding(source)
    if cookie:
        complaints.add(
            1,
            0,
            f"declares source encoding {cookie!r}; the file is run as UTF-8 and checked as such",
        )
    try:
        _check_run(tree, complaints)
        _Guard(_Facts(tree), complaints).visit(tree)
    except RecursionError:
        complaints.add(1, 0, "the source nests too deeply to check; flatten the expression")
    return complaints.lines()


def _foreign_encoding(source: str) -> str | None:
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
                if name.lower().replace("_", "-") not in _UTF8_NAMES:
                    return name
            at = text.find("coding", at + 1)
    return None


class _Complaints:
    """Collected complaints: de-duplicated, reported in line order."""

    def __init__(self) -> None:
        self._seen: dict[str, tuple[int, int]] = {}

    def add(self, line: int, col: int, message: str) -> None:
        self._seen.setdefault(f"line {line}: {message}", (line, col))

    def lines(self) -> list[str]:
        return sorted(self._seen, key=lambda text: self._seen[text])


# ---- run() ---------------------------------------------------------------------------------------


def _check_run(tree: ast.Module, complaints: _Complaints) -> None:
    """run must be one plain top-level def taking (task, previous_outputs), never rebound."""
    defs = [
        node
        for node in tree.body
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == "run"
    ]
    entry = defs[0] if defs else None
    if entry is None:
        complaints.add(1, 0, "no top-level `def run(task, previous_outputs):` was found")
    else:
        where = (entry.lineno, entry.col_offset)
        if isinstance(entry, ast.AsyncFunctionDef):
            complaints.add(*where, "run is async; write a plain `def run(task, previous_outputs):`")
        args = entry.args
        positional = [*args.posonlyargs, *args.args]
        if len(positional) != 2 or args.vararg or args.kwarg or args.kwonlyargs:
            complaints.add(
                *where,
                "run must take exactly two positional parameters, run(task, previous_outputs);"
                f" found run({ast.unparse(args)})",
            )
        if entry.decorator_list:
            complaints.add(*where, "run is decorated; it must be a plain function")
    for node in _module_scope_bindings(tree, "run"):
        if node is not entry:
            complaints.add(
                getattr(node, "lineno", 1),
                getattr(node, "col_offset", 0),
                "binds the name run; only the one top-level `def run` may (the footer calls it)",
            )


def _module_scope_bindings(tree: ast.Module, name: str) -> list[ast.AST]:
    """Nodes that bind `name` in module scope (function, lambda and class bodies excluded)."""
    found: list[ast.AST] = []
    stack: list[ast.AST] = list(tree.body)
    while stack:
        node = stack.pop()
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            if node.name == name:
                found.append(node)
            stack.extend(node.decorator_list)
            if isinstance(node, ast.ClassDef):
                stack.extend([*node.bases, *node.keywords])
            else:
                stack.extend(d for d in [*node.args.defaults, *node.args.kw_defaults] if d)
            continue
        if isinstance(node, ast.Lambda):
            stack.extend(d for d in [*node.args.defaults, *node.args.kw_defaults] if d)
            continue
        if isinstance(node, ast.comprehension):
            stack.extend([node.iter, *node.ifs])
            continue
        if _bound_name(node) == name:
            found.append(node)
        stack.extend(child for child in ast.iter_child_nodes(node) if child is not None)
    return found


def _bound_name(node: ast.AST) -> str | None:
    """The name a node binds in its scope, if it binds one."""
    if isinstance(node, ast.Name):
        return None if isinstance(node.ctx, ast.Load) else node.id
    if isinstance(node, ast.alias):
        return node.asname or node.name.split(".")[0]
    if isinstance(node, ast.arg):
        return node.arg
    if isinstance(node, ast.MatchMapping):
        return node.rest
    if isinstance(node, ast.ExceptHandler | ast.MatchAs | ast.MatchStar):
        return node.name
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return node.name
    return None


# ---- facts about the whole module (computed before judging) --------------------------------------


class _Facts:
    """What names can refer to, flow-insensitively: any binding anywhere counts everywhere.

    Each fact is a fixpoint over all bindings, so `a = os; b = a; a = b` resolves however the
    assignments are ordered.
    """

    def __init__(self, tree: ast.Module) -> None:
        self.parents: dict[ast.AST, ast.AST] = {}
        self._imports: dict[str, set[str]] = {}
        self._values: dict[str, list[ast.expr]] = {}
        self._annotations: dict[str, list[ast.expr]] = {}
        self._iterations: dict[str, list[ast.expr]] = {}
        self._bound: set[str] = set()
        # Names bound to so many qualified names that resolving them could not finish quickly.
        self.overloaded: dict[str, ast.expr] = {}
        self.class_names: dict[ast.ClassDef, frozenset[str]] = {}
        classes: dict[str, list[ast.ClassDef]] = {}
        for node in ast.walk(tree):
            for child in ast.iter_child_nodes(node):
                self.parents[child] = node
            self._collect(node)
            if isinstance(node, ast.ClassDef):
                classes.setdefault(node.name, []).append(node)
        self._path_names: set[str] = set()
        self._etree_names: set[str] = set()
        self._solve()
        self._solve_class_names(classes)

    # -- collection

    def _collect(self, node: ast.AST) -> None:
        bound = _bound_name(node)
        if bound:
            self._bound.add(bound)
        if isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                target = alias.name if alias.asname else parts[0]
                self._imports.setdefault(alias.asname or parts[0], set()).add(target)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                self._imports.setdefault(alias.asname or alias.name, set()).add(
                    f"{node.module}.{alias.name}"
                )
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                self._assign(target, node.value)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            self._annotations.setdefault(node.target.id, []).append(node.annotation)
            if node.value is not None:
                self._assign(node.target, node.value)
        elif isinstance(node, ast.NamedExpr):
            self._assign(node.target, node.value)
        elif isinstance(node, ast.For | ast.AsyncFor | ast.comprehension):
            if isinstance(node.target, ast.Name):
                self._iterations.setdefault(node.target.id, []).append(node.iter)
        elif isinstance(node, ast.arg) and node.annotation is not None:
            self._annotations.setdefault(node.arg, []).append(node.annotation)

    def _assign(self, target: ast.expr, value: ast.expr) -> None:
        if isinstance(target, ast.Name):
            self._values.setdefault(target.id, []).append(value)

    # -- fixpoints

    def _solve(self) -> None:
        self._names: dict[str, set[str]] = {n: set(found) for n, found in self._imports.items()}
        changed = True
        while changed:
            changed = False
            for name, values in self._values.items():
                known = self._names.setdefault(name, set())
                for value in values:
                    fresh = {q for q in self.qnames(value) if q.count(".") < _MAX_QUALNAME_PARTS}
                    if not fresh <= known and len(known) < _MAX_MEANINGS:
                        known |= fresh
                        changed = True
                if len(known) >= _MAX_MEANINGS:
                    self.overloaded[name] = values[0]
        candidates = set(self._values) | set(self._annotations) | set(self._iterations)
        for names, test in (
            (self._path_names, self._path_binding),
            (self._etree_names, self._etree_binding),
        ):
            changed = True
            while changed:  # a binding may depend on names found so far (b = a / "x")
                fresh = {name for name in candidates - names if test(name)}
                names |= fresh
                changed = bool(fresh)

    def _path_binding(self, name: str) -> bool:
        if any(self.is_path(value) for value in self._values.get(name, [])):
            return True
        if any(self.qnames(ann) & _PATH_CLASSES for ann in self._annotations.get(name, [])):
            return True
        for iterated in self._iterations.get(name, []):
            func = iterated.func if isinstance(iterated, ast.Call) else None
            if (
                isinstance(func, ast.Attribute)
                and func.attr in _PATH_ITERATORS
                and self.is_path(func.value)
            ):
                return True
        return False

    def _etree_binding(self, name: str) -> bool:
        return any(self.is_etree(value) for value in self._values.get(name, []))

    def _solve_class_names(self, classes: dict[str, list[ast.ClassDef]]) -> None:
        """Names each class defines itself (methods, class attributes, self.x = ...), inherited
        along agent-defined bases: `self._x` and `self.extract()` are the agent's own code there."""
        own: dict[ast.ClassDef, set[str]] = {}
        for defs in classes.values():
            for cls in defs:
                own[cls] = names = set()
                for stmt in cls.body:
                    if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef):
                        names.add(stmt.name)
                        names.update(_self_stores(stmt))
                    elif isinstance(stmt, ast.Assign | ast.AnnAssign):
                        targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
                        names.update(t.id for t in targets if isinstance(t, ast.Name))
        for cls in own:
            collected: set[str] = set()
            pending, seen = [cls], set()
            while pending:
                current = pending.pop()
                if current in seen:
                    continue
                seen.add(current)
                collected |= own[current]
                for base in current.bases:
                    if isinstance(base, ast.Name):
                        pending.extend(classes.get(base.id, []))
            self.class_names[cls] = frozenset(collected)

    # -- queries

    def resolve(self, name: str) -> frozenset[str]:
        """The qualified names `name` may refer to: imports, aliases, the runtime's names, and
        protected builtins. An unbound module name counts as that module (a NameError at best).
        """
        found = set(self._names.get(name, ()))
        if name in _RUNTIME_NAMES:
            found.add(_RUNTIME_NAMES[name])
        if name in _FORBIDDEN_BUILTINS or name in _CHECKED_BUILTINS:
            found.add(_BUILTIN + name)  # even where rebound (see _CHECKED_BUILTINS)
        elif name not in self._bound and (
            name in sys.stdlib_module_names or name in _PACKAGE_IMPORTS
        ):
            found.add(name)
        return frozenset(found)

    def qnames(self, node: ast.AST) -> frozenset[str]:
        """Qualified names an expression may evaluate to: `o.system` -> {"os.system"}."""
        node = _unwrap(node)
        if isinstance(node, ast.Name):
            return self.resolve(node.id)
        if isinstance(node, ast.Attribute):
            return frozenset(f"{q}.{node.attr}" for q in self.qnames(node.value))
        literal = self.literal_getattr(node)
        if literal is not None:
            return frozenset(f"{q}.{literal[1]}" for q in self.qnames(literal[0]))
        return frozenset()

    def literal_getattr(self, node: ast.AST) -> tuple[ast.expr, str] | None:
        """(receiver, name) for `getattr(receiver, "name"[, default])`, else None."""
        if not (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and _BUILTIN + "getattr" in self.resolve(node.func.id)
            and len(node.args) in (2, 3)
            and not node.keywords
            and not any(isinstance(arg, ast.Starred) for arg in node.args)
        ):
            return None
        name = _string(node.args[1])
        return None if name is None else (node.args[0], name)

    def is_path(self, node: ast.AST) -> bool:
        """Whether an expression is (probably) a pathlib.Path, or the Path class itself."""
        node = _unwrap(node)
        if isinstance(node, ast.Name):
            return node.id in self._path_names or bool(self.resolve(node.id) & _PATH_CLASSES)
        if isinstance(node, ast.Call):
            func = node.func
            if self.qnames(func) & _PATH_CLASSES:
                return True
            return (
                isinstance(func, ast.Attribute)
                and func.attr in _PATH_METHODS
                and self.is_path(func.value)
            )
        if isinstance(node, ast.Attribute):
            if self.qnames(node) & _PATH_CLASSES:
                return True
            return node.attr == "parent" and self.is_path(node.value)
        if isinstance(node, ast.Subscript):
            value = node.value
            return (
                isinstance(value, ast.Attribute)
                and value.attr == "parents"
                and self.is_path(value.value)
            )
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
            return self.is_path(node.left) or self.is_path(node.right)
        if isinstance(node, ast.IfExp):
            return self.is_path(node.body) or self.is_path(node.orelse)
        return False

    def is_etree(self, node: ast.AST) -> bool:
        """Whether an expression is an xml.etree ElementTree (whose .write takes a path)."""
        node = _unwrap(node)
        if isinstance(node, ast.Name):
            return node.id in self._etree_names
        return isinstance(node, ast.Call) and bool(self.qnames(node.func) & _ETREE_MAKERS)


def _self_stores(method: ast.FunctionDef | ast.AsyncFunctionDef) -> set[str]:
    """Attribute names a method assigns on its first parameter (self._x = ...)."""
    params = [*method.args.posonlyargs, *method.args.args]
    if not params:
        return set()
    me = params[0].arg
    return {
        node.attr
        for node in ast.walk(method)
        if isinstance(node, ast.Attribute)
        and isinstance(node.ctx, ast.Store)
        and isinstance(node.value, ast.Name)
        and node.value.id == me
    }


def _unwrap(node: ast.AST) -> ast.AST:
    """The value of a walrus, which is what `(o := os).system` really calls on."""
    while isinstance(node, ast.NamedExpr):
        node = node.value
    return node


def _string(node: ast.AST) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    return None


def _is_dunder(name: str) -> bool:
    return len(name) > 4 and name.startswith("__") and name.endswith("__")


def _mode_head(mode: str) -> str:
    """The open-mode part of a mode string ("w:gz" -> "w", "r|*" -> "r")."""
    return mode.split(":")[0].split("|")[0]


def _looks_like_mode(text: str) -> bool:
    head = _mode_head(text)
    return 0 < len(head) <= 3 and set(head) <= set("rwxabtU+")


def _writes(mode: str) -> bool:
    return bool(set(_mode_head(mode)) & set("wxa+"))


def _has_splat(call: ast.Call) -> bool:
    return any(isinstance(a, ast.Starred) for a in call.args) or any(
        k.arg is None for k in call.keywords
    )


def _keyword(call: ast.Call, name: str) -> ast.expr | None:
    return next((k.value for k in call.keywords if k.arg == name), None)


# ---- the judge -----------------------------------------------------------------------------------


class _Guard(ast.NodeVisitor):
    """Walks the tree once and reports every rule an expression or statement breaks."""

    def __init__(self, facts: _Facts, complaints: _Complaints) -> None:
        self.facts = facts
        self.complaints = complaints
        # Expressions already explained by a complaint about the chain they belong to.
        self._covered: set[ast.AST] = set()
        # (names the enclosing class defines itself, its methods' self parameter), or None.
        self._method: list[tuple[frozenset[str], str] | None] = [None]
        self._note = ""  # appended to complaints found inside a string typing evaluates
        for name, value in facts.overloaded.items():
            self.report(value, f"{name} is bound to too many different things to check; simplify")

    # -- reporting

    def report(self, node: ast.AST, message: str) -> None:
        self.complaints.add(
            getattr(node, "lineno", 1), getattr(node, "col_offset", 0), message + self._note
        )
        self._cover(node)

    def _cover(self, node: ast.AST) -> None:
        """Mark the rest of a reported chain (o.a.b, f().x, x[0].y) so it is not re-reported."""
        while isinstance(node, ast.Attribute | ast.Subscript | ast.Call | ast.Name):
            self._covered.add(node)
            if isinstance(node, ast.Call):
                literal = self.facts.literal_getattr(node)
                node = literal[0] if literal else node.func
            elif isinstance(node, ast.Name):
                return
            else:
                node = node.value

    def _position(self, node: ast.AST) -> str:
        """How an expression is used: call, receiver, alias, subscripted or (passed as a) value."""
        parent = self.facts.parents.get(node)
        if isinstance(parent, ast.NamedExpr) and parent.value is node:
            # The walrus binds an alias and also passes the value on: judge where it goes.
            return self._position(parent)
        if isinstance(parent, ast.Attribute) and parent.value is node:
            return "receiver"
        if isinstance(parent, ast.Call):
            if parent.func is node:
                return "call"
            literal = self.facts.literal_getattr(parent)
            if literal is not None and literal[0] is node:
                return "receiver"
            if (
                isinstance(parent.func, ast.Name)
                and self.facts.resolve(parent.func.id)
                & {_BUILTIN + "hasattr", _BUILTIN + "setattr", _BUILTIN + "delattr"}
                and parent.args
                and parent.args[0] is node
            ):
                return "receiver"
        # A class attribute is reached as C.name or self.name, which resolution cannot follow.
        in_class = isinstance(self.facts.parents.get(parent), ast.ClassDef)
        if isinstance(parent, ast.Assign | ast.AnnAssign) and parent.value is node and not in_class:
            targets = parent.targets if isinstance(parent, ast.Assign) else [parent.target]
            return "alias" if all(isinstance(t, ast.Name) for t in targets) else "value"
        if isinstance(parent, ast.Subscript) and parent.value is node:
            return "subscripted"
        return "value"

    @staticmethod
    def _show(node: ast.AST, position: str = "value") -> str:
        text = ast.unparse(node)
        if len(text) > 60:
            text = text[:57] + "..."
        return text + "()" if position == "call" else text

    def _show_as(self, node: ast.AST, qname: str, position: str) -> str:
        shown = self._show(node, position)
        plain = shown.removesuffix("()")
        if qname.startswith(_BUILTIN) or plain == qname:
            return shown
        return f"{shown} (that is {qname})"

    # -- imports

    def _class_body_import(self, node: ast.Import | ast.ImportFrom) -> bool:
        if isinstance(self.facts.parents.get(node), ast.ClassDef):
            self.report(node, "imports in a class body become class attributes; import at the top")
            return True
        return False

    def visit_Import(self, node: ast.Import) -> None:
        if self._class_body_import(node):
            return
        for alias in node.names:
            self._check_import(alias.name, node, f"import {alias.name}")
            self.visit(alias)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if self._class_body_import(node):
            return
        if node.level or not node.module:
            self.report(node, "relative imports are refused; agents are single files")
            return
        if self._check_import(node.module, node, f"from {node.module} import ..."):
            return
        for alias in node.names:
            shown = f"from {node.module} import {alias.name}"
            if alias.name == "*":
                self.report(node, f"{shown}: star imports hide what is used; name each import")
                continue
            qname = f"{node.module}.{alias.name}"
            if self._check_qualified(qname, node, shown):
                continue
            if alias.name in _ANYWHERE:
                self.report(node, f"{shown}: {alias.name} {_ANYWHERE[alias.name]}")
            else:
                self.visit(alias)

    def _check_import(self, dotted: str, node: ast.AST, shown: str) -> bool:
        """Report an import of a module outside the allowlist; True if one was reported."""
        top = dotted.split(".")[0]
        if top == "__future__":
            return False
        if top in _PACKAGE_IMPORTS or (top in sys.stdlib_module_names and not top.startswith("_")):
            return self._check_qualified(dotted, node, shown)
        if top in sys.stdlib_module_names:
            self.report(node, f"{shown}: {top} is a private implementation module")
        else:
            packages = ", ".join(sorted(_PACKAGE_IMPORTS))
            self.report(
                node,
                f"{shown}: {top} is not an allowed module; use the standard library"
                f" or one of the allowed packages ({packages})",
            )
        return True

    # -- qualified names: the rules that know which module a name belongs to

    def _check_qualified(self, qname: str, node: ast.AST, shown: str) -> bool:
        """Apply every module-aware rule to one qualified name; True if one was reported."""
        if qname.startswith(_BUILTIN):
            return False
        parts = qname.split(".")
        for i in range(1, len(parts) + 1):
            prefix = ".".join(parts[:i])
            reason = _BLOCKED_REASONS.get(prefix) or _BLOCKED_PACKAGE_MODULES.get(prefix)
            if reason is not None:
                self.report(node, f"{shown}: {prefix} {reason}")
                return True
        for i, part in enumerate(parts[1:], start=1):
            if part.startswith("_") and not _is_dunder(part):
                owner = ".".join(parts[:i])
                self.report(node, f"{shown}: {part} is private to {owner}; {_INTERNALS}")
                return True
            if part in _DETOUR_MODULES:
                owner = ".".join(parts[:i])
                self.report(
                    node, f"{shown} reaches module {part} through {owner}; import {part} directly"
                )
                return True
        for prefix in sorted(_MODULE_ALLOWLISTS, key=len, reverse=True):
            allowed, reason = _MODULE_ALLOWLISTS[prefix]
            depth = prefix.count(".") + 1
            if qname.startswith(prefix + ".") and parts[depth] not in allowed:
                if prefix == "os":
                    reason = _os_reason(parts[depth])
                self.report(node, f"{shown} {reason}")
                return True
        for i in range(2, len(parts) + 1):
            prefix = ".".join(parts[:i])
            if prefix in _QUALIFIED_BLOCKS:
                self.report(node, f"{shown} {_QUALIFIED_BLOCKS[prefix]}")
                return True
        return False

    # -- names

    def visit(self, node: ast.AST) -> None:
        bound = _bound_name(node)
        if bound in _PROTECTED_NAMES:
            self.report(node, f"binds the name {bound}, shadowing the builtin; pick another name")
        super().visit(node)

    def visit_Name(self, node: ast.Name) -> None:
        if not isinstance(node.ctx, ast.Load):
            return
        position = self._position(node)
        # Forbidden names are reported even inside a chain already complained about:
        # `globals()["__builtins__"]` is two mistakes, and the model should hear of both.
        if node.id in _FORBIDDEN_DUNDER_NAMES:
            self.report(node, f"{node.id} {_INTERNALS}")
            return
        if _BUILTIN + node.id in self.facts.resolve(node.id) and node.id in _FORBIDDEN_BUILTINS:
            self.report(node, f"{self._show(node, position)} {_FORBIDDEN_BUILTINS[node.id]}")
            return
        if node in self._covered:
            return
        for qname in sorted(self.facts.resolve(node.id)):
            if self._judge_reference(node, qname, position):
                return
        if self.facts.is_etree(node) and position not in ("receiver", "alias"):
            self.report(
                node, f"{node.id} is an ElementTree (its .write takes a path); keep it local"
            )

    def _judge_reference(self, node: ast.expr, qname: str, position: str) -> bool:
        """Rules for a Name or Attribute that resolves to `qname`; True if one was reported."""
        if self._check_qualified(qname, node, self._show_as(node, qname, position)):
            return True
        last = qname.rsplit(".", 1)[-1]
        callable_only = last in _CALL_ONLY or qname in _SQLITE_CONNECTORS
        if callable_only and position not in ("call", "receiver"):
            self.report(
                node,
                f"{self._show(node)} is used without being called; call it directly so"
                " its arguments can be checked",
            )
            return True
        if qname == "os.environ" and self._judge_environ(node, position):
            return True
        if qname in _POLICED_MODULES and position not in ("receiver", "alias"):
            self.report(
                node,
                f"module {qname} is used as a value; use its attributes directly"
                f" ({qname}.name) so what it calls can be checked",
            )
            return True
        return False

    def _judge_environ(self, node: ast.expr, position: str) -> bool:
        """os.environ may be read, copied and iterated, never handed to code that writes it."""
        parent = self.facts.parents.get(node)
        if position in ("receiver", "alias"):
            return False
        if position == "subscripted":
            if isinstance(parent, ast.Subscript) and isinstance(parent.ctx, ast.Load):
                return False
            self.report(node, f"{self._show(parent or node)} {_ENVIRON}")
            return True
        if isinstance(parent, ast.Compare) and node in parent.comparators:
            return False
        if isinstance(parent, ast.For | ast.comprehension) and parent.iter is node:
            return False
        if isinstance(parent, ast.Dict) and any(  # {**os.environ, ...} is a copy
            key is None and value is node
            for key, value in zip(parent.keys, parent.values, strict=True)
        ):
            return False
        if (
            isinstance(parent, ast.Call)
            and isinstance(parent.func, ast.Name)
            and parent.func.id in _ENVIRON_COPIERS
        ):
            return False
        self.report(
            node, "os.environ is passed on as a value; pass dict(os.environ) so it stays read-only"
        )
        return True

    # -- attributes

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if node not in self._covered:
            self._judge_attribute(node, self._position(node))
        self.generic_visit(node)

    def _judge_attribute(self, node: ast.Attribute, position: str) -> None:
        attr = node.attr
        shown = self._show(node, position)
        if not isinstance(node.ctx, ast.Load) and self.facts.qnames(node.value):
            self.report(
                node, f"{shown}: assigning or deleting a module's attribute changes it for all code"
            )
            return
        for qname in sorted(self.facts.qnames(node)):
            if self._judge_reference(node, qname, position):
                return
        if _is_dunder(attr):
            harmless = (attr in _DUNDER_READS and isinstance(node.ctx, ast.Load)) or (
                attr in _DUNDER_CALLS and position == "call"
            )
            if not harmless:
                self.report(node, f"{shown}: dunder attribute {attr} {_INTERNALS}")
            return
        if attr.startswith("_") and attr not in _NAMEDTUPLE_API and not self._own(node.value, attr):
            self.report(node, f"{shown}: {attr} is private to another object; {_INTERNALS}")
            return
        if attr in _ANYWHERE:
            self.report(node, f"{shown}: {attr} {_ANYWHERE[attr]}")
            return
        if attr.startswith("co_"):
            self.report(node, f"{shown}: code-object attribute {attr} {_INTERNALS}")
            return
        if attr in _CALL_ONLY and position != "call":
            self.report(
                node,
                f"{shown} is used without being called; call it directly so its arguments"
                " can be checked",
            )
            return

    def _own(self, receiver: ast.expr, attr: str) -> bool:
        """Whether receiver.attr is self.<name> inside a class that defines that name itself."""
        method = self._method[-1]
        return (
            method is not None
            and isinstance(receiver, ast.Name)
            and receiver.id == method[1]
            and attr in method[0]
        )

    # -- calls

    def visit_Call(self, node: ast.Call) -> None:
        self.visit(node.func)
        if node not in self._covered and node.func not in self._covered:
            self._judge_call(node)
        for arg in node.args:
            self.visit(arg)
        for keyword in node.keywords:
            self.visit(keyword)

    def _judge_call(self, node: ast.Call) -> None:
        position = self._position(node)
        builtin = {
            q.removeprefix(_BUILTIN)
            for q in (self.facts.resolve(node.func.id) if isinstance(node.func, ast.Name) else ())
            if q.startswith(_BUILTIN)
        }
        literal = self.facts.literal_getattr(node)
        reflection = builtin & {"getattr", "setattr", "delattr", "hasattr"}
        if literal is not None:
            synthetic = ast.Attribute(value=literal[0], attr=literal[1], ctx=ast.Load())
            ast.copy_location(synthetic, node)
            self.facts.parents[synthetic] = self.facts.parents.get(node, node)
            self._judge_attribute(synthetic, position)
        elif reflection:
            self._judge_reflection(node, reflection.pop())
        if "type" in builtin and (len(node.args) != 1 or node.keywords or _has_splat(node)):
            self.report(node, "type() with three arguments builds a class at runtime; use class")
            return
        if node not in self._covered:
            self._judge_call_shape(node)
        if (
            node not in self._covered
            and self.facts.is_etree(node)
            and position not in ("receiver", "alias")
        ):
            self.report(
                node,
                f"{self._show(node)} returns an ElementTree (its .write takes a path);"
                " call .getroot() on it right away",
            )

    def _judge_reflection(self, node: ast.Call, name: str) -> None:
        arity = {"getattr": (2, 3), "setattr": (3,), "delattr": (2,), "hasattr": (2,)}[name]
        attr = _string(node.args[1]) if len(node.args) > 1 else None
        if attr is None or len(node.args) not in arity or node.keywords or _has_splat(node):
            self.report(
                node, f"{name}() with a computed attribute name can reach anything; write obj.attr"
            )
            return
        if _is_dunder(attr):
            self.report(node, f"{name}(..., {attr!r}): {attr} {_INTERNALS}")
            return
        if name == "hasattr":  # only answers yes or no
            return
        ctx: ast.expr_context = ast.Store() if name == "setattr" else ast.Del()
        synthetic = ast.Attribute(value=node.args[0], attr=attr, ctx=ctx)
        ast.copy_location(synthetic, node)
        self.facts.parents[synthetic] = node
        self._judge_attribute(synthetic, "value")

    def _callee(self, node: ast.Call) -> tuple[set[str], str]:
        """The names a call may invoke and what kind of receiver it has.

        A bare name counts only through what it resolves to: the agent's own `def extract()`
        is not zipfile's. Likewise `self.extract()` in a class that defines extract.
        """
        func = node.func
        literal = self.facts.literal_getattr(func) if isinstance(func, ast.Call) else None
        if isinstance(func, ast.Attribute) or literal is not None:
            receiver, name = (func.value, func.attr) if literal is None else literal
            if self._own(receiver, name):
                return set(), "own"
            if self.facts.is_path(receiver):
                return {name}, "path-class" if self.facts.qnames(receiver) else "path"
            if self.facts.qnames(receiver):
                return {name}, "static"
            return {name}, "etree" if self.facts.is_etree(receiver) else "instance"
        if isinstance(func, ast.Name):
            return {q.rsplit(".", 1)[-1] for q in self.facts.resolve(func.id)}, "static"
        return set(), "instance"

    def _judge_call_shape(self, node: ast.Call) -> None:
        """Rules for calls that are only dangerous with some arguments."""
        names, kind = self._callee(node)
        shown = self._show(node.func, "call")
        for name in sorted(names):
            problem = self._shape_problem(node, name, kind)
            if problem:
                self.report(node, f"{shown} {problem}")
                return
        if names & _TYPING_FACTORIES:
            for arg in [*node.args[1:], *(k.value for k in node.keywords)]:
                for inner in ast.walk(arg):
                    self._check_forward_ref(inner)

    def _shape_problem(self, node: ast.Call, name: str, kind: str) -> str | None:
        if name in _OPENERS:
            return self._mode_problem(node, name, kind)
        if name in _TEMPFILE_MAKERS:
            return self._tempfile_problem(node, _TEMPFILE_MAKERS[name])
        if name in ("connect", "Connection") and self.facts.qnames(node.func) & _SQLITE_CONNECTORS:
            return self._database_problem(node)
        if name in ("replace", "rename"):
            if kind in ("path", "path-class"):
                return f"moves a file ({_FILES})"
            single = len(node.args) == 1 and not node.keywords
            if _has_splat(node) or single or _keyword(node, "target") is not None:
                return (
                    f"has the shape of Path.{name}(target), which moves a file; str.replace"
                    " takes two arguments"
                )
        if name == "extract" and (node.args or node.keywords):
            return f"extracts an archive member to disk; {_FILES}"
        if name == "basicConfig" and (
            _has_splat(node) or {k.arg for k in node.keywords} & {"filename", "filemode"}
        ):
            return f"logs to a file; {_FILES}"
        if name in ("attrgetter", "methodcaller"):
            return self._getter_problem(node, name)
        if name == "write" and kind == "etree":
            return f"writes the tree to a path; {_FILES}"
        return None

    def _mode_problem(self, node: ast.Call, name: str, kind: str) -> str | None:
        if _has_splat(node):
            return "passes * or ** arguments, so its mode cannot be checked"
        if _keyword(node, "opener") is not None:
            return "passes an opener, which can open the file any way it likes"
        candidates = [value for value in [_keyword(node, "mode")] if value is not None]
        index = _OPENERS[name]
        if kind == "path":
            index = 0
        if kind == "instance" and name == "open":
            # zf.open(name[, mode]) or path.open([mode]): the receiver's type is unknown.
            first = node.args[0] if node.args else None
            second = node.args[1] if len(node.args) > 1 else None
            if second is not None and not (
                isinstance(second, ast.Constant) and isinstance(second.value, int)
            ):
                candidates.append(second)
            if first is not None and _string(first) is not None and _looks_like_mode(first.value):
                candidates.append(first)
            elif first is not None and _string(first) is None and not candidates:
                return "opens something whose mode cannot be told from a name; pass a literal mode"
        elif len(node.args) > index:
            candidates.append(node.args[index])
        for value in candidates:
            mode = _string(value)
            if mode is None:
                return "opens with a mode that is not a literal string"
            if _writes(mode):
                return f"opens with mode {mode!r}; {_FILES}"
        return None

    @staticmethod
    def _tempfile_problem(node: ast.Call, positional: int) -> str | None:
        if _has_splat(node):
            return "passes * or ** arguments, so where it writes cannot be checked"
        if len(node.args) > positional:
            return "passes suffix/prefix/dir positionally; use keywords (never dir=)"
        if _keyword(node, "dir") is not None:
            return "passes dir=, which writes outside the agent's scratch directory"
        for key in ("prefix", "suffix"):
            value = _keyword(node, key)
            if value is None or (isinstance(value, ast.Constant) and value.value is None):
                continue
            text = _string(value)
            if text is None or "/" in text or "\\" in text or ".." in text:
                return f"passes a {key} that could leave the scratch directory; use a plain literal"
        return None

    @staticmethod
    def _database_problem(node: ast.Call) -> str | None:
        if _has_splat(node):
            return "passes * or ** arguments, so the database cannot be checked"
        database = _keyword(node, "database") or (node.args[0] if node.args else None)
        if database is None or _string(database) == ":memory:":
            return None
        return "opens a database file; agents may only use sqlite3.connect(':memory:')"

    @staticmethod
    def _getter_problem(node: ast.Call, name: str) -> str | None:
        names = node.args if name == "attrgetter" else node.args[:1]
        if not names or (node.keywords and name == "attrgetter") or _has_splat(node):
            return "needs literal attribute names"
        for arg in names:
            text = _string(arg)
            if text is None:
                return "with a computed attribute name can reach anything"
            for part in text.split("."):
                if part.startswith("_") or part in _ANYWHERE or part in _CALL_ONLY:
                    return f"reaches {part!r} by string, which these checks refuse as an attribute"
                if part in _DETOUR_MODULES or part in _OS_FILES or part in _OS_PROCESS:
                    return f"reaches {part!r} by string, which these checks refuse as an attribute"
        return None

    # -- statements and the rest

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        parent = self.facts.parents.get(node)
        if isinstance(parent, ast.ClassDef):
            if node.name in _FORBIDDEN_METHODS:
                self.report(node, f"def {node.name}: {_FORBIDDEN_METHODS[node.name]}")
            params = [*node.args.posonlyargs, *node.args.args]
            me = params[0].arg if params else ""
            self._method.append((self.facts.class_names.get(parent, frozenset()), me))
        else:
            self._method.append(self._method[-1])
        if node.returns is not None:
            self._check_annotation(node.returns)
        try:
            self.generic_visit(node)
        finally:
            self._method.pop()

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        for stmt in node.body:
            targets = stmt.targets if isinstance(stmt, ast.Assign) else []
            for target in targets:
                if isinstance(target, ast.Name) and target.id in _FORBIDDEN_METHODS:
                    self.report(stmt, f"{target.id} = ...: {_FORBIDDEN_METHODS[target.id]}")
        self._method.append(None)
        try:
            self.generic_visit(node)
        finally:
            self._method.pop()

    def visit_arg(self, node: ast.arg) -> None:
        if node.annotation is not None:
            self._check_annotation(node.annotation)
        self.generic_visit(node)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        self._check_annotation(node.annotation)
        self.generic_visit(node)

    def visit_Global(self, node: ast.Global) -> None:
        if "run" in node.names:
            self.report(node, "global run lets a function rebind run; refused")

    def visit_Subscript(self, node: ast.Subscript) -> None:
        keys = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        for key in keys:
            text = _string(key)
            if text in _DUNDER_KEYS:
                self.report(node, f"{self._show(node)}: key {text} {_INTERNALS}")
            elif text is not None:
                self._check_forward_ref(key)
        self.generic_visit(node)

    def visit_Constant(self, node: ast.Constant) -> None:
        if isinstance(node.value, str):
            flat = " ".join(node.value.lower().split())
            if any(sql in flat for sql in _SQL_FILE_WRITERS):
                self.report(node, f"SQL that attaches or writes a database file; {_FILES}")

    # -- strings that typing evaluates

    def _check_annotation(self, annotation: ast.expr) -> None:
        for node in ast.walk(annotation):
            if _string(node) is not None:
                self._check_forward_ref(node)

    def _check_forward_ref(self, node: ast.AST) -> None:
        """A string typing may evaluate (annotation, List["..."], TypeVar bound) is code too.

        Only a string that parses to an expression with a call in it can do anything when
        evaluated, so only those are judged - as code, by the same rules. get_type_hints turns a
        string that evaluates to a string into another forward reference, so nested strings are
        followed too.
        """
        text = _string(node)
        if text is None:
            return
        try:
            expr = ast.parse(text.strip(), mode="eval").body
        except (SyntaxError, ValueError, MemoryError):
            return
        for inner in ast.walk(expr):
            ast.copy_location(inner, node)
            for child in ast.iter_child_nodes(inner):
                self.facts.parents[child] = inner
        self.facts.parents[expr] = node
        for inner in ast.walk(expr):  # typing evaluates a string that yields a string, too
            self._check_forward_ref(inner)
        if not any(
            isinstance(inner, ast.Call | ast.Lambda | ast.NamedExpr) for inner in ast.walk(expr)
        ):
            return
        saved, self._note = self._note, " (inside a string that typing evaluates)"
        try:
            self.visit(expr)
        finally:
            self._note = saved


def _os_reason(name: str) -> str:
    if name in _OS_PROCESS or name.startswith(_OS_PROCESS_PREFIXES):
        return _PROCESS
    if name in ("putenv", "unsetenv"):
        return _ENVIRON
    if name in _OS_FILES:
        return _FILES
    return "is not one of the read-only os functions agents may use (os.path, os.listdir, ...)"
