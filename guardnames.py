"""guardnames.py - what every name in an agent's source may refer to, for codeguard's rules.

codeguard judges a name as the thing it names (`import os as o; s = o.system` is os.system), so
before any rule runs this module resolves the whole file once: imports, aliases to a fixed point,
which names hold paths, ElementTrees or instances of known classes, what each class defines itself,
the texts a string expression may have, and how each expression is used. Flow-insensitive on
purpose: any binding anywhere counts everywhere, so reordering assignments cannot hide one. Pure
syntax: nothing is imported or executed.
"""

import ast
import sys
from collections import Counter
from collections.abc import Callable, Hashable, Mapping
from typing import TypeVar

from agentgod import guardpolicy as policy

_Key = TypeVar("_Key", bound=Hashable)
_Value = TypeVar("_Value")

BUILTIN = "builtin."  # prefix of the qualified names given to unshadowed builtins

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
_ZIP_ARCHIVES = frozenset({"zipfile.ZipFile"})  # whose open(name[, mode]) reads by default
_FORMATTERS = frozenset({"format", "format_map", "vformat"})  # methods that read format fields
_FORMATTER = frozenset({"string.Formatter"})
# Bounds on resolution, so a crafted alias chain cannot make the fixpoint slow or unbounded.
_MAX_QUALNAME_PARTS = 8
_MAX_MEANINGS = 32


def scope_bindings(body: list[ast.stmt]) -> list[tuple[str, ast.AST]]:
    """(name, node) for each binding made in the scope whose statements are `body` (a module's or
    a class's): nested function, lambda, class and comprehension bodies are scopes of their own."""
    found: list[tuple[str, ast.AST]] = []
    stack: list[ast.AST] = list(body)
    while stack:
        node = stack.pop()
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            found.append((node.name, node))
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
        bound = bound_name(node)
        if bound:
            found.append((bound, node))
        stack.extend(child for child in ast.iter_child_nodes(node) if child is not None)
    return found


def bound_name(node: ast.AST) -> str | None:
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


