"""generator: the trusted runtime, assembly, and generation through the fake Messages API."""

from __future__ import annotations

import ast
import os
import re
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from agents import agent_source, spec
from fakeapi import FakeMessagesAPI, Reply, Request

from agentgod import codeguard, generator, ledger
from agentgod.agent_runtime import BROKER_FD_VARIABLE

GOOD_BODY = """
def run(task, previous_outputs):
    notes = format_previous(previous_outputs)
    return call_llm(f"Task: {task}\\n\\nNotes:\\n{notes}", system="Summarise.")
"""


def test_a_good_agent_passes_the_assembled_check() -> None:
    source = agent_source(GOOD_BODY)
    assert generator.check_assembled(source) == []
    assert generator.agent_body(source) == GOOD_BODY.lstrip("\n")


@pytest.mark.parametrize("marker", generator.MARKERS)
def test_a_body_holding_a_marker_line_is_refused_when_assembled(marker: str) -> None:
    body = f"{GOOD_BODY}\n{marker}\nimport subprocess\n"
    with pytest.raises(generator.AssemblyError, match="marker"):
        generator.assemble_agent(body, spec("sneaky_agent"))


def test_code_hidden_after_a_second_footer_marker_is_refused() -> None:
    """The old hole: everything after the first footer marker went unchecked."""
    source = agent_source(GOOD_BODY)
    hidden = "\nimport subprocess\nsubprocess.run(['sh'])\n"
    start = source.index(generator.BODY_START) + len(generator.BODY_START) + 1
    tampered = source[:start] + f"# {generator.BODY_END}\n{hidden}" + source[start:]
    assert generator.check_assembled(tampered), "a marker in the body must be refused"
    assert generator.check_assembled(source + hidden) == ["the trusted runtime footer was modified"]


@pytest.mark.parametrize(
    "tamper",
    [
        lambda s: s.replace("MAX_CONTINUATIONS = 4", "MAX_CONTINUATIONS = 40"),
        lambda s: s.replace("def _main():", "def _main():\n    import subprocess"),
        lambda s: "import subprocess\n" + s,
        lambda s: s.replace(generator.BODY_END + "\n", generator.BODY_END + "\nimport os\n", 1),
    ],
)
def test_any_byte_changed_outside_the_body_is_refused(tamper: Callable[[str], str]) -> None:
    source = agent_source(GOOD_BODY)
    changed = tamper(source)
    assert changed != source
    assert generator.check_assembled(changed) != []


def test_the_header_uses_only_the_standard_library() -> None:
    tree = ast.parse(generator.AGENT_HEADER.replace("__AGENT_NAME__", "'n'").replace(
        "__AGENT_ROLE__", "'r'"))  # fmt: skip
    imported = {
        alias.name.split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
    } | {
        node.module.split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module
    }
    assert imported <= {"base64", "json", "os", "sys", "threading", "time", "urllib", "pathlib"}


@pytest.mark.parametrize(
    "reply",
    [
        f"```python\n{GOOD_BODY}```",
        f"Here you go:\n```py\n{GOOD_BODY}```\nHope it helps.",
        GOOD_BODY,
        "from __future__ import annotations\n" + GOOD_BODY,
    ],
)
def test_assembly_accepts_fenced_and_bare_code(reply: str) -> None:
    source = generator.assemble_agent(reply, spec("summary_writer"))
    assert generator.check_assembled(source) == []
    compile(source, "agent.py", "exec")
    assert "```" not in source


@pytest.mark.parametrize(
    ("body", "complaint"),
    [
        ("def call_llm(p):\n    return p\ndef run(task, previous_outputs):\n    return task\n",
         "call_llm"),
        ("def save_artifact(n, d):\n    return n\ndef run(task, previous_outputs):\n"
         "    return task\n", "save_artifact"),
        ("def _api_key():\n    return 'x'\ndef run(task, previous_outputs):\n    return task\n",
         "_api_key"),
        ("AGENT_NAME = 'other'\ndef run(task, previous_outputs):\n    return task\n", "AGENT_NAME"),
        ("def _main():\n    pass\ndef run(task, previous_outputs):\n    return task\n", "_main"),
        ("import time as json\ndef run(task, previous_outputs):\n    return task\n", "json"),
        ("def run(task, previous_outputs):\n    return task\nif __name__ == '__main__':\n"
         "    run()\n", "__main__"),
        ("def run(task, previous_outputs)\n    return task\n", "syntax error"),
    ],
)  # fmt: skip
def test_assembly_refuses_a_body_that_replaces_the_runtime(body: str, complaint: str) -> None:
    with pytest.raises(generator.AssemblyError) as caught:
        generator.assemble_agent(body, spec("some_agent"))
    assert complaint in str(caught.value)


