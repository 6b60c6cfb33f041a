"""The first hour, third pass (issue 31), through the real `agentgod` command.

Each test drives the product as a person or a script would — a subprocess with pipes, or a
pseudo-terminal — against the fake Messages API, and counts the requests where money is at stake:
nothing spent by mistake, nothing reported wrong, nothing mangled.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import scripted
from conftest import agentgod, agentgod_command, archived_record, stopped_once_working
from conftest import scripted_env as _env
from fakeapi import FakeMessagesAPI, Reply, Request
from scripted import Factory, agent_spec, plan
from terminal import Terminal

from agentgod import cli, crew, eventlog, planner, runlog


@pytest.fixture
def factory(fake_api: FakeMessagesAPI) -> Factory:
    made = Factory(fake_api)
    made.plans = [plan(agent_spec("fact_finder"), complexity="simple")]
    return made


def _reply(done: subprocess.CompletedProcess[str]) -> dict:
    assert done.stdout.strip(), done.stderr
    return json.loads(done.stdout)


_record = archived_record


def _nothing_spent(api: FakeMessagesAPI, home: Path) -> None:
    assert api.messages() == [], "not one request reached the API"
    runs = home / "runs"
    assert not runs.exists() or not any(runs.iterdir()), "no run was started"


# ---- 1. a key on the command line is never a task ------------------------------------------------

KEY = "sk-ant-api03-Zq0123456789abcdefghijklmnopqrstuvwxyzABCDEFGH-_0123456789AA"


@pytest.mark.parametrize("json_mode", [False, True])
def test_key_set_with_the_key_as_a_word_is_a_usage_error_that_never_echoes_it(
    fake_api: FakeMessagesAPI, isolated_home: Path, json_mode: bool
) -> None:
    flags = ["--json"] if json_mode else []
    done = agentgod(isolated_home, fake_api, *flags, "key", "set", KEY)
    assert done.returncode == cli.EXIT_USAGE, done.stderr
    assert "key set reads the key from the prompt or stdin" in done.stderr
    assert "lands in your shell history" in done.stderr
    assert KEY not in done.stdout + done.stderr
    assert "[task]" not in done.stdout + done.stderr
    if json_mode:
        reply = json.loads(done.stdout)
        assert (reply["ok"], reply["task"], reply["error"]["type"]) == (False, "", "usage")
    _nothing_spent(fake_api, isolated_home)
    assert not (isolated_home / ".env").exists()


@pytest.mark.parametrize("argv", [["key", KEY], ["key", "check", KEY], ["key", "sett"]])
def test_any_other_word_after_key_is_refused_without_echo(
    fake_api: FakeMessagesAPI, isolated_home: Path, argv: list[str]
) -> None:
    done = agentgod(isolated_home, fake_api, *argv)
    assert done.returncode == cli.EXIT_USAGE
    assert KEY not in done.stdout + done.stderr
    _nothing_spent(fake_api, isolated_home)


# ---- 2. an extra word after a verb, a verb mistyped ----------------------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        ["history", "5", "6"],
        ["show", "a", "b"],
        ["forget", "a", "b"],
        ["retry", "a", "b"],
        ["last", "x"],
        ["stats", "x", "y"],
        ["library", "x"],
        ["ui", "x"],
        ["/history", "5", "6"],
    ],
)
def test_an_extra_word_after_a_verb_is_a_usage_error_and_costs_nothing(
    fake_api: FakeMessagesAPI, isolated_home: Path, argv: list[str]
) -> None:
    done = agentgod(isolated_home, fake_api, *argv)
    assert done.returncode == cli.EXIT_USAGE, done.stdout + done.stderr
    assert "hint: to run it as a task: agentgod --task" in done.stderr
    _nothing_spent(fake_api, isolated_home)


@pytest.mark.parametrize(
    ("word", "verb"),
    [("histroy", "history"), ("History", "history"), ("Stats", "stats"), ("libary", "library"),
     ("shwo", "show"), ("UI", "ui"), ("retyr", "retry")],
)  # fmt: skip
def test_a_one_word_task_one_edit_from_a_verb_asks_did_you_mean(
    fake_api: FakeMessagesAPI, isolated_home: Path, word: str, verb: str
) -> None:
    done = agentgod(isolated_home, fake_api, word)
    assert done.returncode == cli.EXIT_USAGE
    assert f"did you mean `{verb}`?" in done.stderr
    assert f"hint: to run it as a task: agentgod --task {word}" in done.stderr
    _nothing_spent(fake_api, isolated_home)


@pytest.mark.parametrize("word", ["hi", "hey", "summarise"])
def test_a_one_word_task_far_from_any_verb_still_runs(
    factory: Factory, isolated_home: Path, word: str
) -> None:
    done = agentgod(isolated_home, factory.api, word)
    assert done.returncode == 0, done.stderr
    assert factory.api.messages(), "it went to the model"


# ---- 3. a slash command's error leaves the prompt alive ------------------------------------------


def test_a_bad_slash_command_leaves_the_prompt_and_the_session_alive(
    factory: Factory, isolated_home: Path, open_terminal: Callable[..., Terminal]
) -> None:
    env = _env(isolated_home, factory.api, TERM="xterm", COLUMNS="100")
    terminal = open_terminal(env, "--discard")
    terminal.expect("agentgod> ")
    terminal.type("find the facts about otters\n")
    terminal.expect("MERGED: fact_finder")
    for line, shown in [
        ("/show ab", r"/show: show takes a run id such as 3f9a2b1c"),
        ("/show a b", r"/show: show takes at most one run id, got 2 words"),
        ("/show zzzz", r"show takes a run id"),
        ("/show abcd", r"There is no run abcd"),
        ("/forget a b", r"/forget: forget takes the NAME of one library agent"),
        ("/forget", r"/forget: forget needs the NAME"),
        ("/history 5 6", r"/history takes a positive whole number of runs"),
        ("histroy", r"did you mean /history\?"),
        ("/cost", r"this session:? +\d+ calls"),
    ]:
        terminal.expect("agentgod> ")
        terminal.type(line + "\n")
        terminal.expect(shown)
    calls = len(factory.api.messages())
    terminal.expect("agentgod> ")
    terminal.type("quit\n")
    assert terminal.close() == 0
    assert len(factory.api.messages()) == calls, "no command became a task"


# ---- 4 and 6. a run the budget stopped is reported as stopped ----------------------------------

GREEDY = (
    "def run(task, previous_outputs):\n"
    "    return call_llm(f'agent={AGENT_NAME}', max_tokens=16000)\n"
)


def _greedy(factory: Factory, *names: str) -> None:
    """Agents whose model uses every token it is allowed: each run costs its whole share."""

    def writes(name: str) -> Callable[[Request], bool]:
        return lambda request: f"Agent name: {name}\n" in request.prompt

    for name in names:
        factory.api.route(writes(name), Reply(GREEDY, latency=0.3))

    def expensive(name: str, request: Request) -> Reply:
        usage = {"input_tokens": 5, "output_tokens": request.body["max_tokens"]}
        return Reply(f"result from {name}", usage=usage)

    factory.agent_reply = expensive


def test_a_run_the_budget_stopped_partway_is_not_ok_and_names_retry(
    factory: Factory, isolated_home: Path
) -> None:
    factory.plans = [plan(agent_spec("first_wave"), agent_spec("second_wave", ["first_wave"]))]
    _greedy(factory, "first_wave")
    done = agentgod(isolated_home, factory.api, "--json", "--budget", "0.15", "survey the otters")
    assert done.returncode == cli.EXIT_FAILED, done.stderr
    reply = _reply(done)
    run_id = reply["run_id"]
    assert (reply["ok"], reply["status"], reply["partial"]) == (False, "budget", True)
    assert "result from first_wave" in reply["answer"], "what was paid for is still given"
    assert reply["error"]["type"] == "budget"
    assert reply["error"]["budget_of"] == "run", "its own --budget stopped it, no batch's"
    assert reply["error"]["headline"].startswith("The budget stopped the run before it finished")
    assert "1 of 2 agents had no budget left to run" in reply["error"]["headline"]
    assert f"`agentgod retry {run_id}`" in reply["error"]["advice"]
    [row] = _reply(agentgod(isolated_home, None, "--json", "history"))
    assert (row["run_id"], row["status"], row["ok"]) == (run_id, "budget", False)
    shown = _reply(agentgod(isolated_home, None, "--json", "show", run_id))
    assert (shown["status"], shown["ok"]) == ("budget", False)
    plain = agentgod(isolated_home, factory.api, "--budget", "0.15", "survey the seals")
    assert plain.returncode == cli.EXIT_FAILED
    assert "result from first_wave" in plain.stdout
    assert "The budget stopped the run before it finished" in plain.stderr
    assert "agentgod retry " in plain.stderr


def test_a_budget_stop_at_any_point_ends_as_a_budget_stop_naming_the_run(
    factory: Factory, isolated_home: Path
) -> None:
    factory.plans = [
        plan(agent_spec("part_a"), agent_spec("part_b"), agent_spec("joiner", ["part_a", "part_b"]))
    ]
    _greedy(factory, "part_a", "part_b", "joiner")
    endings = set()
    for budget in ("0.001", "0.03", "0.12", "0.45", "5"):
        done = agentgod(
            isolated_home, factory.api, "--json", "--budget", budget, "survey the otters"
        )
        assert "went wrong" not in done.stderr and "Traceback" not in done.stderr, done.stderr
        reply = _reply(done)
        if done.returncode == 0:
            assert (reply["ok"], reply["status"], reply["budget_exhausted"]) == (True, "ok", False)
            endings.add("ok")
            continue
        assert done.returncode == cli.EXIT_FAILED, done.stderr
        assert reply["ok"] is False and reply["error"]["type"] == "budget", reply
        assert reply["error"]["budget_of"] == "run", reply["error"]
        run_id = reply["run_id"]
        assert run_id in reply["error"]["advice"], "a budget stop names the run"
        if "answer" in reply and reply.get("status") == "budget":
            assert reply["partial"] is True
            endings.add("partial")
        else:
            endings.add("no answer")
        [row] = [
            r
            for r in _reply(agentgod(isolated_home, None, "--json", "history", "50"))
            if r["run_id"] == run_id
        ]
        assert row["status"] == "budget"
    assert endings == {"ok", "partial", "no answer"}, endings


def test_an_agent_the_budget_skipped_is_never_started_after_its_inputs_are_done() -> None:
    """The `_Ran` crash: a skipped agent whose code existed was started once its upstream
    finished, and its result, arriving after the round was over, was taken for a build's."""
    first = planner.AgentSpec.model_validate(agent_spec("first_wave"))
    second = planner.AgentSpec.model_validate(agent_spec("second_wave", ["first_wave"]))
    schedule = crew._Schedule([first, second])
    schedule.code = {"first_wave": Path("first.py"), "second_wave": Path("second.py")}
    schedule.start("first_wave")
    for skipped in schedule.unstarted():  # the budget ran out while first_wave ran
        schedule.finish(skipped.name)
    schedule.finish("first_wave")
    assert schedule.done()
    assert schedule.ready() == []


