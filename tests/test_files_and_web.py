"""Agents that do real work, end to end: the user's files, the web, and files they make.

Every test runs `agentgod --json --no-input` against the scripted fake, with the agents as real
sandboxed processes (SANDBOX=auto): an attached file reaches an agent through its read-only mount
and `input_files()`, a web call goes through the broker to the fake's server tools, an artifact
through the broker into the run's folder. Nothing here monkeypatches the product.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
from conftest import agentgod
from fakeapi import FakeMessagesAPI, Fetch, Page, Reply, Request, WebTurn, web_reply
from scripted import Factory, agent_spec, plan

from agentgod import planner, replinput, sandbox

SALES = "region,amount\nnorth,120.50\nsouth,79.25\neast,300\n"
CSV_BODY = """
import csv

def run(task, previous_outputs):
    with open(input_files()["sales.csv"], encoding="utf-8", newline="") as handle:
        total = sum(float(row["amount"]) for row in csv.DictReader(handle))
    return f"TOTAL={total:.2f}"
"""
TIDES = ("Tides", "https://tides.example/moon", "Tides follow the moon, twice a day.")
PNG = b"\x89PNG\r\n\x1a\n" + b"\x00\x00\x00\rIHDR" + (8).to_bytes(4, "big") * 2 + b"\x00" * 16


@pytest.fixture
def work(tmp_path: Path) -> Path:
    """The folder agentgod is started in: where `@name` finds the user's files."""
    folder = tmp_path / "work"
    folder.mkdir()
    return folder


def one_agent(factory: Factory, body: str, *, web: bool = False, name: str = "worker") -> None:
    factory.plans = [plan(agent_spec(name, web=web), complexity="simple")]
    factory.bodies = {name: [body]}


def run(
    home: Path, api: FakeMessagesAPI, work: Path, *args: str, **env: str
) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    """One --json run in `work`, agents confined as far as this machine allows (unless `env`
    sets SANDBOX)."""
    settings = {"SANDBOX": "auto", "TASK_REVISIONS": "0", **env}
    done = agentgod(home, api, "--json", "--no-input", *args, cwd=work, **settings)
    try:
        reply = json.loads(done.stdout)
    except json.JSONDecodeError:
        raise AssertionError(f"no JSON on stdout; stderr:\n{done.stderr}") from None
    return done, reply


def merged_verbatim(factory: Factory) -> None:
    """The merge hands back its whole prompt, so a test reads what reached it."""
    factory.merge_reply = lambda request: request.prompt


# ---- the user's files ----------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["auto", "off"])
def test_an_agent_totals_an_attached_csv_itself_and_the_total_reaches_the_answer(
    fake_api: FakeMessagesAPI, isolated_home: Path, work: Path, mode: str
) -> None:
    """Through the walls, and with SANDBOX=off (the path, no walls) alike."""
    (work / "sales.csv").write_text(SALES, encoding="utf-8")
    factory = Factory(fake_api)
    one_agent(factory, CSV_BODY, name="csv_totaller")
    merged_verbatim(factory)
    done, reply = run(
        isolated_home, fake_api, work, "total the amounts in @sales.csv", SANDBOX=mode
    )
    assert done.returncode == 0, done.stderr
    assert "TOTAL=499.75" in reply["answer"], "computed by the agent's own code, exactly"
    assert reply["attachments"] == [
        {"name": "sales.csv", "path": str(work / "sales.csv"), "bytes": len(SALES), "kind": "csv"}
    ]
    [planned] = factory.of("plan")
    assert "<task>\ntotal the amounts in sales.csv\n</task>" in planned.prompt, "no user path"
    assert "region,amount" in planned.prompt, "the planner sees the CSV's header row"
    assert str(work) not in planned.prompt
    [written] = factory.of("generate")
    assert "sales.csv" in written.prompt and "input_files()" in written.system
    if mode == "off" or "landlock" in sandbox.probe().why_not:
        return
    assert "landlock" in reply["sandbox"], "the file was read through the walls, not around them"


def test_a_pdf_and_a_png_reach_the_model_as_document_and_image_blocks(
    fake_api: FakeMessagesAPI, isolated_home: Path, work: Path
) -> None:
    (work / "report.pdf").write_bytes(b"%PDF-1.4\n% a tiny report\n%%EOF\n")
    (work / "chart.png").write_bytes(PNG)
    factory = Factory(fake_api)
    body = """
def run(task, previous_outputs):
    return call_llm(f"agent={AGENT_NAME} describe them", files=sorted(input_files()))
"""
    one_agent(factory, body, name="describer")
    done, reply = run(
        isolated_home, fake_api, work, "describe", "--file", "report.pdf", "--file", "chart.png"
    )
    assert done.returncode == 0, done.stderr
    [call] = factory.of("agent")
    assert [d["source"]["media_type"] for d in call.documents] == ["application/pdf"]
    assert [i["source"]["media_type"] for i in call.images] == ["image/png"]
    assert {a["kind"] for a in reply["attachments"]} == {"pdf", "image"}


