"""The product surface through the installed `agentgod` command, against the fake API."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import (
    CONSOLE_SCRIPT,
    TEST_KEY,
    agentgod,
    agentgod_env,
    stopped_once_working,
)
from conftest import scripted_env as _env
from fakeapi import FakeMessagesAPI, Reply
from scripted import Factory, agent_spec, plan
from terminal import Terminal

from agentgod import cli, intake, sandbox

UNCONFINED = sandbox.unconfined_warning("off") or "SANDBOX=off must be warned of"
"""What every run of the tests' agentgod (SANDBOX=off) says first."""


@pytest.fixture
def factory(fake_api: FakeMessagesAPI) -> Factory:
    made = Factory(fake_api)
    made.plans = [plan(agent_spec("fact_finder"), complexity="simple")]
    return made


def test_the_console_script_beside_the_interpreter_answers(isolated_home: Path) -> None:
    if not CONSOLE_SCRIPT.is_file():
        pytest.skip(
            f"no agentgod beside {sys.executable} (`pip install -e .` puts it there); "
            "the other tests run its entry point, main:cli_main, instead"
        )
    done = subprocess.run(
        [str(CONSOLE_SCRIPT), "--version"],
        capture_output=True,
        text=True,
        timeout=60,
        env=agentgod_env(isolated_home),
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"agentgod {cli.__version__}"


def test_one_shot_prints_the_answer_on_stdout(factory: Factory, isolated_home: Path) -> None:
    done = agentgod(isolated_home, factory.api, "what", "is", "two", "plus", "two")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "MERGED: fact_finder"
    assert "fact_finder" in done.stderr, "narration goes to stderr when nobody watches stdout"
    # Said first, plainly: without walls an agent's code runs as the user (issue 23).
    assert done.stderr.index(UNCONFINED) < done.stderr.index("fact_finder")
    assert "SANDBOX=off: agents run with your own permissions" in UNCONFINED
    assert "the key in your AgentGOD home's .env included" in UNCONFINED
    assert "what is two plus two" in factory.of("plan")[0].prompt
    assert not list((isolated_home / "generated_agents").glob("*.py")), "scratch is cleaned up"


def test_dash_reads_the_task_from_stdin(factory: Factory, isolated_home: Path) -> None:
    done = agentgod(isolated_home, factory.api, "-", stdin="\ufeffsummarise\u200b the pipe\n")
    assert done.returncode == 0, done.stderr
    assert "<task>\nsummarise the pipe\n</task>" in factory.of("plan")[0].prompt


def test_piped_stdin_without_arguments_is_the_task(factory: Factory, isolated_home: Path) -> None:
    done = agentgod(isolated_home, factory.api, "--quiet", stdin="piped task\n")
    assert done.returncode == 0, done.stderr
    assert "piped task" in factory.of("plan")[0].prompt


def test_quiet_prints_only_the_answer(factory: Factory, isolated_home: Path) -> None:
    done = agentgod(isolated_home, factory.api, "-q", "a task")
    assert done.returncode == 0
    assert done.stdout == "MERGED: fact_finder\n"
    # The tests run with SANDBOX=off; quiet hides narration, never a warning.
    assert done.stderr.splitlines() == [f"[warn]     {UNCONFINED}"]


def test_json_success_has_exactly_the_contract(factory: Factory, isolated_home: Path) -> None:
    done = agentgod(isolated_home, factory.api, "--json", "--keep", "a json task")
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("\n") == 1
    data = json.loads(done.stdout)
    assert set(data) == {
        "ok", "run_id", "conversation", "task", "answer", "complexity", "agents", "failures",
        "revisions",
        "council_improved", "kept", "cost", "phases", "duration_seconds", "run_file", "sandbox",
        "budget_usd", "budget_exhausted", "warnings", "attachments", "artifacts", "retry_of",
        "carried", "fallbacks", "status", "partial",
    }  # fmt: skip
    assert data["fallbacks"] == [], "no model fell back"
    assert data["ok"] is True and data["task"] == "a json task"
    assert (data["status"], data["partial"]) == ("ok", False)
    assert data["answer"] == "MERGED: fact_finder"
    assert data["complexity"] == "simple"
    [agent] = data["agents"]
    assert set(agent) == {"name", "role", "reused", "ok", "attempts", "seconds", "usage", "usd"}
    assert agent["usage"]["llm_calls"] == 1, "the agent's one call, billed by the broker"
    assert (agent["name"], agent["reused"], agent["ok"], agent["attempts"]) == (
        "fact_finder", False, True, 1,
    )  # fmt: skip
    assert isinstance(agent["seconds"], float)
    assert data["failures"] == [] and data["revisions"] == 0
    assert data["council_improved"] is False
    assert data["kept"] == ["fact_finder"]
    assert set(data["cost"]) == {
        "llm_calls", "input_tokens", "output_tokens", "cache_write_tokens", "cache_read_tokens",
        "web_searches", "usd",
    }  # fmt: skip
    assert data["cost"]["llm_calls"] == 6, "the small-talk check is counted against the run"
    assert re.fullmatch(r"[0-9a-f]{8}", data["run_id"]) and re.fullmatch(
        r"[0-9a-f]{8}", data["conversation"]
    )
    assert isinstance(data["cost"]["usd"], float)
    phases = data["phases"]
    assert {name: p["llm_calls"] for name, p in phases.items()} == {
        "intake": 1, "plan": 1, "generate": 1, "agents": 1, "merge": 1, "judge": 1,
    }  # fmt: skip
    assert sum(p["usd"] for p in phases.values()) == pytest.approx(data["cost"]["usd"], abs=1e-5)
    assert agent["usd"] == pytest.approx(phases["agents"]["usd"], abs=1e-5)
    assert Path(data["run_file"]).exists()
    assert isinstance(data["sandbox"], list)
    assert (data["budget_usd"], data["budget_exhausted"]) == (None, False)
    assert data["warnings"] == [UNCONFINED], (
        "the tests' agentgod runs with SANDBOX=off, and says so"
    )
    assert (isolated_home / "inventory" / "agents" / "fact_finder.py").exists()
    assert (data["attachments"], data["artifacts"], data["cost"]["web_searches"]) == ([], [], 0)


def test_json_failure_and_exit_1(fake_api: FakeMessagesAPI, isolated_home: Path) -> None:
    fake_api.valid_keys = {"not-the-test-key"}
    done = agentgod(isolated_home, fake_api, "--json", "a task")
    assert done.returncode == 1
    data = json.loads(done.stdout)
    assert set(data) == {"ok", "task", "error", "run_id"}, "the run had begun: it is named"
    assert data["ok"] is False and data["task"] == "a task"
    assert set(data["error"]) == {"type", "headline", "advice", "detail"}
    assert data["error"]["type"] == "authentication"
    assert "ANTHROPIC_API_KEY" in data["error"]["advice"]
    assert TEST_KEY not in done.stdout + done.stderr
    assert "The Anthropic API rejected the key." in done.stderr


def test_json_usage_error_and_exit_2(isolated_home: Path) -> None:
    done = agentgod(isolated_home, None, "--json", "--effort", "huge", "x")
    assert done.returncode == 2
    data = json.loads(done.stdout)
    assert data["ok"] is False and data["error"]["type"] == "usage"
    assert done.stderr.splitlines()[-1].startswith("hint:")


@pytest.mark.parametrize(
    ("args", "stdin"), [(["--keep", "--discard", "x"], ""), (["-"], "  \n"), ([], "")]
)
def test_usage_errors_exit_2(isolated_home: Path, args: list[str], stdin: str) -> None:
    done = agentgod(isolated_home, None, *args, stdin=stdin)
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.startswith("agentgod: ")


def test_a_budget_too_small_for_anything_fails_before_any_call(
    fake_api: FakeMessagesAPI, isolated_home: Path
) -> None:
    done = agentgod(isolated_home, fake_api, "--json", "--budget", "0.001", "a task")
    assert done.returncode == 1
    assert json.loads(done.stdout)["error"]["type"] == "budget"
    # Only the small-talk check (cheap calls, within the budget: the fake's "ok" is no JSON, so
    # it goes down the ladder) reached the API: the plan asked for beside it could not be paid
    # for, so it never left.
    assert {r.system == intake.INTAKE_PROMPT for r in fake_api.messages()} == {True}


def test_missing_key_without_a_terminal_exits_1_with_advice(isolated_home: Path) -> None:
    done = agentgod(isolated_home, None, "a task")
    assert done.returncode == 1
    assert "No Anthropic API key is set." in done.stderr
    assert "ANTHROPIC_API_KEY" in done.stderr


def test_a_bad_setting_exits_1_and_names_it(factory: Factory, isolated_home: Path) -> None:
    done = agentgod(isolated_home, factory.api, "a task", MAX_AGENTS="lots")
    assert done.returncode == 1
    assert "MAX_AGENTS" in done.stderr


def test_verbs_work_without_a_key(factory: Factory, isolated_home: Path) -> None:
    assert agentgod(isolated_home, factory.api, "--keep", "first task").returncode == 0
    history = agentgod(isolated_home, None, "history")
    assert history.returncode == 0, history.stderr
    assert "first task" in history.stdout
    history_json = json.loads(agentgod(isolated_home, None, "--json", "history", "5").stdout)
    assert [row["task"] for row in history_json] == ["first task"]
    stats = json.loads(agentgod(isolated_home, None, "--json", "stats").stdout)
    assert (stats["runs"], stats["succeeded"]) == (1, 1)
    assert stats["tokens"]["input"] > 0
    assert "runs" in agentgod(isolated_home, None, "stats").stdout
    assert agentgod(isolated_home, None, "last").stdout.strip() == "MERGED: fact_finder"
    library = agentgod(isolated_home, None, "library")
    assert "fact_finder" in library.stdout
    assert agentgod(isolated_home, None, "forget", "fact_finder").returncode == 0
    assert "fact_finder" not in agentgod(isolated_home, None, "library").stdout
    missing = agentgod(isolated_home, None, "forget", "fact_finder")
    assert missing.returncode == 1
    assert "No agent named fact_finder." in missing.stderr


def _agent_processes(marker: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        if marker in cmdline:
            found.append(int(entry.name))
    return found


def _wait_for(condition: Callable[[], bool], what: str, seconds: float) -> None:
    """Look until `condition` holds (nothing announces it); fail after `seconds` naming `what`."""
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() >= deadline:
            raise AssertionError(f"{what}: not within {seconds:g} s")
        time.sleep(0.02)


def test_sigint_mid_run_exits_130_and_leaves_no_agent_behind(
    factory: Factory, isolated_home: Path
) -> None:
    factory.plans = [plan(agent_spec("sleeper_one"), agent_spec("sleeper_two", ["sleeper_one"]))]
    factory.bodies["sleeper_one"] = [
        "def run(task, previous_outputs):\n"
        "    call_llm('agent=sleeper_one keys=[]')\n"  # the fake API sees it start working
        "    time.sleep(120)\n"
    ]
    stopped = stopped_once_working(isolated_home, factory, "a long task")
    assert stopped.returncode == 130
    assert "Stopped." in stopped.stderr
    # Neither the running agent nor the one already started and waiting for its input is left.
    marker = str(isolated_home / "generated_agents")
    _wait_for(lambda: not _agent_processes(marker), "every agent process gone", 10)
    assert not list((isolated_home / "generated_agents").glob("*.py")), "files cleaned up"


def test_the_repl_on_a_pseudo_terminal(
    factory: Factory, isolated_home: Path, open_terminal: Callable[..., Terminal]
) -> None:
    terminal = open_terminal(_env(isolated_home, factory.api, TERM="xterm", COLUMNS="100"))
    terminal.expect("agentgod> ")
    terminal.type("hi\n")
    terminal.expect("Hello! Give me a task.")
    terminal.expect("agentgod> ")
    assert factory.of("generate") == [], "small talk builds no team (its plan went unused)"
    terminal.type("find the facts about otters\n")
    terminal.expect("MERGED: fact_finder")
    terminal.expect(r"Keep which\?")
    terminal.type("all\n")
    terminal.expect("agentgod> ")
    terminal.type("/history\n")
    terminal.expect(r"find the facts\s+about\s+otters")
    terminal.expect("agentgod> ")
    terminal.type("/library\n")
    terminal.expect("fact_finder")
    terminal.expect("agentgod> ")
    terminal.type("/cost\n")
    terminal.expect("this session")
    terminal.type("quit\n")
    assert terminal.close() == 0
    assert (isolated_home / "inventory" / "agents" / "fact_finder.py").exists()
    assert (isolated_home / ".history").exists(), "the prompt history persists"


def test_at_a_terminal_the_clarifying_question_is_asked_and_its_answer_used(
    factory: Factory, isolated_home: Path, open_terminal: Callable[..., Terminal]
) -> None:
    factory.clarifying_question = "Which language should the summary be in?"
    terminal = open_terminal(_env(isolated_home, factory.api, TERM="xterm"))
    terminal.expect("agentgod> ")
    terminal.type("summarise the otter report for the team\n")
    terminal.expect("Which language should the summary be in?")
    terminal.type("German\n")
    terminal.expect("MERGED: fact_finder")
    terminal.type("none\n")
    terminal.expect("agentgod> ")
    terminal.type("quit\n")
    assert terminal.close() == 0
    first, planned = factory.of("plan")  # the plan asked for beside the question, then again
    assert "Answer: German" not in first.prompt
    assert "Which language should the summary be in?" in planned.prompt
    assert "Answer: German" in planned.prompt
    assert all(r.arrived > planned.arrived for r in factory.of("generate")), "no agent before"


def test_no_input_at_a_terminal_asks_nothing(
    factory: Factory, isolated_home: Path, open_terminal: Callable[..., Terminal]
) -> None:
    factory.clarifying_question = "Which language?"
    env = _env(isolated_home, factory.api, TERM="xterm")
    terminal = open_terminal(env, "--no-input", "--plain", "a task")
    terminal.expect("MERGED: fact_finder")
    assert terminal.close() == 0, "it never waited for an answer"
    assert "Which language?" not in terminal.text
    assert "Keep which" not in terminal.text


def test_a_pasted_burst_of_lines_is_one_task(
    factory: Factory, isolated_home: Path, open_terminal: Callable[..., Terminal]
) -> None:
    terminal = open_terminal(_env(isolated_home, factory.api, TERM="xterm"))
    terminal.expect("agentgod> ")
    terminal.type("Summarise these notes:\n- otters hold hands\n- otters use tools\n")
    terminal.expect("MERGED: fact_finder")
    terminal.type("none\n")
    terminal.expect("agentgod> ")
    terminal.type("quit\n")
    assert terminal.close() == 0
    [planned] = factory.of("plan")
    assert "Summarise these notes:\n- otters hold hands\n- otters use tools" in planned.prompt


def test_ctrl_c_at_an_empty_prompt_exits_130(
    factory: Factory, isolated_home: Path, open_terminal: Callable[..., Terminal]
) -> None:
    terminal = open_terminal(_env(isolated_home, factory.api, TERM="xterm"))
    terminal.expect("agentgod> ")
    terminal.type("\x03")
    assert terminal.close() == 130


def test_the_repl_asks_for_a_missing_key_tests_it_and_saves_it_privately(
    fake_api: FakeMessagesAPI, isolated_home: Path, open_terminal: Callable[..., Terminal]
) -> None:
    env = _env(isolated_home, None, TERM="xterm", ANTHROPIC_BASE_URL=fake_api.base_url)
    terminal = open_terminal(env)
    terminal.expect(r"Anthropic API key \(input hidden\):")
    typed_key = "sk-ant-typed-at-the-prompt-0123456789"
    terminal.type(typed_key + "\n")
    screen = terminal.expect(r"Save it to\s+\S+\.env")
    assert typed_key not in screen, "the key is never echoed"
    assert fake_api.messages()[0].api_key == typed_key, "the key was tested with one call"
    terminal.type("y\n")
    terminal.expect("agentgod> ")
    terminal.type("quit\n")
    assert terminal.close() == 0
    env_file = isolated_home / ".env"
    assert f"ANTHROPIC_API_KEY={typed_key}" in env_file.read_text()
    assert env_file.stat().st_mode & 0o777 == 0o600


def test_warnings_reach_stderr_under_quiet_and_json_lists_them(
    factory: Factory, isolated_home: Path
) -> None:
    factory.api.route(lambda request: factory.kind(request) == "judge", Reply.error(400, "no"))
    quiet = agentgod(isolated_home, factory.api, "-q", "a task")
    assert quiet.returncode == 0, quiet.stderr
    assert "SANDBOX=off" in quiet.stderr
    assert "the judge could not rule" in quiet.stderr
    assert quiet.stdout.strip() == "MERGED: fact_finder", "quiet: only the answer on stdout"
    as_json = agentgod(isolated_home, factory.api, "--json", "a task")
    data = json.loads(as_json.stdout)
    assert data["ok"] is True
    assert data["warnings"] == [
        UNCONFINED,
        "the judge could not rule (The Anthropic API refused the request.); "
        "the answer is delivered unjudged",
    ]


def test_small_talk_in_one_shot_and_pipes_is_one_cheap_call_and_no_team(
    factory: Factory, isolated_home: Path
) -> None:
    done = agentgod(isolated_home, factory.api, "hi")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "Hello! Give me a task."
    piped = agentgod(isolated_home, factory.api, "-", "--json", stdin="hello\n")
    data = json.loads(piped.stdout)
    assert (data["ok"], data["answer"], data["complexity"], data["agents"]) == (
        True, "Hello! Give me a task.", "chat", [],
    )  # fmt: skip
    assert data["cost"]["llm_calls"] == 2, "the check, and the plan asked for beside it"
    assert sorted(factory.kind(r) for r in factory.api.messages()) == ["intake"] * 2 + ["plan"] * 2
    runs = isolated_home / "runs"
    assert not runs.exists() or not any(runs.iterdir()), "no team, no run to archive"


def test_a_library_that_cannot_keep_an_agent_never_costs_the_answer(
    factory: Factory, isolated_home: Path
) -> None:
    (isolated_home / "inventory").write_text("not a folder\n")  # the library cannot be written
    plain = agentgod(isolated_home, factory.api, "--keep", "what is two plus two")
    assert plain.returncode == 0, plain.stderr
    assert plain.stdout.startswith("MERGED: fact_finder")
    assert "fact_finder could not be kept" in plain.stderr
    as_json = agentgod(isolated_home, factory.api, "--json", "--keep", "what is two plus two")
    assert as_json.returncode == 0, as_json.stderr
    data = json.loads(as_json.stdout)
    assert (data["ok"], data["answer"], data["kept"]) == (True, "MERGED: fact_finder", [])
    assert any("fact_finder could not be kept" in w for w in data["warnings"])
    assert not list((isolated_home / "generated_agents").rglob("*.py")), "no scratch left"
