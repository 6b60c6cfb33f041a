"""guardargs.py - the guard's argument rules: calls that are dangerous only with some arguments.

open is harmless with mode "r" and a file writer with "w"; sqlite3.connect(":memory:") is a
scratchpad and sqlite3.connect("x.db") a file; Path.replace(target) moves a file and
str.replace(a, b) does not. These rules read a call's arguments, which must be literal and
harmless, so that the check can tell the two apart; a * or ** argument hides them and is refused.
codeguard's visitor asks `argument_problem` about every call it has not already refused, with
the names and kind guardnames resolved for the callee; what this module answers is the reason
only, and the visitor reports it.
"""

import ast
from collections.abc import Collection

from agentgod import guardpolicy as policy
from agentgod.guardnames import NameFacts, has_splat, keyword_arg, literal_str


def argument_problem(
    facts: NameFacts, node: ast.Call, names: Collection[str], kind: str
) -> str | None:
    """Why calling `node` with its arguments is refused (the first rule, by callee name), or None.

    `names` are the callee's possible names and `kind` what it is called on, as
    `NameFacts.callee` tells them.
    """
    for name in sorted(names):
        problem = _shape_problem(facts, node, name, kind)
        if problem:
            return problem
    return None


def _shape_problem(facts: NameFacts, node: ast.Call, name: str, kind: str) -> str | None:
    """What is wrong with calling `name` (a `kind` callee) with these arguments, or None."""
    if facts.qnames(node.func) & policy.WEAKREF_CALLBACKS and (
        len(node.args) > 1 or node.keywords or has_splat(node)
    ):
        return f"passes a callback, which {policy.FINALISER}"
    if name == "make_dataclass" and (has_splat(node) or keyword_arg(node, "namespace")):
        return f"passes a namespace, which {policy.BUILDS_CLASSES}"
    if name in ("execute", "executemany", "executescript") and kind != "own":
        return _sql_problem(facts, node, script=name == "executescript")
    if name in policy.OPENERS:
        return _mode_problem(node, name, kind)
    if name in policy.TEMPFILE_MAKERS:
        return _tempfile_problem(node, policy.TEMPFILE_MAKERS[name])
    if name in ("connect", "Connection") and facts.qnames(node.func) & policy.SQLITE_CONNECTORS:
        return _database_problem(node)
    if name in ("replace", "rename"):
        if kind in ("path", "path-class"):
            return f"moves a file ({policy.FILES})"
        single = len(node.args) == 1 and not node.keywords
        if has_splat(node) or single or keyword_arg(node, "target") is not None:
            return (
                f"has the shape of Path.{name}(target), which moves a file; str.replace"
                " takes two arguments"
            )
    if name == "extract" and (node.args or node.keywords):
        return f"extracts an archive member to disk; {policy.FILES}"
    if name == "basicConfig" and (
        has_splat(node) or {k.arg for k in node.keywords} & {"filename", "filemode"}
    ):
        return f"logs to a file; {policy.FILES}"
    if name in ("attrgetter", "methodcaller"):
        return _getter_problem(node, name)
    if name == "write" and kind == "etree":
        return f"writes the tree to a path; {policy.FILES}"
    return None


def _mode_problem(node: ast.Call, name: str, kind: str) -> str | None:
    if has_splat(node):
        return "passes * or ** arguments, so its mode cannot be checked"
    if keyword_arg(node, "opener") is not None:
        return "passes an opener, which can open the file any way it likes"
    candidates = [value for value in [keyword_arg(node, "mode")] if value is not None]
    index = policy.OPENERS[name]
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
        text = None if first is None else literal_str(first)
        if first is not None and text is not None and policy.looks_like_mode(text):
            candidates.append(first)
        elif first is not None and text is None and not candidates:
            return "opens something whose mode cannot be told from a name; pass a literal mode"
    elif len(node.args) > index:
        candidates.append(node.args[index])
    for value in candidates:
        mode = literal_str(value)
        if mode is None:
            return "opens with a mode that is not a literal string"
        if policy.opens_for_writing(mode):
            return f"opens with mode {mode!r}; {policy.FILES}"
    return None


def _sql_problem(facts: NameFacts, node: ast.Call, script: bool) -> str | None:
    """SQL may only reach sqlite3 as text this check can read (see policy.sql_problem)."""
    if "sqlite3" not in facts.imported:
        return None  # no sqlite3 connection can exist, so this execute is someone else's
    if has_splat(node):
        return "passes * or ** arguments, so its SQL cannot be checked"
    sql = keyword_arg(node, "sql") or keyword_arg(node, "sql_script")
    sql = sql or (node.args[0] if node.args else None)
    for parts in facts.text_variants(sql) if sql is not None else []:
        problem = policy.sql_problem(parts, script)
        if problem is not None:
            return (
                f"runs SQL that {problem}, and agents may not write files; write SQL as"
                " literals and pass values as ? parameters"
            )
    return None


def _tempfile_problem(node: ast.Call, positional: int) -> str | None:
    if has_splat(node):
        return "passes * or ** arguments, so where it writes cannot be checked"
    if len(node.args) > positional:
        return "passes suffix/prefix/dir positionally; use keywords (never dir=)"
    if keyword_arg(node, "dir") is not None:
        return "passes dir=, which writes outside the agent's scratch directory"
    for key in ("prefix", "suffix"):
        value = keyword_arg(node, key)
        if value is None or (isinstance(value, ast.Constant) and value.value is None):
            continue
        text = literal_str(value)
        if text is None or "/" in text or "\\" in text or ".." in text:
            return f"passes a {key} that could leave the scratch directory; use a plain literal"
    return None


def _database_problem(node: ast.Call) -> str | None:
    if has_splat(node):
        return "passes * or ** arguments, so the database cannot be checked"
    database = keyword_arg(node, "database") or (node.args[0] if node.args else None)
    if database is None or literal_str(database) == ":memory:":
        return None
    return "opens a database file; agents may only use sqlite3.connect(':memory:')"


def _getter_problem(node: ast.Call, name: str) -> str | None:
    names = node.args if name == "attrgetter" else node.args[:1]
    if not names or (node.keywords and name == "attrgetter") or has_splat(node):
        return "needs literal attribute names"
    for arg in names:
        text = literal_str(arg)
        if text is None:
            return "with a computed attribute name can reach anything"
        for part in text.split("."):
            refused = part.startswith("_") or policy.attribute_refusal(part) is not None
            if refused or part in policy.CALL_ONLY or part in policy.DETOUR_MODULES:
                return f"reaches {part!r} by string, which these checks refuse as an attribute"
            if part in policy.OS_FILES or part in policy.OS_PROCESS:
                return f"reaches {part!r} by string, which these checks refuse as an attribute"
    return None