def test_reimporting_a_header_module_is_harmless() -> None:
    body = "import json\nimport os\ndef run(task, previous_outputs):\n    return json.dumps(task)\n"
    generator.assemble_agent(body, spec("json_agent"))


def test_a_hostile_role_cannot_inject_code() -> None:
    role = 'x"""\nimport os\nos.system("touch /tmp/pwned")\n"""\' + __import__("os").name + \''
    source = generator.assemble_agent(GOOD_BODY, spec("hostile_role", role=role))
    tree = ast.parse(source)
    assigned = {
        node.targets[0].id: ast.literal_eval(node.value)
        for node in tree.body
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name)
        and node.targets[0].id in ("AGENT_NAME", "AGENT_ROLE")
    }  # fmt: skip
    assert assigned == {"AGENT_NAME": "hostile_role", "AGENT_ROLE": " ".join(role.split())}
    assert generator.check_assembled(source) == []


def test_agent_body_round_trips() -> None:
    source = agent_source(GOOD_BODY)
    body = generator.agent_body(source)
    assert body is not None
    assert body.strip() == GOOD_BODY.strip()
    assert generator.agent_body("print('not an agent')") is None


def test_a_tampered_runtime_header_is_detected() -> None:
    source = agent_source(GOOD_BODY)
    tampered = source.replace("MAX_CONTINUATIONS = 4", "MAX_CONTINUATIONS = 4\nimport subprocess")
    assert generator.check_assembled(tampered) == ["the trusted runtime header was modified"]
    assert generator.check_assembled("print('hi')\n") == [
        "the file is not an AgentGOD agent (runtime markers missing)"
    ]


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("AGENT_NAME", "'helper'; import subprocess"),
        ("AGENT_NAME", "__import__('os').getcwd()"),
        ("AGENT_NAME", '"helper"'),  # a literal, but not what repr writes
        ("AGENT_ROLE", "'two  spaces'"),  # not the role's words joined by single spaces
        ("AGENT_ROLE", "b'bytes'"),
    ],
)
def test_a_header_line_holding_anything_but_the_written_literal_is_refused(
    field: str, value: str
) -> None:
    """The header is rebuilt from the values its own lines hold, so a statement riding on the
    name's line would rebuild into a matching header: only repr's own output is taken."""
    source = agent_source(GOOD_BODY)
    tampered = re.sub(rf"^{field} = .*$", lambda _: f"{field} = {value}", source, flags=re.M)
    assert tampered != source
    assert generator.check_assembled(tampered) == ["the trusted runtime header was modified"]


def test_check_assembled_reports_body_relative_lines() -> None:
    source = agent_source("import subprocess\ndef run(task, previous_outputs):\n    return task\n")
    [complaint] = generator.check_assembled(source)
    assert "line 1" in complaint
    assert "subprocess" in complaint