def test_a_folder_attachment_lists_and_reads_its_files(
    fake_api: FakeMessagesAPI, isolated_home: Path, work: Path
) -> None:
    notes = work / "notes"
    (notes / "old").mkdir(parents=True)
    (notes / "a.txt").write_text("alpha", encoding="utf-8")
    (notes / "old" / "b.txt").write_text("beta", encoding="utf-8")
    (notes / ".env").write_text("TOKEN=abc123def456ghi789\n", encoding="utf-8")
    (work / "private.txt").write_text("not attached", encoding="utf-8")
    factory = Factory(fake_api)
    body = """
def run(task, previous_outputs):
    parts = []
    for name, path in sorted(input_files().items()):
        with open(path, encoding="utf-8") as handle:
            parts.append(f"{name}={handle.read()}")
    folder = os.path.dirname(input_files()["notes/a.txt"])
    secret = "." + "env"  # spelled past the code guard's words: the sandbox must hold alone
    for beside in (os.path.join(folder, secret), os.path.join(folder, "..", "private.txt")):
        try:
            with open(beside, encoding="utf-8") as handle:
                parts.append("LEAKED " + handle.read())
        except OSError as error:
            parts.append(f"refused ({type(error).__name__})")
    return "; ".join(parts)
"""
    one_agent(factory, body, name="folder_reader")
    merged_verbatim(factory)
    done, reply = run(isolated_home, fake_api, work, "read everything in @notes/")
    assert done.returncode == 0, done.stderr
    assert "notes/a.txt=alpha; notes/old/b.txt=beta; refused" in reply["answer"]
    assert "LEAKED" not in reply["answer"], "neither the secret left out nor a sibling is readable"
    assert any("not attached: notes/.env" in warning for warning in reply["warnings"])
    [planned] = factory.of("plan")
    assert "notes/a.txt" in planned.prompt and "notes/old/b.txt" in planned.prompt


@pytest.mark.parametrize("case", ["env", "ssh", "key", "huge", "device"])
def test_refused_attachments_stop_the_run_before_any_model_call(
    fake_api: FakeMessagesAPI, isolated_home: Path, work: Path, case: str
) -> None:
    """A secret, a key, a file holding a key, a 2 GB file and a device: each is named and
    refused before anything is spent."""
    if case == "env":
        (work / ".env").write_text("TOKEN=abc123def456ghi789\n", encoding="utf-8")
        shown = ".env"
    elif case == "ssh":
        (isolated_home / ".ssh").mkdir()
        (isolated_home / ".ssh" / "id_ed25519").write_text("-----BEGIN OPENSSH", encoding="utf-8")
        shown = "~/.ssh/id_ed25519"
    elif case == "key":
        key = "sk-ant-api03-" + "Zq9" * 30
        (work / "notes.txt").write_text(f"my key is {key}\n", encoding="utf-8")
        shown = "notes.txt"
    elif case == "huge":
        with open(work / "big.bin", "wb") as handle:
            handle.truncate(2 * 1024**3)
        shown = "big.bin"
    else:
        shown = "/dev/zero"
    Factory(fake_api)
    done, reply = run(isolated_home, fake_api, work, f"summarise @{shown}")
    assert done.returncode == 1, done.stderr
    assert reply["ok"] is False and reply["error"]["type"] == "attachment"
    assert shown in reply["error"]["headline"]
    assert fake_api.messages() == [], "refused before any model call"


# ---- the web -------------------------------------------------------------------------------

WEB_BODY = """
def run(task, previous_outputs):
    try:
        return call_llm(f"agent={AGENT_NAME} how do tides work?", web=True)
    except BrokerRefused as refused:
        return f"agent={AGENT_NAME} web refused ({refused.kind}: {refused.message})"
"""


def web_factory(api: FakeMessagesAPI, *, web: bool) -> Factory:
    factory = Factory(api)
    one_agent(factory, WEB_BODY, web=web, name="researcher")
    merged_verbatim(factory)

    def agent_reply(name: str, request: Request) -> Reply | str:
        return web_reply([TIDES]) if request.tool("web_search") else f"result from {name}"

    factory.agent_reply = agent_reply
    return factory


def test_a_web_agent_searches_and_its_sources_reach_the_answer_and_the_cost(
    fake_api: FakeMessagesAPI, isolated_home: Path, work: Path
) -> None:
    factory = web_factory(fake_api, web=True)
    done, reply = run(isolated_home, fake_api, work, "explain the tides")
    assert done.returncode == 0, done.stderr
    [call] = factory.of("agent")
    assert {tool["name"] for tool in call.tools} == {"web_search", "web_fetch"}
    assert f"- Tides — {TIDES[1]}" in reply["answer"], "the agent's sources reached the merge"
    assert reply["cost"]["web_searches"] == 1
    assert reply["agents"][0]["usage"]["web_searches"] == 1
    assert planner.WEB_ON in factory.of("plan")[0].system