class NameFacts:
    """What names can refer to, flow-insensitively: any binding anywhere counts everywhere.

    Each fact is a fixpoint over all bindings, so `a = os; b = a; a = b` resolves however the
    assignments are ordered.
    """

    def __init__(self, tree: ast.Module, runtime: Mapping[str, str]) -> None:
        # Names bound before the checked source runs (the runtime header): name -> qualified name.
        self._runtime = runtime
        self.parents: dict[ast.AST, ast.AST] = {}
        self._imports: dict[str, set[str]] = {}
        self.imported: set[str] = set()  # top-level modules the source imports
        self._values: dict[str, list[ast.expr]] = {}
        self._annotations: dict[str, list[ast.expr]] = {}
        self._iterations: dict[str, list[ast.expr]] = {}
        # How often each name is bound, by any means: a name all of whose bindings are plain
        # assignments has known values (sole_values).
        self._bindings: Counter[str] = Counter()
        # Names bound to so many qualified names that resolving them could not finish quickly.
        self.overloaded: dict[str, ast.expr] = {}
        self.class_names: dict[ast.ClassDef, frozenset[str]] = {}
        self._classes: dict[str, list[ast.ClassDef]] = {}
        for node in ast.walk(tree):
            for child in ast.iter_child_nodes(node):
                self.parents[child] = node
            self._collect(node)
            if isinstance(node, ast.ClassDef):
                self._classes.setdefault(node.name, []).append(node)
        self._path_names: set[str] = set()
        self._etree_names: set[str] = set()
        # Answers per name for the queries that follow bindings (see _memo).
        self._instance_cache: dict[tuple[str, frozenset[str]], bool] = {}
        self._own_cache: dict[str, frozenset[str]] = {}
        self._text_cache: dict[str, list[list[str | None]]] = {}
        self._solve()
        self._solve_class_names(self._classes)

    # -- collection

    def _collect(self, node: ast.AST) -> None:
        bound = bound_name(node)
        if bound:
            self._bindings[bound] += 1
        if isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                self.imported.add(parts[0])
                target = alias.name if alias.asname else parts[0]
                self._imports.setdefault(alias.asname or parts[0], set()).add(target)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            self.imported.add(node.module.split(".")[0])
            for alias in node.names:
                self._imports.setdefault(alias.asname or alias.name, set()).add(
                    f"{node.module}.{alias.name}"
                )
        elif isinstance(node, ast.Assign):
            for assigned in node.targets:
                self._assign(assigned, node.value)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            self._annotations.setdefault(node.target.id, []).append(node.annotation)
            if node.value is not None:
                self._assign(node.target, node.value)
        elif isinstance(node, ast.NamedExpr):
            self._assign(node.target, node.value)
        elif isinstance(node, ast.withitem) and node.optional_vars is not None:
            self._assign(node.optional_vars, node.context_expr)
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

    def binds(self, name: str) -> bool:
        """Whether the checked code binds `name` anywhere (an import, an assignment, a def...)."""
        return name in self._bindings

    def resolve(self, name: str) -> frozenset[str]:
        """The qualified names `name` may refer to: imports, aliases, the runtime's names, and
        protected builtins. An unbound module name counts as that module (a NameError at best).
        """
        found = set(self._names.get(name, ()))
        if name in self._runtime:
            found.add(self._runtime[name])
        if name in policy.FORBIDDEN_BUILTINS or name in policy.CHECKED_BUILTINS:
            found.add(BUILTIN + name)  # even where rebound (see policy.CHECKED_BUILTINS)
        elif name not in self._bindings and (
            name in sys.stdlib_module_names or name in policy.PACKAGE_IMPORTS
        ):
            found.add(name)
        return frozenset(found)

    def qnames(self, node: ast.AST) -> frozenset[str]:
        """Qualified names an expression may evaluate to: `o.system` -> {"os.system"}."""
        node = unwrap(node)
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
            and BUILTIN + "getattr" in self.resolve(node.func.id)
            and len(node.args) in (2, 3)
            and not node.keywords
            and not any(isinstance(arg, ast.Starred) for arg in node.args)
        ):
            return None
        name = literal_str(node.args[1])
        return None if name is None else (node.args[0], name)

    def is_path(self, node: ast.AST) -> bool:
        """Whether an expression is (probably) a pathlib.Path, or the Path class itself."""
        node = unwrap(node)
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
        node = unwrap(node)
        if isinstance(node, ast.Name):
            return node.id in self._etree_names
        return isinstance(node, ast.Call) and bool(self.qnames(node.func) & _ETREE_MAKERS)

    def values_of(self, name: str) -> list[ast.expr]:
        """Every value assigned to `name` anywhere (it may also be bound in other ways)."""
        return self._values.get(name, [])

    def sole_values(self, name: str) -> list[ast.expr]:
        """The values assigned to `name`, or [] if it is also bound some other way (a parameter,
        a loop variable, an import...) and so may hold anything."""
        values = self._values.get(name, [])
        return values if len(values) == self._bindings[name] else []

    def instance_of(self, node: ast.AST, classes: frozenset[str]) -> bool:
        """Whether an expression surely holds the result of calling one of `classes` (qualified
        names): such a call, or a name every binding of which is one."""
        node = unwrap(node)
        if isinstance(node, ast.Call):
            return bool(self.qnames(node.func) & classes)
        if not isinstance(node, ast.Name):
            return False
        values = self.sole_values(node.id)
        return _memo(
            self._instance_cache,
            (node.id, classes),
            False,
            lambda: bool(values) and all(self.instance_of(v, classes) for v in values),
        )

    def _own_instance(self, node: ast.AST) -> frozenset[str]:
        """Names the agent's own class defines, if `node` surely is an instance of it: a call of a
        class bound only by its class statements, or a name every binding of which is one."""
        node = unwrap(node)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            defs = self._classes.get(node.func.id, [])
            if not defs or self._bindings[node.func.id] != len(defs):
                return frozenset()
            return frozenset.intersection(*(self.class_names[cls] for cls in defs))
        values = self.sole_values(node.id) if isinstance(node, ast.Name) else []
        if not values or not isinstance(node, ast.Name):
            return frozenset()
        return _memo(
            self._own_cache,
            node.id,
            frozenset(),
            lambda: frozenset.intersection(*(self._own_instance(v) for v in values)),
        )

    def text_variants(self, node: ast.AST, depth: int = 0) -> list[list[str | None]]:
        """The texts a string expression may evaluate to, each as parts where None stands for
        text only known at runtime: `"a" + x` is [["a", None]], a parameter is [[None]]."""
        node = unwrap(node)
        if depth > _MAX_QUALNAME_PARTS:
            return [[None]]
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return [[node.value]]
        if isinstance(node, ast.JoinedStr):
            return [[literal_str(part) for part in node.values]]
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            left = self.text_variants(node.left, depth + 1)
            right = self.text_variants(node.right, depth + 1)
            return [a + b for a in left for b in right][:_MAX_MEANINGS]
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod):  # "... %s" % x
            return [[*v, None] for v in self.text_variants(node.left, depth + 1)]
        if isinstance(node, ast.IfExp):
            both = self.text_variants(node.body, depth + 1) + self.text_variants(
                node.orelse, depth + 1
            )
            return both[:_MAX_MEANINGS]
        if isinstance(node, ast.Name) and (items := self._iterated_items(node.id)):
            found = [v for item in items for v in self.text_variants(item, depth + 1)]
            return found[:_MAX_MEANINGS]
        if isinstance(node, ast.Name) and (values := self.sole_values(node.id)):
            return _memo(
                self._text_cache,
                node.id,
                [[None]],
                lambda: [v for value in values for v in self.text_variants(value)][:_MAX_MEANINGS],
            )
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("format", "format_map")
        ):
            return [[*v, None] for v in self.text_variants(node.func.value, depth + 1)]
        return [[None]]

    def _iterated_items(self, name: str) -> list[ast.expr]:
        """The items a loop variable takes, if its only bindings are loops over literal lists,
        tuples or sets (`for statement in SCHEMA:` with SCHEMA = ("CREATE ...", ...))."""
        loops = self._iterations.get(name, [])
        if not loops or len(loops) != self._bindings[name]:
            return []
        items: list[ast.expr] = []
        for loop in loops:
            shown = self.sole_values(loop.id) if isinstance(loop, ast.Name) else [loop]
            literals = [s for s in shown if isinstance(s, ast.List | ast.Tuple | ast.Set)]
            if not literals or len(literals) != len(shown):
                return []
            items += [item for literal in literals for item in literal.elts]
        return items

    def inert(self, node: ast.AST) -> bool:
        """Whether a class-building value is only compared, shown, annotated, isinstance-checked
        or named as a metaclass= (whose class statement is checked): nothing can call it there."""
        parent = self.parents.get(node)
        if isinstance(parent, ast.Tuple):
            node, parent = parent, self.parents.get(parent)
        if isinstance(parent, ast.Compare | ast.FormattedValue):
            return True
        if isinstance(parent, ast.keyword) and parent.arg == "metaclass":
            return isinstance(self.parents.get(parent), ast.ClassDef)
        if isinstance(parent, ast.Call) and isinstance(parent.func, ast.Name):
            return parent.func.id in ("isinstance", "issubclass") and node in parent.args[1:]
        return self.in_annotation(node)

    def made_by_type(self, func: ast.expr) -> bool:
        """Whether a callee is what type(x) returned (directly, or through a name bound to it)."""
        callee = unwrap(func)
        made = [callee]
        if isinstance(callee, ast.Name):
            made = [unwrap(value) for value in self.values_of(callee.id)]
        return any(
            isinstance(m, ast.Call) and BUILTIN + "type" in self.qnames(m.func) for m in made
        )

    def format_string_of(self, call: ast.Call) -> ast.expr | None:
        """The format string a str.format/format_map or Formatter.format/vformat call reads."""
        func = call.func
        if not isinstance(func, ast.Attribute) or func.attr not in _FORMATTERS:
            return None
        str_method = isinstance(func.value, ast.Name) and func.value.id == "str"  # str.format(s)
        if func.attr == "vformat" or str_method or self.instance_of(func.value, _FORMATTER):
            return call.args[0] if call.args else None
        return func.value

    def spliced(self, node: ast.expr) -> bool:
        """Whether a string is spliced together (f-string, + or %), itself or where it is bound."""
        found = [unwrap(node)]
        if isinstance(found[0], ast.Name):
            found = [unwrap(v) for v in self.values_of(found[0].id)]
        return any(isinstance(f, ast.JoinedStr | ast.BinOp) for f in found)

    def pattern_subject(self, pattern: ast.pattern) -> ast.expr:
        """What a pattern is matched against, as far as the syntax tells (a placeholder if not)."""
        parent = self.parents.get(pattern)
        if isinstance(parent, ast.match_case):
            match = self.parents.get(parent)
            if isinstance(match, ast.Match):
                return match.subject
        if isinstance(parent, ast.MatchAs | ast.MatchOr):
            return self.pattern_subject(parent)
        if isinstance(parent, ast.MatchClass) and pattern in parent.kwd_patterns:
            attr = parent.kwd_attrs[parent.kwd_patterns.index(pattern)]
            return ast.Attribute(value=self.pattern_subject(parent), attr=attr, ctx=ast.Load())
        return ast.Name(id="<item>", ctx=ast.Load())

    def in_annotation(self, node: ast.AST) -> bool:
        """Whether an expression is (part of) an annotation, which is never called."""
        child, parent = node, self.parents.get(node)
        while parent is not None and not isinstance(child, ast.stmt):
            if (
                (isinstance(parent, ast.arg) and parent.annotation is child)
                or (isinstance(parent, ast.AnnAssign) and parent.annotation is child)
                or (
                    isinstance(parent, ast.FunctionDef | ast.AsyncFunctionDef)
                    and parent.returns is child
                )
            ):
                return True
            child, parent = parent, self.parents.get(parent)
        return False

    # -- how expressions are used

    def position(self, node: ast.AST) -> str:
        """How an expression is used: call, receiver, alias, subscripted or (passed as a) value."""
        parent = self.parents.get(node)
        if isinstance(parent, ast.NamedExpr) and parent.value is node:
            # The walrus binds an alias and also passes the value on: judge where it goes.
            return self.position(parent)
        if isinstance(parent, ast.Attribute) and parent.value is node:
            return "receiver"
        if isinstance(parent, ast.Call):
            if parent.func is node:
                return "call"
            literal = self.literal_getattr(parent)
            if literal is not None and literal[0] is node:
                return "receiver"
            if (
                isinstance(parent.func, ast.Name)
                and self.resolve(parent.func.id)
                & {BUILTIN + "hasattr", BUILTIN + "setattr", BUILTIN + "delattr"}
                and parent.args
                and parent.args[0] is node
            ):
                return "receiver"
        # A class attribute is reached as C.name or self.name, which resolution cannot follow.
        in_class = parent is not None and isinstance(self.parents.get(parent), ast.ClassDef)
        if isinstance(parent, ast.Assign | ast.AnnAssign) and parent.value is node and not in_class:
            targets = parent.targets if isinstance(parent, ast.Assign) else [parent.target]
            return "alias" if all(isinstance(t, ast.Name) for t in targets) else "value"
        if isinstance(parent, ast.Subscript) and parent.value is node:
            return "subscripted"
        return "value"

    def own(self, receiver: ast.expr, attr: str) -> bool:
        """Whether receiver.attr is the agent's own: self.<name> inside a class that defines that
        name itself, or <name> on what surely is an instance of such a class (p = Parser())."""
        method = self._method_of(receiver)
        if method is not None and isinstance(receiver, ast.Name) and receiver.id == method[1]:
            return attr in method[0]
        return attr in self._own_instance(receiver)

    def _method_of(self, node: ast.AST) -> tuple[frozenset[str], str] | None:
        """(names its class defines itself, its self parameter) for the method enclosing node.

        A function nested in a method shares the method's self; a class body starts afresh.
        """
        current = self.parents.get(node)
        while current is not None:
            if isinstance(current, ast.ClassDef):
                return None
            owner = self.parents.get(current)
            if isinstance(current, ast.FunctionDef | ast.AsyncFunctionDef) and isinstance(
                owner, ast.ClassDef
            ):
                params = [*current.args.posonlyargs, *current.args.args]
                return self.class_names.get(owner, frozenset()), params[0].arg if params else ""
            current = owner
        return None

    def callee(self, node: ast.Call) -> tuple[set[str], str]:
        """The names a call may invoke and what kind of receiver it has.

        A bare name counts only through what it resolves to: the agent's own `def extract()`
        is not zipfile's. Likewise `self.extract()` in a class that defines extract.
        """
        func = node.func
        literal = self.literal_getattr(func) if isinstance(func, ast.Call) else None
        if isinstance(func, ast.Attribute):
            literal = func.value, func.attr
        if literal is not None:
            receiver, name = literal
            if self.own(receiver, name):
                return set(), "own"
            if self.is_path(receiver):
                return {name}, "path-class" if self.qnames(receiver) else "path"
            if self.instance_of(receiver, _ZIP_ARCHIVES):
                return {name}, "zip"
            if self.qnames(receiver):
                return {name}, "static"
            return {name}, "etree" if self.is_etree(receiver) else "instance"
        if isinstance(func, ast.Name):
            return {q.rsplit(".", 1)[-1] for q in self.resolve(func.id)}, "static"
        return set(), "instance"


def _memo(
    cache: dict[_Key, _Value], key: _Key, unknown: _Value, compute: Callable[[], _Value]
) -> _Value:
    """compute() once per key, so following bindings stays linear in the file's size however
    names refer to each other; a key met again while it is computed (a cycle) counts as unknown."""
    if key not in cache:
        cache[key] = unknown
        cache[key] = compute()
    return cache[key]


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


def unwrap(node: ast.AST) -> ast.AST:
    """The value of a walrus, which is what `(o := os).system` really calls on."""
    while isinstance(node, ast.NamedExpr):
        node = node.value
    return node


def literal_str(node: ast.AST) -> str | None:
    """The text of a string literal, else None (an f-string or a variable is not literal)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    return None


def has_splat(call: ast.Call) -> bool:
    """Whether a call passes *args or **kwargs, which hide what its arguments are."""
    return any(isinstance(a, ast.Starred) for a in call.args) or any(
        k.arg is None for k in call.keywords
    )


def keyword_arg(call: ast.Call, name: str) -> ast.expr | None:
    """The value passed as name=..., if any."""
    return next((k.value for k in call.keywords if k.arg == name), None)
