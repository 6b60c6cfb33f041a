"""The project's layout as its tools see it: no module left out of the package or the type check."""

from __future__ import annotations

import ast
import inspect
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _pyproject() -> dict[str, object]:
    with (ROOT / "pyproject.toml").open("rb") as handle:
        return tomllib.load(handle)


def test_the_checkout_installs_as_one_package() -> None:
    """The flat modules install as `agentgod.<module>`: one name in site-packages."""
    tool = _pyproject()["tool"]
    assert isinstance(tool, dict)
    assert tool["setuptools"]["packages"] == ["agentgod"]
    assert tool["setuptools"]["package-dir"] == {"agentgod": "."}
    assert "py-modules" not in tool["setuptools"]
    assert (ROOT / ".pkg" / "agentgod").resolve() == ROOT


CHILD_SIDE_IMPORTS = {("sandbox_boot.py", "sandbox_seccomp")}
"""The one bare import of a sibling: the confined child, where no package is importable (-I -S),
loads the seccomp filter from beside its bootstrap by path."""


@pytest.mark.parametrize(
    "path",
    [
        *sorted(ROOT.glob("*.py")),
        *sorted(ROOT.glob("tests/*.py")),
        *sorted(ROOT.glob("bench/*.py")),
    ],
    ids=lambda path: str(path.relative_to(ROOT)),
)
def test_the_product_is_imported_only_through_its_package(path: Path) -> None:
    """`import llm` would find another project's `llm` once installed (or none at all): every
    import of a module of ours names `agentgod`, in the product, its tests and its benchmarks."""
    ours = {each.stem for each in ROOT.glob("*.py")} - {"__init__", "__main__"}
    bare = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names = [alias.name.split(".")[0] for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            names = ["." * node.level] if node.level else [(node.module or "").split(".")[0]]
        else:
            continue
        bare += [
            f"line {node.lineno}: {name}"
            for name in names
            if (name in ours or name.startswith("."))
            and (path.name, name) not in CHILD_SIDE_IMPORTS
        ]
    assert bare == []


def test_every_test_module_gets_the_tests_lighter_type_check() -> None:
    tool = _pyproject()["tool"]
    assert isinstance(tool, dict)
    (override,) = tool["mypy"]["overrides"]
    assert {path.stem for path in (ROOT / "tests").glob("*.py")} <= set(override["module"])


def test_what_the_inlined_runtime_restates_agrees_with_its_one_definition(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """agent_runtime may import nothing of ours (a kept agent runs with nothing installed), so
    it restates a few facts; they must never drift from the definitions the product uses."""
    from agentgod import agent_runtime, config, models

    monkeypatch.delenv("MAX_SEARCHES_PER_AGENT", raising=False)
    assert agent_runtime.DEFAULT_MODEL == models.DEFAULT_MODEL
    assert agent_runtime.DEFAULT_BASE_URL == config.DEFAULT_BASE_URL
    assert config.settings().max_searches_per_agent == agent_runtime.DEFAULT_MAX_SEARCHES


LINT_IMPORTS = "from importlinter.cli import lint_imports_command; lint_imports_command()"
"""The `lint-imports` command, run by this interpreter whatever is on PATH."""


def _lint_imports(root: Path) -> subprocess.CompletedProcess[str]:
    """`lint-imports` with pyproject's contracts over the copy of the package in `root`."""
    return subprocess.run(
        [sys.executable, "-c", LINT_IMPORTS, "--no-cache", "--no-logo", "pyproject.toml"],
        cwd=root,
        env={**os.environ, "PYTHONPATH": str(root / "pkg")},
        capture_output=True,
        text=True,
        timeout=120,
    )


def _package_copy(root: Path) -> Path:
    (root / "pkg" / "agentgod").mkdir(parents=True)
    for module in ROOT.glob("*.py"):
        shutil.copy(module, root / "pkg" / "agentgod" / module.name)
    shutil.copy(ROOT / "pyproject.toml", root / "pyproject.toml")
    return root / "pkg" / "agentgod"


@pytest.mark.parametrize(
    ("module", "added", "broken"),
    [
        # an upward import, made lazily inside a function
        ("runrecord.py", "from agentgod import orchestrator", "Each layer imports only"),
        # the records reaching for the UI
        ("runfile.py", "from agentgod import ui", "Nothing below the conversation imports the UI"),
        # the walls reaching for the model road
        ("executor.py", "from agentgod import llm", "Each layer imports only"),
        # a cycle inside one layer, only through a lazy import
        ("models.py", "from agentgod import config", "No import cycles"),
        # the run's own path drawing its page
        ("orchestrator.py", "from agentgod import runpage", "own path imports neither"),
        # a view of the run reaching for what writes the record
        ("runpage.py", "from agentgod import runlog", "never reach the writers"),
    ],
)
def test_the_layer_contracts_hold_and_refuse_a_wrong_import(
    tmp_path: Path, module: str, added: str, broken: str
) -> None:
    package = _package_copy(tmp_path)
    kept = _lint_imports(tmp_path)
    assert kept.returncode == 0, kept.stdout + kept.stderr
    with (package / module).open("a", encoding="utf-8") as source:
        source.write(f"\n\ndef _smuggled() -> None:\n    {added}  # noqa\n")
    refused = _lint_imports(tmp_path)
    assert refused.returncode != 0, refused.stdout
    assert f"{broken}" in refused.stdout and "BROKEN" in refused.stdout, refused.stdout


# ---- the broker's operations: one table, and everything that spells them agrees with it -------


def _plain_signature(name: str) -> str:
    """A runtime function as the documentation writes it: parameter names and defaults, then
    the return's annotation."""
    from agentgod import agent_runtime

    signature = inspect.signature(getattr(agent_runtime, name))
    bare = [p.replace(annotation=inspect.Parameter.empty) for p in signature.parameters.values()]
    returns = signature.return_annotation
    shown = returns.__name__ if isinstance(returns, type) else str(returns)
    unannotated = signature.replace(parameters=bare, return_annotation=inspect.Signature.empty)
    return f"{name}{unannotated} -> {shown}"


def _contract_section() -> str:
    text = (ROOT / "ARCHITECTURE.md").read_text(encoding="utf-8")
    start = text.index("## 5. The generated-agent contract")
    return text[start : text.index("\n## 6.", start)]


RUNTIME_FUNCTIONS = ("call_llm", "input_files", "save_artifact", "format_previous")
"""What the generator's prompt offers an agent besides the imports."""


def test_the_broker_serves_exactly_the_operations_of_the_table() -> None:
    from agentgod import agent_runtime, broker, brokerrequest

    handlers = {name for name in vars(broker.Broker) if name.startswith("_op_")}
    assert handlers == {f"_op_{op}" for op in agent_runtime.BROKER_OPS}
    messages = agent_runtime.BROKER_OPS["messages"]
    assert {"op", *messages.fields} == brokerrequest.MESSAGES_FIELDS
    for op, known in agent_runtime.BROKER_OPS.items():
        assert callable(getattr(agent_runtime, known.function)), op
        assert set(known.required) <= set(known.fields), op
        assert known.function in RUNTIME_FUNCTIONS, op


def test_the_generators_prompt_shows_each_runtime_function_as_it_really_is() -> None:
    from agentgod import agent_runtime, generator

    for name in RUNTIME_FUNCTIONS:
        real = f"{name}{inspect.signature(getattr(agent_runtime, name))}"
        assert f"- `{real}`" in generator.GENERATOR_PROMPT, real


def test_the_contract_in_architecture_agrees_with_the_table_and_the_signatures() -> None:
    from agentgod import agent_runtime

    section = _contract_section()
    for name in RUNTIME_FUNCTIONS:
        assert f"`{_plain_signature(name)}`" in section, _plain_signature(name)
    for op, known in agent_runtime.BROKER_OPS.items():
        fields = ", ".join(
            f"**`{field}`**" if field in known.required else f"`{field}`" for field in known.fields
        )
        answer = ", ".join(f"`{field}`" for field in known.answer)
        row = f"| `{op}` | `{known.function}` | {fields} | {answer} |"
        assert row in section, row


def test_the_runtimes_docstring_spells_each_frame_as_the_table_does() -> None:
    from agentgod import agent_runtime

    doc = agent_runtime.__doc__ or ""
    lines = doc.splitlines()
    for op, known in agent_runtime.BROKER_OPS.items():
        [at] = [i for i, line in enumerate(lines) if line.strip().startswith(f'{{"op": "{op}"')]
        assert [f'"{field}"' in lines[at] for field in known.fields] == [True] * len(known.fields)
        answer = lines[at + 1]
        assert answer.strip().startswith("->"), answer
        assert [f'"{field}"' in answer for field in known.answer] == [True] * len(known.answer)
    for name in RUNTIME_FUNCTIONS:
        assert f"`{_plain_signature(name)}`" in doc, _plain_signature(name)