# ---- 5. a task too large to send into every call -----------------------------------------------


def test_a_huge_task_on_stdin_is_refused_before_any_spend_with_its_size_and_cost(
    fake_api: FakeMessagesAPI, isolated_home: Path
) -> None:
    task = (
        "Summarise the log below.\n"
        + "2026-12-01 12:00:00 INFO request served in 12 ms\n" * 200_000
    )
    done = agentgod(isolated_home, fake_api, "--json", "-", stdin=task)
    assert done.returncode == cli.EXIT_FAILED, done.stderr
    reply = _reply(done)
    assert reply["error"]["type"] == "task_too_large"
    headline = reply["error"]["headline"]
    assert headline.startswith("The task is 9.3 MB (about 2,800,006 tokens)")
    assert "at least 4 calls" in headline and "of input at list prices" in headline
    assert (
        "@notes.txt" in reply["error"]["advice"] and "Nothing was spent" in reply["error"]["advice"]
    )
    assert len(done.stdout) < 2000, "the task is not echoed whole"
    _nothing_spent(fake_api, isolated_home)
    plain = agentgod(isolated_home, fake_api, "-", stdin=task)
    assert plain.returncode == cli.EXIT_FAILED
    assert "attach it instead" in plain.stderr
    _nothing_spent(fake_api, isolated_home)


@pytest.mark.parametrize("send", [False, True])
def test_a_large_task_at_a_terminal_asks_first(
    factory: Factory, isolated_home: Path, open_terminal: Callable[..., Terminal], send: bool
) -> None:
    task = "Summarise these notes: " + "the otters ate fish by the river. " * 2_000
    env = _env(isolated_home, factory.api, TERM="xterm", COLUMNS="100")
    terminal = open_terminal(env, "--plain", "--discard", task)
    terminal.expect(r"The task is 66 kB \(about 19,\d{3} tokens\)")
    terminal.expect(r"Send it as the task anyway\? \[y/N\]")
    assert factory.api.messages() == [], "nothing is sent before the answer"
    terminal.type("y\n" if send else "\n")
    code = terminal.close()
    if send:
        assert code == 0
        assert factory.of("plan"), "sent as asked"
    else:
        assert code == cli.EXIT_FAILED
        _nothing_spent(factory.api, isolated_home)