def test_the_budget_binds_a_web_call_that_fetches_a_huge_page(
    fake_api: FakeMessagesAPI, isolated_home: Path, work: Path
) -> None:
    """With --budget 0.25, one fetch of a page of 150k input tokens spent $0.31 (issue 23): the
    fetch now reads no more than the call's hold covers, and the run's figure stays in budget."""
    big = Page("https://big.example/report", "The big report", "word " * 120_000)
    fake_api.pages = [big]
    factory = Factory(fake_api)
    body = """
def run(task, previous_outputs):
    return call_llm(f"agent={AGENT_NAME} read {task}", web=True)
"""
    one_agent(factory, body, web=True, name="reader")
    factory.agent_reply = lambda name, request: Reply(web=WebTurn(uses=[Fetch(big.url)]))
    done, reply = run(isolated_home, fake_api, work, "--budget", "0.25", f"summarise {big.url}")
    assert done.returncode == 0, done.stderr
    assert reply["cost"]["usd"] <= 0.25, reply["cost"]
    [call] = factory.of("agent")
    fetch = call.tool("web_fetch")
    assert fetch is not None and 0 < fetch["max_content_tokens"] < 150_000
    [result] = [b for b in call.reply["content"] if b["type"] == "web_fetch_tool_result"]
    assert len(result["content"]["content"]["source"]["data"]) < len(big.text)


def test_an_agent_the_planner_did_not_mark_for_the_web_is_refused_it(
    fake_api: FakeMessagesAPI, isolated_home: Path, work: Path
) -> None:
    web_factory(fake_api, web=False)
    done, reply = run(isolated_home, fake_api, work, "explain the tides")
    assert done.returncode == 0, done.stderr
    assert "web refused (forbidden: web search is not allowed" in reply["answer"]
    assert all(not request.tools for request in fake_api.messages())
    assert reply["cost"]["web_searches"] == 0


def test_no_web_sends_no_tool_and_tells_the_planner(
    fake_api: FakeMessagesAPI, isolated_home: Path, work: Path
) -> None:
    factory = web_factory(fake_api, web=True)
    done, reply = run(isolated_home, fake_api, work, "--no-web", "explain the tides")
    assert done.returncode == 0, done.stderr
    assert all(not request.tools for request in fake_api.messages())
    assert planner.WEB_OFF in factory.of("plan")[0].system
    assert "web refused (forbidden" in reply["answer"]


# ---- artifacts -----------------------------------------------------------------------------

ARTIFACT_BODY = """
def run(task, previous_outputs):
    saved = save_artifact("report.md", "# Report\\n\\nAll good.\\n")
    try:
        save_artifact("huge.csv", "x" * 5000)
        extra = "huge saved"
    except BrokerRefused as refused:
        extra = f"huge refused ({refused.kind})"
    return f"agent={AGENT_NAME} saved {saved}; {extra}"
"""


def test_an_artifact_is_on_disk_in_json_in_the_run_file_and_copied_by_out(
    fake_api: FakeMessagesAPI, isolated_home: Path, work: Path
) -> None:
    factory = Factory(fake_api)
    one_agent(factory, ARTIFACT_BODY, name="reporter")
    merged_verbatim(factory)
    out = work / "out"
    done, reply = run(
        isolated_home, fake_api, work, "--out", str(out), "write a report", ARTIFACTS_MAX_MB="0.004"
    )
    assert done.returncode == 0, done.stderr
    assert "saved report.md; huge refused (too_large)" in reply["answer"]
    [made] = reply["artifacts"]
    assert made["name"] == "report.md" and made["agent"] == "reporter"
    assert made["path"] == str(out / "report.md")
    assert (out / "report.md").read_text(encoding="utf-8") == "# Report\n\nAll good.\n"
    [kept] = list((isolated_home / "runs").glob("*/artifacts/report.md"))
    assert kept.read_bytes() == (out / "report.md").read_bytes()
    assert oct(kept.stat().st_mode & 0o777) == "0o600"
    assert "report.md" in factory.of("merge")[0].prompt, "the merger is told what was made"
    run_file = Path(reply["run_file"])
    link = re.search(r"\[report\.md\]\(([^)]+)\)", run_file.read_text(encoding="utf-8"))
    assert link and (run_file.parent / link.group(1)).resolve() == kept.resolve()


def test_out_that_is_a_file_is_a_usage_error_before_any_call(
    fake_api: FakeMessagesAPI, isolated_home: Path, work: Path
) -> None:
    (work / "taken").write_text("a file", encoding="utf-8")
    Factory(fake_api)
    done, reply = run(isolated_home, fake_api, work, "--out", "taken", "write a report")
    assert done.returncode == 2
    assert "it is a file" in reply["error"]["headline"]
    assert fake_api.messages() == []


# ---- the prompt ----------------------------------------------------------------------------


def test_tab_completes_paths_after_an_at_and_slash_commands(
    work: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (work / "data").mkdir()
    (work / "data.csv").write_text("a\n", encoding="utf-8")
    monkeypatch.chdir(work)
    assert replinput.completions("@da") == ["@data.csv", "@data/"]
    assert replinput.completions("/hi") == ["/history"]
    assert replinput.completions("plain") == []
