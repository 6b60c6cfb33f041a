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
- Imports are an allowlist: the standard library minus BLOCKED_STDLIB, plus ALLOWED_PACKAGES
  (guardpolicy.py holds these and every other table, each with its reason).
- Names are resolved (guardnames.py) through imports and simple assignments, flow-insensitively
  (any binding anywhere counts everywhere), so an alias (`import os as o`, `s = o.system`) is
  judged as the thing it names. Modules and argument-checked callables may not travel as values,
  which is what keeps that resolution honest.
- Dynamic code (eval, exec, computed getattr, classes built from dicts), dunder attributes and
  interpreter internals (frames, sys.modules) are refused wherever they appear, called or not -
  also where a match pattern or a format string field reads them.
- Processes, file writes and environment changes are refused by module-qualified rules (an
  allowlist of read-only os functions) and by attribute names that mean one thing on any object
  (write_text, unlink, create_subprocess_exec).
- Calls that are dangerous only with some arguments (open's mode, sqlite3.connect's database,
  tempfile's dir, Path.replace's one-argument shape, execute's SQL) must pass literal, harmless
  ones (guardargs.py holds these rules; the visitor here asks it about every call).
"""

import ast
from collections.abc import Collection

from agentgod import guardpolicy as policy
from agentgod.guardargs import argument_problem
from agentgod.guardnames import (
    BUILTIN,
    NameFacts,
    bound_name,
    has_splat,
    literal_str,
    scope_bindings,
    unwrap,
)
from agentgod.text import BIDI_CONTROLS

# Names the trusted runtime header binds. generator.check_assembled checks the model's body on its
# own, so these must resolve as the header binds them even where the body never imports them.
_RUNTIME_NAMES: dict[str, str] = {
    "json": "json", "os": "os", "sys": "sys", "time": "time", "threading": "threading",
    "Path": "pathlib.Path",
}  # fmt: skip


# ---- public entry point --------------------------------------------------------------------------


def check_agent_source(source: str, *, declared: Collection[str] | None = None) -> list[str]:
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
    for number, line in enumerate(source.splitlines(), start=1):
        for column, char in enumerate(line):
            if char in BIDI_CONTROLS:
                complaints.add(number, column, f"U+{ord(char):04X} {policy.TROJAN_SOURCE}")
    cookie = policy.foreign_encoding(source)
    if cookie:
        complaints.add(
            1,
            0,
            f"declares source encoding {cookie!r}; the file is run as UTF-8 and checked as such",
        )
    try:
        _check_run(tree, complaints)
        imports = None if declared is None else package_imports(declared)
        _Guard(NameFacts(tree, _RUNTIME_NAMES), complaints, imports).visit(tree)
    except RecursionError:
        complaints.add(1, 0, "the source nests too deeply to check; flatten the expression")
    return complaints.lines()


def package_imports(packages: Collection[str]) -> frozenset[str]:
    """The import names of the allowed packages among `packages` (pip names, any case)."""
    wanted = {name.strip().lower().replace("_", "-") for name in packages}
    return frozenset(
        module
        for pip, module in policy.ALLOWED_PACKAGES.items()
        if pip.lower().replace("_", "-") in wanted
    )


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
    for name, node in scope_bindings(tree.body):
        if name == "run" and node is not entry:
            complaints.add(
                getattr(node, "lineno", 1),
                getattr(node, "col_offset", 0),
                "binds the name run; only the one top-level `def run` may (the footer calls it)",
            )


# ---- the judge -----------------------------------------------------------------------------------


class _Guard(ast.NodeVisitor):
    """Walks the tree once and reports every rule an expression or statement breaks."""

    def __init__(
        self, facts: NameFacts, complaints: _Complaints, declared: frozenset[str] | None
    ) -> None:
        self.facts = facts
        self.complaints = complaints
        self.declared = declared
        """Import names of the packages this agent may use; None: any allowed package."""
        # Expressions already explained by a complaint about the chain they belong to.
        self._covered: set[ast.AST] = set()
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

    @staticmethod
    def _show(node: ast.AST, position: str = "value") -> str:
        text = ast.unparse(node)
        if len(text) > 60:
            text = text[:57] + "..."
        return text + "()" if position == "call" else text

    def _show_as(self, node: ast.AST, qname: str, position: str) -> str:
        shown = self._show(node, position)
        plain = shown.removesuffix("()")
        if qname.startswith(BUILTIN) or plain == qname:
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
            if alias.name in policy.ANYWHERE:
                self.report(node, f"{shown}: {alias.name} {policy.ANYWHERE[alias.name]}")
            else:
                self.visit(alias)

    def _check_import(self, dotted: str, node: ast.AST, shown: str) -> bool:
        """Report an import of a module outside the allowlist; True if one was reported."""
        problem = policy.import_refusal(dotted, self.declared)
        if problem is not None:
            self.report(node, shown + problem)
        return problem is not None

    def _check_qualified(self, qname: str, node: ast.AST, shown: str) -> bool:
        """Apply every module-aware rule to one qualified name; True if one was reported."""
        problem = None if qname.startswith(BUILTIN) else policy.qualified_refusal(qname)
        if problem is not None:
            self.report(node, shown + problem)
        return problem is not None

    # -- names

    def visit(self, node: ast.AST) -> None:
        bound = bound_name(node)
        if bound in policy.PROTECTED_NAMES:
            self.report(node, f"binds the name {bound}, shadowing the builtin; pick another name")
        super().visit(node)

    def visit_Name(self, node: ast.Name) -> None:
        if not isinstance(node.ctx, ast.Load):
            return
        position = self.facts.position(node)
        # Forbidden names are reported even inside a chain already complained about:
        # `globals()["__builtins__"]` is two mistakes, and the model should hear of both.
        if node.id in policy.FORBIDDEN_DUNDER_NAMES:
            self.report(node, f"{node.id} {policy.INTERNALS}")
            return
        if node.id in policy.HOME_NAMES:
            self.report(node, f"{node.id} {policy.HOME}")
            return
        private = node.id.startswith("_") and not policy.is_dunder(node.id)
        if private and not self.facts.binds(node.id):
            self.report(node, f"{node.id} {policy.RUNTIME_PRIVATE}")
            return
        if (
            BUILTIN + node.id in self.facts.resolve(node.id)
            and node.id in policy.FORBIDDEN_BUILTINS
        ):
            self.report(node, f"{self._show(node, position)} {policy.FORBIDDEN_BUILTINS[node.id]}")
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
        callable_only = last in policy.CALL_ONLY or qname in policy.SQLITE_CONNECTORS
        if callable_only and position not in ("call", "receiver"):
            self.report(
                node,
                f"{self._show(node)} is used without being called; call it directly so"
                " its arguments can be checked",
            )
            return True
        if qname == "os.environ" and self._judge_environ(node, position):
            return True
        builds = qname == BUILTIN + "type" or qname in policy.METACLASSES
        if builds and position == "value" and not self.facts.inert(node):
            self.report(
                node,
                f"{self._show(node)} is passed on as a value; called with three arguments it"
                f" {policy.BUILDS_CLASSES} (call type(x) directly, or rename your variable)",
            )
            return True
        if qname in policy.POLICED_MODULES and position not in ("receiver", "alias"):
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
            self.report(node, f"{self._show(parent or node)} {policy.ENVIRON}")
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
            and parent.func.id in policy.ENVIRON_COPIERS
        ):
            return False
        self.report(
            node, "os.environ is passed on as a value; pass dict(os.environ) so it stays read-only"
        )
        return True

    # -- attributes

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if node not in self._covered:
            self._judge_attribute(node, self.facts.position(node))
        self.generic_visit(node)

    def _judge_attribute(self, node: ast.Attribute, position: str) -> None:
        attr = node.attr
        shown = self._show(node, position)
        if not isinstance(node.ctx, ast.Load) and self.facts.qnames(node.value):
            self.report(
                node, f"{shown}: assigning or deleting a module's attribute changes it for all code"
            )
            return
        if not isinstance(node.ctx, ast.Load) and attr in policy.FORBIDDEN_METHODS:
            self.report(node, f"{shown}: {attr} {policy.FORBIDDEN_METHODS[attr]}")
            return
        for qname in sorted(self.facts.qnames(node)):
            if self._judge_reference(node, qname, position):
                return
        if policy.is_dunder(attr):
            harmless = (attr in policy.DUNDER_READS and isinstance(node.ctx, ast.Load)) or (
                attr in policy.DUNDER_CALLS and position == "call"
            )
            if not harmless:
                self.report(node, f"{shown}: dunder attribute {attr} {policy.INTERNALS}")
            return
        if (
            attr.startswith("_")
            and attr not in policy.NAMEDTUPLE_API
            and not self.facts.own(node.value, attr)
        ):
            self.report(node, f"{shown}: {attr} is private to another object; {policy.INTERNALS}")
            return
        if attr in policy.ANYWHERE:
            self.report(node, f"{shown}: {attr} {policy.ANYWHERE[attr]}")
            return
        if attr == "send" and self.facts.instance_of(node.value, policy.HTTP_CONNECTIONS):
            self.report(node, f"{shown} writes raw bytes to the socket; {policy.NETWORK}")
            return
        if attr.startswith("co_"):
            self.report(node, f"{shown}: code-object attribute {attr} {policy.INTERNALS}")
            return
        if attr in policy.CALL_ONLY and position != "call":
            self.report(
                node,
                f"{shown} is used without being called; call it directly so its arguments"
                " can be checked",
            )
            return
        if attr in ("format", "format_map") and position != "call":
            self._judge_format_string(node.value, node)  # handed on, it formats all the same

    # -- calls

    def visit_Call(self, node: ast.Call) -> None:
        self.visit(node.func)
        if node not in self._covered and node.func not in self._covered:
            self._judge_call(node)
        for arg in node.args:
            self.visit(arg)
        for keyword in node.keywords:
            if keyword.arg in policy.FORBIDDEN_METHODS:
                reason = policy.FORBIDDEN_METHODS[keyword.arg]
                self.report(keyword, f"{keyword.arg}=...: {reason}")
            self.visit(keyword)

    def _judge_call(self, node: ast.Call) -> None:
        position = self.facts.position(node)
        func = unwrap(node.func)  # (t := type)(...) calls type
        builtin = {
            q.removeprefix(BUILTIN)
            for q in (self.facts.resolve(func.id) if isinstance(func, ast.Name) else ())
            if q.startswith(BUILTIN)
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
        if "type" in builtin and (len(node.args) != 1 or node.keywords or has_splat(node)):
            self.report(node, "type() with three arguments builds a class at runtime; use class")
            return
        if self.facts.qnames(node.func) & policy.METACLASSES:
            self.report(node, f"{self._show(node.func, 'call')} {policy.BUILDS_CLASSES}")
            return
        if (len(node.args) >= 3 or has_splat(node)) and self.facts.made_by_type(node.func):
            self.report(
                node,
                f"{self._show(node.func, 'call')} calls the class type() returned with three"
                f" arguments; if that class is a metaclass, this {policy.BUILDS_CLASSES}",
            )
            return
        spec = self.facts.format_string_of(node)
        if spec is not None:
            self._judge_format_string(spec, node)
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

    def _judge_format_string(self, spec: ast.expr, where: ast.AST) -> None:
        """A format string is judged by the fields it spells, literal parts folded together; one
        spliced together at runtime is refused, as a computed getattr would be."""
        variants = self.facts.text_variants(spec)
        for parts in variants:
            known = [part for part in parts if part is not None]
            problem = (
                policy.format_field_problem("".join(known)) if len(known) == len(parts) else None
            )
            if problem is not None:
                self.report(where, f"format string {problem}")
                return
        if self.facts.spliced(spec) and any(None in parts for parts in variants):
            self.report(
                where,
                f"{self._show(spec)} is a format string built at runtime, whose fields could reach"
                " anything; write the format string as one literal",
            )

    def _judge_reflection(self, node: ast.Call, name: str) -> None:
        arity = {"getattr": (2, 3), "setattr": (3,), "delattr": (2,), "hasattr": (2,)}[name]
        attr = literal_str(node.args[1]) if len(node.args) > 1 else None
        if attr is None or len(node.args) not in arity or node.keywords or has_splat(node):
            self.report(
                node, f"{name}() with a computed attribute name can reach anything; write obj.attr"
            )
            return
        if policy.is_dunder(attr):
            self.report(node, f"{name}(..., {attr!r}): {attr} {policy.INTERNALS}")
            return
        if name == "hasattr":  # only answers yes or no
            return
        ctx: ast.expr_context = ast.Store() if name == "setattr" else ast.Del()
        synthetic = ast.Attribute(value=node.args[0], attr=attr, ctx=ctx)
        ast.copy_location(synthetic, node)
        self.facts.parents[synthetic] = node
        self._judge_attribute(synthetic, "value")

    def _judge_call_shape(self, node: ast.Call) -> None:
        """Rules for calls that are only dangerous with some arguments (guardargs)."""
        names, kind = self.facts.callee(node)
        problem = argument_problem(self.facts, node, names, kind)
        if problem:
            self.report(node, f"{self._show(node.func, 'call')} {problem}")
            return
        if names & policy.TYPING_FACTORIES:
            for arg in [*node.args[1:], *(k.value for k in node.keywords)]:
                for inner in ast.walk(arg):
                    self._check_forward_ref(inner)

    # -- statements and the rest

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        if node.returns is not None:
            self._check_annotation(node.returns)
        self.generic_visit(node)

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        for name, binding in scope_bindings(node.body):
            if name in policy.FORBIDDEN_METHODS:
                self.report(binding, f"{name} in a class body: {policy.FORBIDDEN_METHODS[name]}")
            if name == "__match_args__" and isinstance(binding, ast.Name):
                # case C(x) reads the attributes __match_args__ names, as getattr would.
                for value in self.facts.values_of(name):
                    for item in ast.walk(value):
                        text = literal_str(item)
                        reason = None if text is None else policy.attribute_refusal(text)
                        if reason is not None:
                            self.report(item, f"__match_args__ names {text}, which {reason}")
        self.generic_visit(node)

    def visit_MatchClass(self, node: ast.MatchClass) -> None:
        """case C(name=...) reads subject.name: judged as that attribute, nested patterns too."""
        subject = self.facts.pattern_subject(node)
        for attr in node.kwd_attrs:
            synthetic = ast.Attribute(value=subject, attr=attr, ctx=ast.Load())
            ast.copy_location(synthetic, node)
            self.facts.parents[synthetic] = node
            self._judge_attribute(synthetic, "value")
        self.generic_visit(node)

    def visit_MatchMapping(self, node: ast.MatchMapping) -> None:
        for key in node.keys:
            text = literal_str(key)
            if text in policy.DUNDER_KEYS:
                self.report(key, f"case {{{text!r}: ...}}: key {text} {policy.INTERNALS}")
        self.generic_visit(node)

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
            text = literal_str(key)
            if text in policy.DUNDER_KEYS:
                self.report(node, f"{self._show(node)}: key {text} {policy.INTERNALS}")
            elif text is not None:
                self._check_forward_ref(key)
        self.generic_visit(node)

    def visit_Constant(self, node: ast.Constant) -> None:
        if isinstance(node.value, bytes):
            home = policy.home_reference(node.value.decode("latin-1"))
            if home is not None:
                self.report(node, f"the bytes {self._show(node)} {home}")
            return
        if not isinstance(node.value, str):
            return
        home = policy.home_reference(node.value)
        if home is not None:
            self.report(node, f"the string {self._show(node)} {home}")
        if node.value in policy.FORBIDDEN_METHODS:
            reason = policy.FORBIDDEN_METHODS[node.value]
            self.report(node, f"the string {node.value!r} names a method: {reason}")
        problem = policy.format_field_problem(node.value)
        if problem is not None:
            self.report(node, f"format string {problem}")

    # -- strings that typing evaluates

    def _check_annotation(self, annotation: ast.expr) -> None:
        for node in ast.walk(annotation):
            if literal_str(node) is not None:
                self._check_forward_ref(node)

    def _check_forward_ref(self, node: ast.AST) -> None:
        """A string typing may evaluate (annotation, List["..."], TypeVar bound) is code too.

        Only a string that parses to an expression with a call in it can do anything when
        evaluated, so only those are judged - as code, by the same rules. get_type_hints turns a
        string that evaluates to a string into another forward reference, so nested strings are
        followed too.
        """
        text = literal_str(node)
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