# ---- 9. attachments: quoted names, a lost quote, password files, JSON --------------------------


def test_tab_completion_quotes_a_name_with_spaces(
    factory: Factory, isolated_home: Path, tmp_path: Path, open_terminal: Callable[..., Terminal]
) -> None:
    folder = tmp_path / "data"
    folder.mkdir()
    (folder / "my sales.csv").write_text("region,amount\nnorth,3\n")
    env = _env(isolated_home, factory.api, TERM="xterm", COLUMNS="160")
    terminal = open_terminal(env, "--plain", "--discard")
    terminal.expect("agentgod> ")
    terminal.type(f"total the amounts in @{folder}/my\t")
    terminal.type(" by region\n")
    terminal.expect(r"\[file\]\s+my sales\.csv")
    terminal.expect("MERGED: fact_finder")
    terminal.expect("agentgod> ")
    terminal.type("quit\n")
    assert terminal.close() == 0
    assert "my sales.csv" in factory.of("plan")[0].prompt, "attached, not refused"


@pytest.mark.parametrize("task", ["total @my sales.csv by region", "total @my sales.csv."])
def test_an_unquoted_name_with_spaces_is_refused_before_any_spend(
    fake_api: FakeMessagesAPI, isolated_home: Path, tmp_path: Path, task: str
) -> None:
    (tmp_path / "my sales.csv").write_text("region,amount\nnorth,3\n")
    done = agentgod(isolated_home, fake_api, "--json", task, cwd=tmp_path)
    assert done.returncode == cli.EXIT_FAILED, done.stderr
    error = _reply(done)["error"]
    assert error["type"] == "attachment"
    assert (
        "'my sales.csv' is one: the quotes around a name with spaces were lost"
        in (error["headline"])
    )
    assert """'@"my sales.csv"'""" in error["advice"]
    _nothing_spent(fake_api, isolated_home)
    handle = agentgod(isolated_home, fake_api, "--json", "ask @someone about sales", cwd=tmp_path)
    assert "quotes" not in handle.stdout, "an @handle followed by other words is left alone"
    assert fake_api.messages(), "and the task goes on"


@pytest.mark.parametrize("secret", ["/etc/shadow", "/etc/gshadow"])
def test_shadow_password_files_are_secrets(
    fake_api: FakeMessagesAPI, isolated_home: Path, secret: str
) -> None:
    if not Path(secret).exists():
        pytest.skip(f"{secret} is not on this machine")
    done = agentgod(isolated_home, fake_api, "--json", f"summarise @{secret}")
    assert done.returncode == cli.EXIT_FAILED
    error = _reply(done)["error"]
    assert error["type"] == "attachment"
    assert "it looks like a secret (a shadow password file)" in error["headline"]
    _nothing_spent(fake_api, isolated_home)


def test_a_json_file_is_typed_json_and_a_broken_one_text(
    factory: Factory, isolated_home: Path, tmp_path: Path
) -> None:
    (tmp_path / "data.json").write_text('{"north": 3, "south": 4}\n')
    (tmp_path / "broken.json").write_text("{north: 3\n")
    done = agentgod(
        isolated_home, factory.api, "--json", "--plain", "sum @data.json and @broken.json",
        cwd=tmp_path,
    )  # fmt: skip
    reply = _reply(done)
    assert [(a["name"], a["kind"]) for a in reply["attachments"]] == [
        ("data.json", "json"),
        ("broken.json", "text"),
    ]
    planned = factory.of("plan")[0].prompt
    assert "data.json — 25 B, JSON (application/json)" in planned
    assert "broken.json — 10 B, text (text/plain)" in planned


# ---- 10. the key's source, --help, completion of values ----------------------------------------

GOOD_KEY = "sk-ant-good-key-0123456789abcdef"
OTHER_KEY = "sk-ant-other-key-0123456789abcdef"


def _key(
    home: Path, api: FakeMessagesAPI, *args: str, stdin: str = "", **env: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*agentgod_command(), *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
        env=_env(home, None, ANTHROPIC_BASE_URL=api.base_url, **env),
    )