def test_an_archived_agent_finds_its_key_in_a_dotenv_up_the_tree(
    fake_api: FakeMessagesAPI, tmp_path: Path
) -> None:
    archive = tmp_path / "archive"
    (archive / "team" / "agents").mkdir(parents=True)
    (archive / ".env").write_text(
        "# saved\nANTHROPIC_API_KEY='sk-ant-archived-key-123456789'\n"
        f"ANTHROPIC_BASE_URL={fake_api.base_url}\n"
    )
    agent = archive / "team" / "agents" / "standalone.py"
    body = "def run(task, previous_outputs):\n    return call_llm(task)\n"
    agent.write_text(generator.for_library(agent_source(body)))
    env = {"PATH": os.environ["PATH"]}  # the key and the URL both come from the .env
    done = subprocess.run(
        [sys.executable, "-I", str(agent)],
        input='{"task": "hello", "previous_outputs": {}}',
        capture_output=True,
        text=True,
        env=env,
        timeout=30,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"
    assert fake_api.messages()[0].api_key == "sk-ant-archived-key-123456789"


def test_an_agent_the_pipeline_runs_has_no_road_to_a_key_or_the_network(
    fake_api: FakeMessagesAPI, tmp_path: Path
) -> None:
    """Under the broker the inlined runtime is all an agent holds: asked to call the model
    without the broker's socket, with a key in its environment and a .env beside it, it
    cannot (issue 23: the old runtime found the key itself and posted unmetered)."""
    source = agent_source("def run(task, previous_outputs):\n    return call_llm(task)\n")
    for road in ("urllib", "_api_key", "_post", "x-api-key", "ANTHROPIC_API_KEY"):
        assert road not in source, road
    assert not re.search(r"\.env\b", source)
    (tmp_path / ".env").write_text(
        f"ANTHROPIC_API_KEY=sk-ant-beside-it-123456789\nANTHROPIC_BASE_URL={fake_api.base_url}\n"
    )
    agent = tmp_path / "agent.py"
    agent.write_text(source)
    env = {"PATH": os.environ["PATH"], "ANTHROPIC_API_KEY": "sk-ant-in-its-env-123456789"}
    env["ANTHROPIC_BASE_URL"] = fake_api.base_url
    done = subprocess.run(
        [sys.executable, "-I", str(agent)],
        input='{"task": "hello", "previous_outputs": {}}',
        capture_output=True,
        text=True,
        env=env,
        timeout=30,
    )
    assert done.returncode == 1
    assert "AGENTGOD_BROKER_FD is not set" in done.stderr
    assert fake_api.messages() == []


def test_the_library_form_adds_the_standalone_road_and_the_run_form_takes_it_away() -> None:
    source = agent_source(GOOD_BODY)
    kept = generator.for_library(source)
    assert "urllib.request" in kept and "urllib" not in source
    assert generator.check_assembled(kept) == []
    assert generator.agent_body(kept) == generator.agent_body(source)
    assert generator.for_run(kept) == source
    assert generator.for_library(kept) == kept
    tampered = kept.replace("MAX_ATTEMPTS = 4", "MAX_ATTEMPTS = 40")
    assert tampered != kept
    assert generator.check_assembled(tampered) == ["the trusted runtime header was modified"]
    with pytest.raises(generator.AssemblyError, match="header was modified"):
        generator.for_run(tampered)


# ---- how an agent ends ---------------------------------------------------------------------

_LINGERING = """
import threading

def run(task, previous_outputs):
    log = open("log.txt", "w")
    log.write("written before the answer")
    sys.stderr.write("a diagnostic without a newline")
    threading.Thread(target=threading.Event().wait).start()  # never ends, never a daemon
    return "the answer"
"""


def _run_file(
    source: str, folder: Path, *, brokered: bool, stdin: str
) -> subprocess.CompletedProcess[str]:
    """Run an assembled agent as the executor would (the broker's fd when `brokered`)."""
    agent = folder / "agent.py"
    agent.write_text(source)
    ours, theirs = socket.socketpair()
    env = {"PATH": os.environ["PATH"]}
    if brokered:
        env[BROKER_FD_VARIABLE] = str(theirs.fileno())
    with ours, theirs:
        return subprocess.run(
            [sys.executable, "-X", "utf8", "-I", str(agent)],
            input=stdin,
            capture_output=True,
            text=True,
            env=env,
            cwd=folder,
            pass_fds=(theirs.fileno(),),
            timeout=60,
        )


def test_under_the_broker_an_agent_ends_with_its_answer_and_awaits_no_thread(
    tmp_path: Path,
) -> None:
    done = _run_file(agent_source(_LINGERING), tmp_path, brokered=True, stdin='{"task": "t"}')
    assert done.returncode == 0, done.stderr
    assert done.stdout == "the answer\n"
    assert done.stderr == "a diagnostic without a newline", "buffered stderr is flushed first"


def test_standalone_an_agent_still_ends_like_any_python_program(tmp_path: Path) -> None:
    body = _LINGERING.replace("threading.Event().wait", "lambda: None")  # a thread that ends
    done = _run_file(agent_source(body), tmp_path, brokered=False, stdin='{"task": "t"}')
    assert done.returncode == 0, done.stderr
    assert done.stdout == "the answer\n"
    assert (tmp_path / "log.txt").read_text() == "written before the answer", (
        "an unclosed file is flushed by the interpreter's own shutdown"
    )


@pytest.mark.parametrize(
    ("body", "stdin", "code", "expected"),
    [
        (
            "def run(task, previous_outputs):\n    raise ValueError('bad ' + task)\n",
            '{"task": "input"}',
            1,
            "ValueError: bad input",
        ),
        ("def run(task, previous_outputs):\n    return ' '\n", '{"task": "t"}', 3, "empty result"),
        ("def run(task, previous_outputs):\n    return 'x'\n", "", 2, "no input arrived"),
    ],
)
def test_under_the_broker_a_failing_agent_still_reports_why(
    tmp_path: Path, body: str, stdin: str, code: int, expected: str
) -> None:
    done = _run_file(agent_source(body), tmp_path, brokered=True, stdin=stdin)
    assert done.returncode == code
    assert expected in done.stderr
    assert done.stdout == ""


# ---- generation through the fake API ------------------------------------------------------


def _is_generation(request: Request) -> bool:
    return request.system == generator.GENERATOR_PROMPT


def test_generation_sends_the_exact_upstream_keys_and_a_cached_system_prompt(
    fake_api: FakeMessagesAPI,
) -> None:
    fake_api.queue(Reply(f"```python\n{GOOD_BODY}```"))
    usage = ledger.Usage()
    source = generator.generate_agent_code(
        spec("report_writer", role="Writes the report"),
        ["research_agent", "stats_agent"],
        usage=usage,
    )
    assert generator.check_assembled(source) == []
    [request] = fake_api.messages()
    assert _is_generation(request)
    assert request.body["system"][0]["cache_control"] == {"type": "ephemeral"}
    assert "previous_outputs keys this agent receives: 'research_agent', 'stats_agent'" in (
        request.prompt
    )
    assert "Writes the report" in request.prompt
    assert usage.totals().calls == 1


def test_codeguard_complaints_reach_the_second_generation_request(
    fake_api: FakeMessagesAPI,
) -> None:
    unsafe = (
        "import subprocess\ndef run(task, previous_outputs):\n    return subprocess.run(task)\n"
    )
    fake_api.queue(Reply(unsafe), Reply(GOOD_BODY))
    source = generator.generate_agent_code(spec("safe_agent"), [])
    body = generator.agent_body(source)
    assert body is not None
    assert "subprocess" not in body
    first, second = fake_api.messages()
    assert "REJECTED" not in first.prompt
    assert "REJECTED" in second.prompt
    assert "subprocess" in second.prompt.split("REJECTED", 1)[1]


def test_generation_gives_up_with_the_reasons_after_the_last_attempt(
    fake_api: FakeMessagesAPI, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GENERATION_ATTEMPTS", "2")
    fake_api.handler = lambda request: Reply("def run(task, previous_outputs):\n    eval(task)\n")
    with pytest.raises(generator.GenerationError) as caught:
        generator.generate_agent_code(spec("evil_agent"), [])
    assert len(fake_api.messages()) == 2
    assert any("eval" in reason for reason in caught.value.reasons)


def test_assembly_errors_are_fed_back_like_codeguard_complaints(
    fake_api: FakeMessagesAPI,
) -> None:
    fake_api.queue(Reply("def call_llm(x):\n    return x\n" + GOOD_BODY), Reply(GOOD_BODY))
    generator.generate_agent_code(spec("plain_agent"), [])
    assert "call_llm" in fake_api.messages()[1].prompt.split("REJECTED", 1)[1]


def test_repair_mode_sends_the_failing_code_and_its_stderr(fake_api: FakeMessagesAPI) -> None:
    failing = agent_source("def run(task, previous_outputs):\n    return 1 / 0\n")
    fake_api.queue(Reply(GOOD_BODY))
    generator.generate_agent_code(
        spec("fixme_agent"),
        [],
        repair=generator.Repair(failing, "Traceback...\nZeroDivisionError: division by zero"),
    )
    prompt = fake_api.messages()[0].prompt
    assert "REPAIR" in prompt
    assert "return 1 / 0" in prompt
    assert "ZeroDivisionError: division by zero" in prompt
    assert "MAX_ATTEMPTS" not in prompt, "only the model's own code goes back, not the runtime"


def test_the_generator_prompt_forbids_baking_in_the_subject() -> None:
    assert "Never hard-code the user's" in generator.GENERATOR_PROMPT
    assert "subject" in generator.GENERATOR_PROMPT


def test_codeguard_knows_exactly_what_the_runtime_imports() -> None:
    """codeguard checks the model's part alone, so it must know what the header already bound."""
    assert codeguard._RUNTIME_NAMES == generator._RUNTIME_IMPORTS


def test_the_generator_is_shown_import_names_and_never_a_refused_package(
    fake_api: FakeMessagesAPI,
) -> None:
    fake_api.queue(Reply(f"```python\n{GOOD_BODY}```"))
    generator.generate_agent_code(
        spec("parser_agent", dependencies=["pyyaml", "requests", "numpy"]), []
    )
    prompt = fake_api.messages()[0].prompt
    assert "Extra packages installed for this agent: `import requests`, `import yaml`" in prompt
    assert "numpy" not in prompt


def test_an_import_the_plan_did_not_ask_for_is_sent_back_not_saved(
    fake_api: FakeMessagesAPI,
) -> None:
    undeclared = "import requests\ndef run(task, previous_outputs):\n    return task\n"
    fake_api.queue(Reply(undeclared), Reply(GOOD_BODY))
    source = generator.generate_agent_code(spec("fetcher"), [])
    assert "import requests" not in source
    second = fake_api.messages()[1]
    assert "requests is not installed for this agent" in second.prompt
