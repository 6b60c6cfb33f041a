"""Concurrent agentgod runs in one AGENTGOD_HOME, with the same agent names.

Every run plans the same two agents, `collector` and then `writer`, but each run's code prints
that run's own tag. An answer holding another run's tag means a run executed another's code; a
FileNotFoundError means one removed another's files. The library, the only state runs share,
must come out consistent after all of them kept their agents at once.
"""

from __future__ import annotations

import contextlib
import json
import re
import subprocess
import threading
import zlib
from pathlib import Path

import pytest
from agents import agent_source
from conftest import TEST_KEY, agentgod_command, agentgod_env
from fakeapi import FakeMessagesAPI, Reply, Request
from scripted import Factory, agent_spec, plan

from agentgod import executor, library, scratch

RUNS = 8
AGENTS = ("collector", "writer")
OUTPUT = re.compile(r"OUT<(\w+):(\w+)>")


def tagged_body(tag: str, name: str) -> str:
    """An agent of run `tag`: what it received, then its own mark.

    The collector first calls the model, which holds every run's collector until all runs have
    one running: by then every run has written its writer, so a writer file shared between runs
    would hold one run's code for all of them.
    """
    lines = ["def run(task, previous_outputs):"]
    if name == "collector":
        lines.append("    call_llm('barrier')")
    lines += [
        '    received = " ".join(previous_outputs[key] for key in sorted(previous_outputs))',
        f'    return (received + " OUT<{tag}:{name}>").strip()',
    ]
    return "\n".join(lines) + "\n"


def scripted(api: FakeMessagesAPI, runs: int) -> None:
    """Answer each run by the tag in its task: its plan, its code, its merge."""
    kind_of = Factory.kind
    together = threading.Barrier(runs)

    def handle(request: Request) -> Reply | str:
        kind = kind_of(request)
        if kind == "plan":
            tag = re.search(r"<task>\n(\w+)", request.prompt).group(1)  # type: ignore[union-attr]
            agents = [agent_spec("collector"), agent_spec("writer", ["collector"])]
            for agent in agents:
                agent["instructions"] += f" RUN_TAG={tag}"
            return Reply.json(plan(*agents, complexity="simple"))
        if kind == "generate":
            name = re.search(r"Agent name: (\w+)", request.prompt).group(1)  # type: ignore[union-attr]
            tag = re.search(r"RUN_TAG=(\w+)", request.prompt).group(1)  # type: ignore[union-attr]
            # Runs finish writing in a different order than they started, as real ones do.
            latency = (zlib.crc32(f"{tag}{name}".encode()) % 7) / 20
            return Reply(tagged_body(tag, name), latency=latency)
        if kind == "merge":
            found = sorted(set(OUTPUT.findall(request.prompt)))
            return "FINAL: " + " ".join(f"OUT<{tag}:{name}>" for tag, name in found)
        if kind == "agent":
            with contextlib.suppress(threading.BrokenBarrierError):
                together.wait(timeout=120)  # a run that never gets there fails on its own
            return "noted"
        if kind == "judge":
            return Reply.json({"missing": "", "done": True})
        raise AssertionError(f"unexpected request: {request.system[:80]!r}")

    api.handler = handle


def start_runs(
    home: Path, api: FakeMessagesAPI, temp_dir: Path, count: int, *flags: str
) -> dict[str, tuple[int, str, str]]:
    """`count` one-shot runs at once, tagged p0, p1, ...; each one's exit code, stdout, stderr."""
    env = agentgod_env(
        home,
        SANDBOX="off",
        TMPDIR=str(temp_dir),
        ANTHROPIC_BASE_URL=api.base_url,
        ANTHROPIC_API_KEY=TEST_KEY,
    )
    processes = {
        f"p{n}": subprocess.Popen(
            [*agentgod_command(), "--quiet", *flags, f"p{n}"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for n in range(count)
    }
    done = {tag: process.communicate(timeout=300) for tag, process in processes.items()}
    finished = {tag: (processes[tag].returncode, *done[tag]) for tag in processes}
    assert list((home / "generated_agents").iterdir()) == [], "every run's folder went"
    assert list(temp_dir.iterdir()) == [], "every agent's scratch dir went"
    return finished


def test_concurrent_runs_with_the_same_agent_names_run_only_their_own_code(
    fake_api: FakeMessagesAPI, isolated_home: Path, tmp_path: Path
) -> None:
    scripted(fake_api, 4)
    (temp_dir := tmp_path / "tmp").mkdir()
    for tag, (code, stdout, stderr) in start_runs(
        isolated_home, fake_api, temp_dir, 4, "--discard"
    ).items():
        assert code == 0, stderr
        assert "FileNotFoundError" not in stderr
        seen = set(OUTPUT.findall(stdout))
        assert seen == {(tag, "collector"), (tag, "writer")}, f"{tag} ran {sorted(seen)}"


def test_concurrent_runs_that_keep_their_agents_leave_a_consistent_library(
    fake_api: FakeMessagesAPI, isolated_home: Path, tmp_path: Path
) -> None:
    """Every run plans before any run keeps (the barrier), so none reuses another's agents."""
    scripted(fake_api, RUNS)
    (temp_dir := tmp_path / "tmp").mkdir()
    finished = start_runs(isolated_home, fake_api, temp_dir, RUNS, "--keep")
    for tag, (code, stdout, stderr) in finished.items():
        assert code == 0, stderr
        seen = set(OUTPUT.findall(stdout))
        assert seen == {(tag, "collector"), (tag, "writer")}, f"{tag} ran {sorted(seen)}"

    # Each run replaced the others' code under the lock: no replacement was lost or torn.
    folder = isolated_home / "inventory" / "agents"
    index = json.loads((folder / library.INDEX_NAME).read_text(encoding="utf-8"))
    entries = {entry.name: entry for entry in library.entries()}
    assert sorted(entries) == sorted(index["agents"]) == sorted(AGENTS)
    for name, entry in entries.items():
        assert entry.generation == RUNS, f"{name}: {entry.generation} of {RUNS} replacements"
        sidecar = json.loads((folder / f"{name}.json").read_text(encoding="utf-8"))
        assert sidecar == index["agents"][name], "the index agrees with the agent's own record"
        [(tag, agent)] = OUTPUT.findall(library.lookup(name) or "")
        assert agent == name and tag in finished, "the kept code is whole, one run's"
    assert not [p.name for p in folder.iterdir() if p.name.endswith(".tmp")]


def test_an_agent_started_ahead_waits_in_its_run_folder_and_reads_no_other(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SANDBOX", "off")
    mine, theirs = scratch.RunSpace(), scratch.RunSpace()
    try:
        ours = executor.save_agent_file(
            "writer", agent_source(tagged_body("mine", "writer"), "writer"), mine.folder
        )
        other = executor.save_agent_file(
            "writer", agent_source(tagged_body("theirs", "writer"), "writer"), theirs.folder
        )
        for path, runs in ((other, False), (ours, True)):
            agent = executor.start_agent(None, space=mine)
            assert isinstance(agent, executor.AgentProcess)
            cmdline = Path(f"/proc/{agent.process.pid}/cmdline").read_bytes().split(b"\0")
            assert str(mine.folder).encode() in cmdline, "it waits in its own run's folder"
            if not runs:
                with pytest.raises(ValueError, match="not in the folder"):
                    agent.run("t", {}, path=path)
                agent.discard()
                continue
            result = agent.run("t", {}, path=path)
            assert (result.ok, result.output) == (True, "OUT<mine:writer>"), result.error
    finally:
        mine.close()
        theirs.close()