def test_key_set_under_an_exported_key_names_the_variable_that_wins(
    fake_api: FakeMessagesAPI, isolated_home: Path
) -> None:
    fake_api.valid_keys = {GOOD_KEY, OTHER_KEY}
    done = _key(
        isolated_home, fake_api, "--json", "key", "set", stdin=GOOD_KEY + "\n",
        ANTHROPIC_API_KEY=OTHER_KEY,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "ANTHROPIC_API_KEY is set in your environment and wins over" in done.stderr
    assert "unset ANTHROPIC_API_KEY" in done.stderr
    reply = json.loads(done.stdout)
    assert reply["source"] == "ANTHROPIC_API_KEY in your environment (not the key saved)"
    assert reply["warnings"] and GOOD_KEY not in done.stdout + done.stderr
    assert f"ANTHROPIC_API_KEY={GOOD_KEY}" in (isolated_home / ".env").read_text()
    check = _key(isolated_home, fake_api, "key", "check", ANTHROPIC_API_KEY=OTHER_KEY)
    assert check.returncode == 0
    assert "The key works (from ANTHROPIC_API_KEY in your environment)." in check.stderr
    from_file = _key(isolated_home, fake_api, "key", "check")
    assert f"The key works (from {isolated_home / '.env'})." in from_file.stderr


def test_key_check_with_a_rejected_exported_key_advises_the_variable_not_key_set(
    fake_api: FakeMessagesAPI, isolated_home: Path
) -> None:
    fake_api.valid_keys = {GOOD_KEY}
    done = _key(isolated_home, fake_api, "--json", "key", "check", ANTHROPIC_API_KEY=OTHER_KEY)
    assert done.returncode == cli.EXIT_FAILED
    error = json.loads(done.stdout)["error"]
    assert error["type"] == "authentication"
    assert error["advice"].startswith("The key comes from ANTHROPIC_API_KEY in your environment")
    assert "unset ANTHROPIC_API_KEY" in error["advice"]
    assert OTHER_KEY not in done.stdout + done.stderr


def test_help_lists_key_set_and_check(isolated_home: Path) -> None:
    done = agentgod(isolated_home, None, "--help")
    assert done.returncode == 0
    assert "key set|check" in " ".join(done.stdout.split())


def _bash_completes(home: Path, tmp_path: Path, *words: str) -> list[str]:
    """What bash offers for the last of `words`, with agentgod's completion script loaded."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    wrapper = bin_dir / "agentgod"
    wrapper.write_text(f'#!/bin/sh\nexec {" ".join(agentgod_command())} "$@"\n')
    wrapper.chmod(0o755)
    script = cli.completion_script("bash") + (
        f"COMP_WORDS=({' '.join(shlex.quote(w) for w in words)})\n"
        f"COMP_CWORD={len(words) - 1}\n"
        '_agentgod\nprintf "%s\\n" "${COMPREPLY[@]}"\n'
    )
    env = _env(home, None)
    env["PATH"] = f"{bin_dir}:{env['PATH']}"
    done = subprocess.run(
        ["bash", "-c", script], capture_output=True, text=True, timeout=60, env=env
    )
    assert done.returncode == 0, done.stderr
    return [line for line in done.stdout.splitlines() if line]


@pytest.mark.skipif(shutil.which("bash") is None, reason="bash completes only where bash is")
def test_bash_completion_offers_values_run_ids_and_agent_names(
    factory: Factory, isolated_home: Path, tmp_path: Path
) -> None:
    reply = _reply(agentgod(isolated_home, factory.api, "--json", "--keep", "count the otters"))
    run_id = reply["run_id"]
    assert _bash_completes(isolated_home, tmp_path, "agentgod", "--effort", "") == [
        "low", "medium", "high", "xhigh", "max",
    ]  # fmt: skip
    assert _bash_completes(isolated_home, tmp_path, "agentgod", "--council", "a") == [
        "auto",
        "always",
    ]
    assert _bash_completes(isolated_home, tmp_path, "agentgod", "key", "") == ["set", "check"]
    assert _bash_completes(isolated_home, tmp_path, "agentgod", "show", "") == [run_id]
    assert _bash_completes(isolated_home, tmp_path, "agentgod", "retry", run_id[:2]) == [run_id]
    assert _bash_completes(isolated_home, tmp_path, "agentgod", "--resume", "") == [run_id]
    assert _bash_completes(isolated_home, tmp_path, "agentgod", "forget", "") == ["fact_finder"]
    assert _bash_completes(isolated_home, tmp_path, "agentgod", "show", run_id, "--code", "") == [
        "fact_finder"
    ]
    assert "--full" in _bash_completes(isolated_home, tmp_path, "agentgod", "--fu")


# ---- 11. a plan over MAX_AGENTS keeps its combiner, and says so beside the answer ---------------


@pytest.mark.parametrize("plain", [False, True])
def test_a_trimmed_plan_keeps_the_agent_that_combines_and_shows_the_trim_by_the_answer(
    factory: Factory, isolated_home: Path, open_terminal: Callable[..., Terminal], plain: bool
) -> None:
    researchers = [agent_spec(f"research_{n}") for n in "abcde"]
    writer = agent_spec("writer", [f"research_{n}" for n in "abcde"])
    factory.plans = [plan(*researchers, writer)]
    env = _env(isolated_home, factory.api, TERM="xterm", COLUMNS="120", MAX_AGENTS="4")
    terminal = open_terminal(env, *(["--plain"] if plain else []), "--discard", "survey otters")
    terminal.expect("MERGED: ")
    terminal.expect(r"left out: research_d, research_e")
    assert terminal.close() == 0
    ran = {request.prompt.split("agent=")[1].split()[0] for request in factory.of("agent")}
    assert ran == {"research_a", "research_b", "research_c", "writer"}
    assert len(factory.of("plan")) == 1, "trimmed, not planned again"
    answer_at = terminal.text.rindex("MERGED: ")
    assert terminal.text.rindex("left out: research_d, research_e") > answer_at


# ---- 12. a partly failed run, its retry, and the history ---------------------------------------

RAISING = "def run(task, previous_outputs):\n    raise ValueError('the data is not there')\n"


def test_a_partly_failed_run_points_to_retry_and_the_retry_shows_what_it_carried(
    factory: Factory, isolated_home: Path, open_terminal: Callable[..., Terminal]
) -> None:
    factory.plans = [plan(agent_spec("fact_finder"), agent_spec("flaky_fetcher"))]
    factory.bodies = {"flaky_fetcher": [RAISING, scripted.ECHO_BODY]}
    first = agentgod(
        isolated_home, factory.api, "--plain", "find the facts", AGENT_REPAIR_ATTEMPTS="0"
    )
    assert first.returncode == 0, first.stderr
    [run_id] = re.findall(r"run ([0-9a-f]{8}) \(agentgod show", first.stdout + first.stderr)
    assert f"agentgod retry {run_id} reruns the 1 failed agent" in first.stdout + first.stderr
    retried = agentgod(isolated_home, factory.api, "--plain", "retry", run_id)
    assert retried.returncode == 0, retried.stderr
    shown = retried.stdout + retried.stderr
    assert re.search(r"fact_finder\s+waiting\s+wave 1, carried from the run retried", shown)
    assert "from the library" not in shown
    assert re.search(rf"\[run\]\s+fact_finder\s+carried from run {run_id}", shown)
    assert f"retry of {run_id}" in shown
    runs = _reply(agentgod(isolated_home, None, "--json", "history"))
    assert [row["retry_of"] for row in runs] == [run_id, None]
    env = _env(isolated_home, None, TERM="xterm", COLUMNS="80")
    for flags in ([], ["--plain"]):
        terminal = open_terminal(env, *flags, "history")
        terminal.expect(rf"↻ {run_id} find")
        assert terminal.close() == 0


# ---- 13. history at 80 columns, the time waited, the code, stdin at a terminal -----------------


@pytest.mark.parametrize("columns", [80, 160])
@pytest.mark.parametrize("plain", [False, True])
def test_history_is_one_line_per_run_at_any_width(
    isolated_home: Path, open_terminal: Callable[..., Terminal], columns: int, plain: bool
) -> None:
    tasks = [
        "Compare SQLite and DuckDB for a five gigabyte analytics side project and pick one " * 2,
        "count the otters",
        "x" * 300,
    ]
    for task in tasks:
        runlog.archive(_record(task))
    env = _env(isolated_home, None, TERM="xterm", COLUMNS=str(columns))
    terminal = open_terminal(env, *(["--plain"] if plain else []), "history")
    terminal.expect("count the otters")
    assert terminal.close() == 0
    lines = [line for line in terminal.text.splitlines() if re.match(r"\s*[0-9a-f]{8}\s", line)]
    assert len(lines) == len(tasks), terminal.text
    assert all(len(line.rstrip()) <= columns for line in lines), lines
    assert all("…" in line or "count the otters" in line for line in lines)


def test_the_duration_counts_what_the_person_waited(factory: Factory, isolated_home: Path) -> None:
    began = time.monotonic()
    done = agentgod(isolated_home, factory.api, "--json", "count the otters in the river")
    waited = time.monotonic() - began
    reply = _reply(done)
    assert reply["duration_seconds"] >= 0.6 * waited, (reply["duration_seconds"], waited)
    [row] = _reply(agentgod(isolated_home, None, "--json", "history"))
    assert row["duration_seconds"] == pytest.approx(reply["duration_seconds"], abs=0.01)


def test_show_code_is_the_model_s_code_and_full_the_whole_file(
    factory: Factory, isolated_home: Path
) -> None:
    reply = _reply(agentgod(isolated_home, factory.api, "--json", "count the otters"))
    run_id = reply["run_id"]
    code = agentgod(isolated_home, None, "show", run_id, "--code", "fact_finder")
    assert code.returncode == 0, code.stderr
    assert code.stdout.strip() == scripted.ECHO_BODY.strip(), "what the model wrote, no more"
    whole = agentgod(isolated_home, None, "show", run_id, "--code", "fact_finder", "--full")
    assert whole.returncode == 0, whole.stderr
    assert scripted.ECHO_BODY.strip() in whole.stdout and "def call_llm(" in whole.stdout
    exact = _reply(agentgod(isolated_home, None, "--json", "show", run_id, "--code", "fact_finder"))
    assert exact["source"] == whole.stdout, "--json keeps the whole source, exactly"
    shown = _reply(agentgod(isolated_home, None, "--json", "show", run_id))
    assert shown["agents"][0]["source"] == exact["source"]
    wrong = agentgod(isolated_home, None, "show", run_id, "--full")
    assert wrong.returncode == cli.EXIT_USAGE and "--full belongs to" in wrong.stderr


def test_stdin_at_a_terminal_says_it_is_reading_it(
    factory: Factory, isolated_home: Path, open_terminal: Callable[..., Terminal]
) -> None:
    env = _env(isolated_home, factory.api, TERM="xterm", COLUMNS="100")
    terminal = open_terminal(env, "--plain", "--discard", "-")
    terminal.expect(r"reading the task from stdin: type or paste it, then press Ctrl-D")
    assert factory.api.messages() == []
    terminal.type("count the otters\n")
    terminal.type("\x04")
    terminal.expect("MERGED: fact_finder")
    assert terminal.close() == 0
    assert "count the otters" in factory.of("plan")[0].prompt


# ---- 14. the model's setting, code as written, a path whole, kept in plan order -----------------


@pytest.mark.parametrize(
    ("missing", "setting", "suggested"),
    [
        ("claude-haiku-5-5", "FAST_MODEL", "claude-sonnet-5-5"),
        ("claude-nope-1", "FAST_MODEL", "claude-haiku-5-5"),
    ],
)
def test_a_fast_model_not_found_names_its_setting_and_another_model(
    fake_api: FakeMessagesAPI, isolated_home: Path, missing: str, setting: str, suggested: str
) -> None:
    def not_found(request: Request) -> Reply:
        if request.body["model"] == missing:
            return Reply.error(404, f"model: {missing}")
        return Reply("OK")

    fake_api.handler = not_found
    done = agentgod(isolated_home, fake_api, "--json", "key", "check", FAST_MODEL=missing)
    assert done.returncode == cli.EXIT_FAILED
    error = _reply(done)["error"]
    assert error["headline"] == f"The model {missing} was not found."
    assert f"with the {setting} setting (for example {suggested})" in error["advice"]
    assert missing not in error["advice"] and "--model" not in error["advice"]


def test_unfenced_code_keeps_its_indentation_relative_to_itself(
    factory: Factory, isolated_home: Path, open_terminal: Callable[..., Terminal]
) -> None:
    factory.merge_reply = lambda request: (
        "Here is the function:\n\n  def total(rows):\n      return sum(rows)\n\nThat is all."
    )
    env = _env(isolated_home, factory.api, TERM="xterm", COLUMNS="100")
    terminal = open_terminal(env, "--discard", "add the rows")
    terminal.expect("That is all")
    assert terminal.close() == 0
    # The answer as it was drawn last (the live display drew it as it was written, too).
    top = [line for line in terminal.text.splitlines() if "def total(rows):" in line][-1]
    body = [line for line in terminal.text.splitlines() if "return sum(rows)" in line][-1]
    assert body.index("return") - top.index("def") == 4, (top, body)


def test_a_long_path_is_never_broken_by_the_display(
    factory: Factory, isolated_home: Path, tmp_path: Path, open_terminal: Callable[..., Terminal]
) -> None:
    home = tmp_path / ("a-rather-long-folder-name-for-the-agentgod-home-" * 3)
    env = _env(isolated_home, factory.api, TERM="xterm", COLUMNS="80", AGENTGOD_HOME=str(home))
    terminal = open_terminal(env, "--discard", "count the otters")
    terminal.expect("MERGED: fact_finder")
    assert terminal.close() == 0
    [run_file] = (home / "runs").glob("*.md")
    assert str(run_file) in terminal.text, "the run file's path on one line, whole"


def test_kept_agents_are_listed_in_plan_order(factory: Factory, isolated_home: Path) -> None:
    both = plan(agent_spec("slow_first"), agent_spec("quick_second"), complexity="simple")
    factory.plans = [{**both, "independent": True}]
    factory.api.route(  # written last, so it finishes last
        lambda request: "Agent name: slow_first\n" in request.prompt,
        Reply(scripted.ECHO_BODY, latency=0.8),
    )
    reply = _reply(agentgod(isolated_home, factory.api, "--json", "--keep", "survey the otters"))
    assert reply["kept"] == ["slow_first", "quick_second"]


# ---- 7. a closed pipe, bytes that are no text, a folder that cannot be written -------------------


def _with_stdout_closed(home: Path, api: FakeMessagesAPI | None, *args: str) -> tuple[int, str]:
    """Run agentgod with its stdout's reader gone before it writes a byte (`| head -0`)."""
    process = subprocess.Popen(
        [*agentgod_command(), *args],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=_env(home, api),
    )
    assert process.stdout is not None and process.stderr is not None
    process.stdout.close()  # long before the interpreter has started
    error = process.stderr.read().decode()
    return process.wait(timeout=120), error


@pytest.mark.parametrize("json_mode", [False, True])
def test_a_closed_pipe_is_silence_for_the_verbs_and_after_a_run(
    factory: Factory, isolated_home: Path, json_mode: bool
) -> None:
    flags = ["--json"] if json_mode else []
    ran = agentgod(isolated_home, factory.api, "count the otters")
    assert ran.returncode == 0, ran.stderr
    for argv in (["history"], ["show"], ["last"], ["stats"], ["library"], ["count the seals"]):
        code, error = _with_stdout_closed(isolated_home, factory.api, *flags, *argv)
        assert code in (0, cli.EXIT_PIPE), (argv, error)
        assert "went wrong" not in error and "BrokenPipe" not in error and "[error]" not in error
    runs = _reply(agentgod(isolated_home, None, "--json", "history"))
    assert [(row["task"], row["status"]) for row in runs] == [
        ("count the seals", "ok"),
        ("count the otters", "ok"),
    ], "the run whose answer met a closed pipe is recorded whole"


def test_bytes_on_stdin_that_are_no_utf8_are_named_as_such(
    fake_api: FakeMessagesAPI, isolated_home: Path
) -> None:
    done = subprocess.run(
        [*agentgod_command(), "-"],
        input=b"summarise \xff\xfe this",
        capture_output=True,
        timeout=120,
        env=_env(isolated_home, fake_api),
    )
    error = done.stderr.decode()
    assert done.returncode == cli.EXIT_USAGE, error
    assert "the task read from stdin is not UTF-8 text (byte 0xff at offset 10)" in error
    assert "went wrong" not in error
    _nothing_spent(fake_api, isolated_home)


def test_a_runs_folder_that_cannot_be_written_is_found_before_any_spend(
    fake_api: FakeMessagesAPI, isolated_home: Path
) -> None:
    (isolated_home / "runs").write_text("not a folder")
    done = agentgod(isolated_home, fake_api, "--json", "count the otters")
    assert done.returncode == cli.EXIT_FAILED
    reply = _reply(done)
    assert reply["error"]["type"] == "home"
    assert (
        reply["error"]["headline"] == f"AgentGOD cannot keep its files in {isolated_home / 'runs'}."
    )
    assert fake_api.messages() == []


@pytest.mark.parametrize("where", ["/proc/agentgod-out", "a-file/inside"])
def test_an_out_folder_that_cannot_be_written_is_found_before_any_spend(
    fake_api: FakeMessagesAPI, isolated_home: Path, tmp_path: Path, where: str
) -> None:
    (tmp_path / "a-file").write_text("a file")
    out = where if where.startswith("/") else str(tmp_path / where)
    done = agentgod(isolated_home, fake_api, "--out", out, "count the otters")
    assert done.returncode == cli.EXIT_USAGE, done.stderr
    assert f"--out {out}:" in done.stderr
    _nothing_spent(fake_api, isolated_home)


# ---- 8. redaction never mangles ordinary text ----------------------------------------------------

ORDINARY = "ask-me-anything-2024-edition and disk-usage-report-for-the-team"


def test_ordinary_words_reach_every_record_and_the_follow_up_unmangled(
    factory: Factory, isolated_home: Path
) -> None:
    factory.merge_reply = lambda request: f"The answer on {ORDINARY}."
    task = f"summarise {ORDINARY}"
    reply = _reply(agentgod(isolated_home, factory.api, "--json", task))
    assert reply["ok"] and reply["task"] == task
    run_id = reply["run_id"]
    [row] = _reply(agentgod(isolated_home, None, "--json", "history"))
    assert row["task"] == task
    run_file = Path(reply["run_file"]).read_text(encoding="utf-8")
    assert run_file.count(ORDINARY) >= 2, "the task and the answer"
    logged = eventlog.run_log(isolated_home / "runs", run_id).read_text(encoding="utf-8")
    assert ORDINARY in logged and "[redacted]" not in logged
    last = _reply(agentgod(isolated_home, None, "--json", "last"))
    assert last["answer"] == f"The answer on {ORDINARY}."
    followed = agentgod(isolated_home, factory.api, "--json", "--continue", "now in French")
    assert followed.returncode == 0, followed.stderr
    planned = factory.of("plan")[-1].prompt
    assert task in planned and f"The answer on {ORDINARY}." in planned
    assert "[redacted]" not in planned


# ---- 15. the rest of the walkthrough's findings -------------------------------------------------


def test_a_stop_says_stopped_without_a_stray_detail_line(
    factory: Factory, isolated_home: Path
) -> None:
    done = stopped_once_working(isolated_home, factory, "--plain", "count the otters")
    assert done.returncode == cli.EXIT_INTERRUPTED
    assert "Stopped." in done.stderr
    assert "detail: interrupted" not in done.stderr


def test_ctrl_d_at_the_prompt_ends_its_line(
    factory: Factory, isolated_home: Path, open_terminal: Callable[..., Terminal]
) -> None:
    terminal = open_terminal(_env(isolated_home, factory.api, TERM="xterm"), "--plain")
    terminal.expect("agentgod> ")
    terminal.type("\x04")
    assert terminal.close() == 0
    assert terminal.text.endswith("agentgod> \n"), repr(terminal.text[-40:])


def test_an_empty_key_at_the_first_prompt_is_not_told_to_go_back_to_it(
    fake_api: FakeMessagesAPI, isolated_home: Path, open_terminal: Callable[..., Terminal]
) -> None:
    env = _env(isolated_home, None, TERM="xterm", ANTHROPIC_BASE_URL=fake_api.base_url)
    terminal = open_terminal(env, "--plain")
    terminal.expect(r"Anthropic API key \(input hidden\):")
    terminal.type("\n")
    terminal.expect("No Anthropic API key was entered.")
    assert terminal.close() == cli.EXIT_FAILED
    assert "asks for it" not in terminal.text


def test_key_set_with_a_rejected_key_speaks_of_the_key_given(
    fake_api: FakeMessagesAPI, isolated_home: Path
) -> None:
    fake_api.valid_keys = {GOOD_KEY}
    done = _key(isolated_home, fake_api, "key", "set", stdin=OTHER_KEY + "\n")
    assert done.returncode == cli.EXIT_FAILED
    assert "The key given may be mistyped" in done.stderr and "nothing was saved" in done.stderr
    assert "Check ANTHROPIC_API_KEY" not in done.stderr


def test_the_prompt_s_advice_names_its_own_commands(
    factory: Factory, isolated_home: Path, open_terminal: Callable[..., Terminal]
) -> None:
    terminal = open_terminal(_env(isolated_home, factory.api, TERM="xterm"), "--plain")
    terminal.expect("agentgod> ")
    terminal.type("/forget no_such_agent\n")
    terminal.expect("No agent named no_such_agent.")
    terminal.expect("/library lists them")
    terminal.expect("agentgod> ")
    terminal.type("quit\n")
    assert terminal.close() == 0
    assert "agentgod library" not in terminal.text


def test_show_json_has_outputs_only_for_work_that_reached_no_answer(
    factory: Factory, isolated_home: Path
) -> None:
    run_id = _reply(agentgod(isolated_home, factory.api, "--json", "count the otters"))["run_id"]
    shown = _reply(agentgod(isolated_home, None, "--json", "show", run_id))
    assert "outputs" not in shown
    assert shown["agents"][0]["output"]


def test_a_rebuilt_history_says_the_outputs_are_not_in_it(
    factory: Factory, isolated_home: Path
) -> None:
    assert agentgod(isolated_home, factory.api, "count the otters").returncode == 0
    database = isolated_home / "runs" / "history.db"
    for companion in database.parent.glob("history.db-*"):
        companion.unlink()
    database.write_bytes(b"this is no database\n" * 200)
    shown = agentgod(isolated_home, None, "--plain", "show")
    assert shown.returncode == 0, shown.stderr
    assert "| (not in this record)" in shown.stdout
    assert "(nothing)" not in shown.stdout


def test_a_run_file_s_name_keeps_no_escape_remnants(factory: Factory, isolated_home: Path) -> None:
    done = agentgod(isolated_home, factory.api, "paint \x1b[31mred\x1b[0m otters")
    assert done.returncode == 0, done.stderr
    [run_file] = (isolated_home / "runs").glob("*.md")
    assert run_file.name.endswith("_paint-red-otters.md"), run_file.name


@pytest.mark.parametrize("budget", ["1e9", "1e-9"])
def test_a_budget_the_setting_refuses_is_a_usage_error_of_the_flag(
    fake_api: FakeMessagesAPI, isolated_home: Path, budget: str
) -> None:
    done = agentgod(isolated_home, fake_api, "--budget", budget, "count the otters")
    assert done.returncode == cli.EXIT_USAGE
    assert "--budget: must be from 1e-06 to 1,000,000 dollars" in done.stderr
    _nothing_spent(fake_api, isolated_home)


def test_history_with_a_twenty_digit_count_lists_them_all(isolated_home: Path) -> None:
    runlog.archive(_record("count the otters"))
    done = agentgod(isolated_home, None, "--json", "history", "9" * 20)
    assert done.returncode == 0, done.stderr
    assert [row["task"] for row in _reply(done)] == ["count the otters"]


def test_resume_says_four_characters_of_an_id_suffice(isolated_home: Path) -> None:
    done = agentgod(isolated_home, None, "--resume", "zz", "go on")
    assert done.returncode == cli.EXIT_USAGE
    assert "its first 4 characters are enough" in done.stderr


def test_a_bare_double_dash_ends_the_options(factory: Factory, isolated_home: Path) -> None:
    done = agentgod(isolated_home, factory.api, "--plain", "--", "--json", "explained")
    assert done.returncode == 0, done.stderr
    assert "MERGED" in done.stdout and not done.stdout.startswith("{")
    assert "--json explained" in factory.of("plan")[0].prompt


def test_retry_with_no_runs_asks_for_no_key(
    isolated_home: Path, open_terminal: Callable[..., Terminal]
) -> None:
    terminal = open_terminal(_env(isolated_home, None, TERM="xterm"), "--plain", "retry")
    terminal.expect("There is no run yet.")
    assert terminal.close() == cli.EXIT_FAILED
    assert "API key" not in terminal.text


def test_out_copies_are_the_user_s_files(
    factory: Factory, isolated_home: Path, tmp_path: Path
) -> None:
    body = (
        "def run(task, previous_outputs):\n"
        "    save_artifact('notes.md', 'otters')\n"
        "    return 'saved'\n"
    )
    factory.bodies = {"fact_finder": [body]}
    out = tmp_path / "out"
    done = agentgod(isolated_home, factory.api, "--out", str(out), "write notes")
    assert done.returncode == 0, done.stderr
    assert (out / "notes.md").stat().st_mode & 0o777 == 0o644, "as any program makes a file"


def test_a_failed_agent_is_no_one_s_input(factory: Factory, isolated_home: Path) -> None:
    factory.plans = [plan(agent_spec("flaky_fetcher"), agent_spec("writer", ["flaky_fetcher"]))]
    factory.bodies = {"flaky_fetcher": [RAISING]}
    reply = _reply(
        agentgod(isolated_home, factory.api, "--json", "write it", AGENT_REPAIR_ATTEMPTS="0")
    )
    shown = _reply(agentgod(isolated_home, None, "--json", "show", reply["run_id"]))
    inputs = {agent["name"]: agent["inputs"] for agent in shown["agents"]}
    assert inputs == {"flaky_fetcher": [], "writer": []}


def test_names_that_differ_in_the_middle_stay_apart_at_80_columns(
    factory: Factory, isolated_home: Path, open_terminal: Callable[..., Terminal]
) -> None:
    north, south = (
        f"customer_feedback_{side}_sentiment_summary_writer" for side in ("north", "south")
    )
    role = "Summarises one region's feedback"
    both = plan(agent_spec(north, role=role), agent_spec(south, role=role))
    factory.plans = [{**both, "independent": True}]
    env = _env(isolated_home, factory.api, TERM="xterm", COLUMNS="80")
    terminal = open_terminal(env, "--discard", "summarise the feedback")
    terminal.expect("run transcript")
    assert terminal.close() == 0
    transcript = terminal.text[terminal.text.rindex("run transcript") :]
    names = [line.split()[0] for line in transcript.splitlines() if "customer" in line]
    assert len(names) == len(set(names)) == 2, names


def factory_working(factory: Factory) -> threading.Event:
    working = threading.Event()

    def agent_reply(name: str, request: Request) -> Reply:
        working.set()
        return Reply(f"result from {name}", latency=5.0)

    factory.agent_reply = agent_reply
    return working


def test_a_stopped_run_s_rail_shows_its_archive_done(
    factory: Factory, isolated_home: Path, open_terminal: Callable[..., Terminal]
) -> None:
    working = factory_working(factory)
    env = _env(isolated_home, factory.api, TERM="xterm", COLUMNS="120")
    terminal = open_terminal(env, "--discard", "count the otters")
    assert working.wait(60), "the agent reached the model"
    os.kill(terminal.process.pid, signal.SIGINT)
    terminal.expect("Stopped.")
    assert terminal.close() == cli.EXIT_INTERRUPTED
    rails = [line for line in terminal.text.splitlines() if "plan" in line and "archive" in line]
    assert rails[-1].endswith("✓ archive 0.0s"), rails[-1]


def test_a_replay_ends_with_every_phase_settled(
    factory: Factory, isolated_home: Path, open_terminal: Callable[..., Terminal]
) -> None:
    assert agentgod(isolated_home, factory.api, "count the otters").returncode == 0
    env = _env(isolated_home, None, TERM="xterm", COLUMNS="120")
    terminal = open_terminal(env, "show", "--replay")
    terminal.expect("MERGED: fact_finder")
    assert terminal.close() == 0
    rails = [line for line in terminal.text.splitlines() if "plan" in line and "archive" in line]
    assert "○" not in rails[-1], rails[-1]
    assert rails[-1].endswith("✓ archive 0.0s")
    assert terminal.text.rindex("MERGED: fact_finder") > terminal.text.rindex(rails[-1])


def test_a_damaged_library_index_is_rebuilt_and_said_so(
    factory: Factory, isolated_home: Path
) -> None:
    assert agentgod(isolated_home, factory.api, "--keep", "count the otters").returncode == 0
    index = isolated_home / "inventory" / "agents" / "index.json"
    index.write_text("{ this is no index")
    listed = agentgod(isolated_home, None, "library")
    assert listed.returncode == 0, listed.stderr
    assert (
        "the library's index" in listed.stderr
        and "was damaged and has been rebuilt" in listed.stderr
    )
    assert "fact_finder" in listed.stdout
    again = agentgod(isolated_home, None, "library")
    assert "damaged" not in again.stderr, "said once"


def test_resume_continues_the_conversation_as_it_stood_at_that_run(
    factory: Factory, isolated_home: Path
) -> None:
    first = _reply(agentgod(isolated_home, factory.api, "--json", "count the otters"))
    second = _reply(agentgod(isolated_home, factory.api, "--json", "--continue", "and the seals"))
    assert second["conversation"] == first["conversation"]
    agentgod(isolated_home, factory.api, "--json", "--resume", first["run_id"], "and the whales")
    planned = factory.of("plan")[-1].prompt
    assert "count the otters" in planned
    assert "and the seals" not in planned, "a later turn is no part of the conversation then"


def test_two_runs_keeping_one_name_at_once_say_which_replaced_the_other(
    factory: Factory, isolated_home: Path
) -> None:
    other = "def run(task, previous_outputs):\n    return call_llm(f'agent={AGENT_NAME} again')\n"
    factory.bodies = {"fact_finder": [scripted.ECHO_BODY, other]}  # each run writes its own
    factory.merge_reply = lambda request: Reply("MERGED", latency=1.5)  # both built by then
    runs = [
        subprocess.Popen(
            [*agentgod_command(), "--keep", task],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=_env(isolated_home, factory.api, TASK_REVISIONS="0"),
        )
        for task in ("count the otters", "count the seals")
    ]
    said = [run.communicate(timeout=120) for run in runs]
    assert [run.returncode for run in runs] == [0, 0], said
    assert len(factory.of("generate")) == 2, "both runs wrote the agent"
    warned = [err for _, err in said if "replaced the library's earlier agent" in err]
    assert len(warned) == 1, "the run that kept it second says so"
    assert "fact_finder replaced the library's earlier agent of that name" in warned[0]


def test_cost_at_the_prompt_wraps_under_its_figures(
    factory: Factory, isolated_home: Path, open_terminal: Callable[..., Terminal]
) -> None:
    env = _env(isolated_home, factory.api, TERM="xterm", COLUMNS="80")
    terminal = open_terminal(env, "--discard")
    terminal.expect("agentgod> ")
    terminal.type("count the otters\n")
    terminal.expect("agentgod> ")
    terminal.type("/cost\n")
    terminal.expect(r"agentgod> ")
    terminal.type("quit\n")
    assert terminal.close() == 0
    shown = terminal.text[terminal.text.rindex("this session") :].splitlines()
    wrapped = shown[1 : next(i for i, line in enumerate(shown) if "agentgod>" in line)]
    assert wrapped, "80 columns are too few for the whole line"
    assert all(line.startswith(" " * len("this session  ")) for line in wrapped), shown


def test_money_reads_the_same_on_the_screen_and_in_the_run_file(
    factory: Factory, isolated_home: Path
) -> None:
    _greedy(factory, "fact_finder")  # a run of more than ten cents
    done = agentgod(isolated_home, factory.api, "--plain", "count the otters")
    assert done.returncode == 0, done.stderr
    [shown] = re.findall(r"\[cost\].* \| (\$[0-9.]+) \|", done.stdout + done.stderr)
    [run_file] = (isolated_home / "runs").glob("*.md")
    assert f"model calls · {shown}" in run_file.read_text(encoding="utf-8"), shown


# ---- the README's tables are --help's ---------------------------------------------------------

README = Path(__file__).resolve().parent.parent / "README.md"


def _table_cells(column: int, header: str) -> list[str]:
    """The cells of one column of the README table whose header row starts with `header`."""
    lines = README.read_text(encoding="utf-8").splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"| {header} |"))
    cells = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        parts = [part.strip() for part in re.split(r"(?<!\\)\|", line.strip("|"))]
        cells.append(parts[column].replace("\\|", "|"))
    return cells


def test_the_readme_s_verb_table_is_help_s() -> None:
    cells = _table_cells(0, "command | what it does")
    commands = [re.fullmatch(r"`agentgod (.+)`", cell) for cell in cells]
    listed = [found.group(1) for found in commands if found]
    assert listed == cli.verb_usages()
    shown = " ".join(subprocess.run(
        [*agentgod_command(), "--help"], capture_output=True, text=True, timeout=60,
        env=_env(Path("/nonexistent"), None),
    ).stdout.split())  # fmt: skip
    assert " | ".join(listed) in shown


def test_the_readme_s_flag_table_is_help_s() -> None:
    text = " ".join(_table_cells(1, "setting | flag"))
    written = dict(
        re.findall(r"(?<![\w-])(--?[a-zA-Z][\w-]*)(?:/|,)?(?: ([A-Z][A-Z:,]*|\[[A-Z]+\]))?", text)
    )
    expected: dict[str, str] = {}
    for action in cli.build_parser()._actions:
        if action.help == argparse.SUPPRESS:
            continue  # not in --help (a batch's own --run-id), so not in the table either
        metavar = action.metavar if isinstance(action.metavar, str) else ""
        if metavar and action.nargs == "?":
            metavar = f"[{metavar}]"
        for option in action.option_strings:
            expected[option] = metavar if option.startswith("--") else ""
    assert set(written) == set(expected), set(written) ^ set(expected)
    for option, metavar in expected.items():
        if metavar and option.startswith("--"):
            assert written[option] == metavar, (option, written[option], metavar)
