"""agent_runtime: the frames it speaks to the broker, and its standalone road to the API."""

from __future__ import annotations

import ast
import base64
import json
import re
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import TEST_KEY
from fakeapi import FakeMessagesAPI, Reply, web_reply

from agentgod import agent_runtime
from agentgod.agent_runtime import (
    ARTIFACTS_VARIABLE,
    BROKER_FD_VARIABLE,
    INPUT_FILES_VARIABLE,
    BrokerRefused,
    LLMError,
)
from agentgod.broker import MAX_REQUEST_BYTES

Answer = Callable[[dict[str, Any]], dict[str, Any] | None]


def read_frame(sock: socket.socket) -> dict[str, Any] | None:
    """One frame read the way the wire defines it, or None when the other end hung up."""
    header = sock.recv(4, socket.MSG_WAITALL)
    if len(header) < 4:
        return None
    size = int.from_bytes(header, "big")
    body = sock.recv(size, socket.MSG_WAITALL) if size else b""
    frame: dict[str, Any] = json.loads(body.decode("utf-8"))
    return frame


class ScriptedBroker:
    """The broker's end of a socketpair, answering each frame with `answer` (None: hang up)."""

    def __init__(self, answer: Answer) -> None:
        self.answer = answer
        self.frames: list[dict[str, Any]] = []
        self.ours, self.theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        with self.ours:
            while (frame := read_frame(self.ours)) is not None:
                self.frames.append(frame)
                reply = self.answer(frame)
                if reply is None:
                    return
                self.ours.sendall(agent_runtime.encode_frame(reply))

    def close(self) -> None:
        self.theirs.close()
        self._thread.join(10)


@pytest.fixture
def scripted(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[Answer], ScriptedBroker]]:
    """Start a scripted broker and point the runtime's variable at the agent's end."""
    started: list[ScriptedBroker] = []

    def start(answer: Answer) -> ScriptedBroker:
        broker = ScriptedBroker(answer)
        started.append(broker)
        monkeypatch.setenv(BROKER_FD_VARIABLE, str(broker.theirs.fileno()))
        return broker

    yield start
    for broker in started:
        broker.close()


def ok(text: str) -> dict[str, Any]:
    return {"ok": True, "text": text, "model": "m", "stop_reason": "end_turn", "usage": {}}


# ---- through the broker --------------------------------------------------------------------


def test_a_call_is_one_frame_each_way(
    scripted: Callable[[Answer], ScriptedBroker], monkeypatch: pytest.MonkeyPatch
) -> None:
    broker = scripted(lambda frame: ok("the answer ✓"))
    assert agent_runtime.call_llm("hello ✓", system="be brief", max_tokens=100) == "the answer ✓"
    monkeypatch.setenv("AGENT_MODEL", "claude-haiku-5-5")
    agent_runtime.call_llm("again", web=True, files=["notes.txt"])
    assert broker.frames == [
        {
            "op": "messages",
            "request": {
                "max_tokens": 100,
                "messages": [{"role": "user", "content": "hello ✓"}],
                "system": "be brief",
            },
            "web": False,
            "files": [],
        },
        {
            "op": "messages",
            "request": {
                "max_tokens": 4096,
                "messages": [{"role": "user", "content": "again"}],
                "model": "claude-haiku-5-5",
            },
            "web": True,
            "files": ["notes.txt"],
        },
    ]


def test_the_frame_is_a_big_endian_length_and_utf8_json() -> None:
    frame = agent_runtime.encode_frame({"text": "é"})
    assert frame[:4] == (len(frame) - 4).to_bytes(4, "big")
    assert json.loads(frame[4:].decode("utf-8")) == {"text": "é"}


@pytest.mark.parametrize(
    ("kind", "refused"),
    [
        ("budget", True),
        ("forbidden", True),
        ("invalid", True),
        ("too_large", True),
        ("malformed", True),
        ("rate_limit", False),
        ("overloaded", False),
        ("timeout", False),
    ],
)
def test_an_error_answer_is_raised_with_its_type(
    kind: str, refused: bool, scripted: Callable[[Answer], ScriptedBroker]
) -> None:
    scripted(lambda frame: {"ok": False, "error": {"type": kind, "message": "because"}})
    with pytest.raises(LLMError) as caught:
        agent_runtime.call_llm("hello")
    assert isinstance(caught.value, BrokerRefused) is refused
    assert isinstance(caught.value, RuntimeError), "agents that catch RuntimeError still do"
    assert (caught.value.kind, caught.value.message) == (kind, "because")
    assert str(caught.value) == f"{kind}: because"


def test_a_broker_that_hangs_up_is_a_connection_error(
    scripted: Callable[[Answer], ScriptedBroker],
) -> None:
    scripted(lambda frame: None)
    with pytest.raises(LLMError) as caught:
        agent_runtime.call_llm("hello")
    assert caught.value.kind == "connection"
    assert not isinstance(caught.value, BrokerRefused)


@pytest.mark.parametrize("value", ["not-a-number", "987"])
def test_a_variable_that_names_no_socket_is_a_connection_error(
    value: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(BROKER_FD_VARIABLE, value)
    with pytest.raises(LLMError, match="is not an open socket") as caught:
        agent_runtime.call_llm("hello")
    assert caught.value.kind == "connection"


def test_a_file_is_not_a_broker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with (tmp_path / "f").open("w") as handle:
        monkeypatch.setenv(BROKER_FD_VARIABLE, str(handle.fileno()))
        with pytest.raises(LLMError, match="is not an open socket"):
            agent_runtime.call_llm("hello")
    assert (tmp_path / "f").read_text() == "", "nothing was written into it"


def test_an_exchange_that_broke_off_is_never_resumed(
    scripted: Callable[[Answer], ScriptedBroker],
) -> None:
    """A reply the runtime stopped reading would otherwise be taken for the next call's."""
    broker = scripted(lambda frame: None)
    broker.ours.sendall((agent_runtime.MAX_REPLY_BYTES + 1).to_bytes(4, "big") + b"{}")
    with pytest.raises(LLMError, match="byte reply"):
        agent_runtime.call_llm("one")
    with pytest.raises(LLMError, match="out of step"):
        agent_runtime.call_llm("two")
    broker.close()  # the scripted broker has read all it will ever read
    assert [f["request"]["messages"][0]["content"] for f in broker.frames] == ["one"]


def test_threads_share_the_connection_one_request_at_a_time(
    scripted: Callable[[Answer], ScriptedBroker],
) -> None:
    """Interleaved frames would hand one thread another's answer, or garble the stream."""
    scripted(lambda frame: ok("echo " + frame["request"]["messages"][0]["content"]))
    wrong: list[str] = []

    def worker(number: int) -> None:
        for call in range(25):
            prompt = f"{number}-{call}-" + "x" * (number * 3000)
            if agent_runtime.call_llm(prompt) != "echo " + prompt:
                wrong.append(prompt[:10])

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert wrong == []


def test_the_variable_is_read_at_call_time(
    scripted: Callable[[Answer], ScriptedBroker], monkeypatch: pytest.MonkeyPatch
) -> None:
    first = scripted(lambda frame: ok("first"))
    assert agent_runtime.call_llm("a") == "first"
    scripted(lambda frame: ok("second"))
    assert agent_runtime.call_llm("b") == "second"
    assert len(first.frames) == 1


# ---- standalone: straight to the API -------------------------------------------------------


def test_standalone_posts_to_the_api_with_the_key(fake_api: FakeMessagesAPI) -> None:
    fake_api.queue(Reply("hi", thinking=True))
    assert agent_runtime.call_llm("hello", system="be brief", max_tokens=50) == "hi"
    [request] = fake_api.messages()
    assert request.api_key == TEST_KEY
    assert request.headers["anthropic-version"] == agent_runtime.API_VERSION == "2026-10-21"
    assert request.body == {
        "max_tokens": 50,
        "messages": [{"role": "user", "content": "hello"}],
        "system": "be brief",
        "model": agent_runtime.DEFAULT_MODEL,
    }


def test_standalone_retries_transient_errors(fake_api: FakeMessagesAPI) -> None:
    fake_api.queue(Reply.error(529), Reply.error(429), Reply.error(500), Reply("at last"))
    assert agent_runtime.call_llm("hello") == "at last"
    assert len(fake_api.messages()) == 4


@pytest.mark.parametrize(
    ("reply", "kind", "attempts"),
    [
        (Reply.error(400, "max_tokens: too large"), "invalid_request", 1),
        (Reply.error(401), "authentication", 1),
        (Reply.error(500, headers={"x-should-retry": "false"}), "api_error", 1),
        (Reply.error(529), "overloaded", agent_runtime.MAX_ATTEMPTS),
    ],
)
def test_standalone_errors_carry_their_type(
    reply: Reply, kind: str, attempts: int, fake_api: FakeMessagesAPI
) -> None:
    fake_api.handler = lambda request: reply
    with pytest.raises(LLMError) as caught:
        agent_runtime.call_llm("hello")
    assert caught.value.kind == kind
    assert len(fake_api.messages()) == attempts


def test_x_should_retry_true_retries_a_status_that_is_not_transient(
    fake_api: FakeMessagesAPI,
) -> None:
    fake_api.queue(Reply.error(400, headers={"x-should-retry": "true"}), Reply("fine"))
    assert agent_runtime.call_llm("hello") == "fine"


def _kept_agent(folder: Path) -> Path:
    """An agent file as the library keeps one: the runtime and the standalone road."""
    folder.mkdir(parents=True)
    path = folder / "kept_agent.py"
    main = "\nprint(call_llm(sys.argv[1]))\n"
    text = agent_runtime.runtime_source() + agent_runtime.standalone_source() + main
    path.write_text(text, encoding="utf-8")
    return path


def test_a_kept_agent_finds_key_and_base_url_in_a_dotenv_up_the_tree(
    fake_api: FakeMessagesAPI, tmp_path: Path
) -> None:
    archive = tmp_path / "archive"
    agent = _kept_agent(archive / "team" / "agents")
    (archive / ".env").write_text(
        f"# saved\nANTHROPIC_API_KEY='sk-ant-archived-key-123456789'\n"
        f'ANTHROPIC_BASE_URL="{fake_api.base_url}"\n'
    )
    done = subprocess.run(
        [sys.executable, "-I", "-S", str(agent), "hello"],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin"},
        timeout=30,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"
    assert fake_api.messages()[0].api_key == "sk-ant-archived-key-123456789"


def test_the_environment_wins_over_the_dotenv(fake_api: FakeMessagesAPI, tmp_path: Path) -> None:
    agent = _kept_agent(tmp_path / "kept")
    (tmp_path / "kept" / ".env").write_text(
        "ANTHROPIC_API_KEY=sk-ant-from-dotenv-123456789\nANTHROPIC_BASE_URL=http://127.0.0.1:9\n"
    )
    env = {"PATH": "/usr/bin:/bin", "ANTHROPIC_API_KEY": TEST_KEY}
    env["ANTHROPIC_BASE_URL"] = fake_api.base_url
    done = subprocess.run(
        [sys.executable, "-I", "-S", str(agent), "hello"],
        capture_output=True,
        text=True,
        env=env,
        timeout=30,
    )
    assert done.returncode == 0, done.stderr
    assert fake_api.messages()[0].api_key == TEST_KEY


def test_no_key_anywhere_is_an_authentication_error(tmp_path: Path) -> None:
    agent = _kept_agent(tmp_path / "lonely")
    done = subprocess.run(
        [sys.executable, "-I", "-S", str(agent), "hello"],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin"},
        timeout=30,
    )
    assert done.returncode == 1
    assert "LLMError: authentication: ANTHROPIC_API_KEY is not set" in done.stderr


# ---- the inlined text ----------------------------------------------------------------------

RUNTIME_IMPORTS = {"json", "os", "sys", "threading", "time", "pathlib"}
"""No socket module: agent code must not find one among the runtime's names (codeguard refuses
it to agents, and names the runtime binds are not checked in the body)."""


def test_the_inlined_runtime_imports_only_the_standard_modules_it_names() -> None:
    tree = ast.parse(agent_runtime.runtime_source())
    top: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.Import):
            top |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            assert node.module != "__future__", "an inlined runtime cannot import from __future__"
            top.add(str(node.module))
    assert top == RUNTIME_IMPORTS
    nested = {
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.Import) and node not in tree.body
        for alias in node.names
    }
    assert nested == {"base64"}, "no HTTP: the inlined runtime has no road but the broker"
    standalone = ast.parse(agent_runtime.standalone_source())
    assert {
        alias.name
        for node in ast.walk(standalone)
        if isinstance(node, ast.Import)
        for alias in node.names
    } == {"urllib.error", "urllib.request"}, "HTTP only on the standalone road, and only there"


def test_the_inlined_runtime_holds_no_road_to_a_key() -> None:
    """No .env lookup, no key variable, no HTTP: nothing an agent's code could call to get
    around the broker, whatever walls the machine has (issue 23)."""
    source = agent_runtime.runtime_source()
    strings = [
        node.value
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
    ]
    for clue in (r"\.env\b", "ANTHROPIC_API_KEY", "x-api-key", "api.anthropic", "/v1/messages"):
        assert not any(re.search(clue, text) for text in strings), clue
    tree = ast.parse(source)
    names = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}
    names |= {node.name for node in ast.walk(tree) if isinstance(node, ast.FunctionDef)}
    assert not names & {"_setting", "_api_key", "_post", "_retry_wait", "_Standalone"}
    imported = {
        alias.name.split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
    }
    assert not imported & {"urllib", "http", "socket", "ssl"}


def test_the_inlined_runtime_defines_what_agents_use() -> None:
    namespace: dict[str, Any] = {"__file__": __file__}
    exec(compile(agent_runtime.runtime_source(), "runtime", "exec"), namespace)
    for name in (
        "call_llm",
        "format_previous",
        "input_files",
        "save_artifact",
        "LLMError",
        "BrokerRefused",
    ):
        assert callable(namespace[name]), name
    for name in ("json", "os", "sys", "time", "Path"):
        assert name in namespace, name
    assert "runtime_source" not in namespace, "the module's own helpers stay out of agents"
    for name in ("_api_key", "_setting", "_post", "_Standalone"):
        assert name not in namespace, f"{name} is the standalone road's, never an agent's"
    assert namespace["_standalone"] is None


def test_importing_reads_nothing_and_loads_no_http_stack() -> None:
    """Everything is read at call time, and a brokered agent never pays for urllib.request."""
    probe = (
        f"import sys; sys.path.insert(0, {str(Path(agent_runtime.__file__).parent)!r}); "
        "import agent_runtime; print('urllib.request' in sys.modules)"
    )
    done = subprocess.run(
        [sys.executable, "-I", "-S", "-c", probe],
        env={"PATH": "/usr/bin:/bin", BROKER_FD_VARIABLE: "garbage"},
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"


def test_format_previous_labels_each_output() -> None:
    assert agent_runtime.format_previous({}) == "(no earlier results)"
    assert agent_runtime.format_previous({"a": "one", "b": "two"}) == "### a\none\n\n### b\ntwo"


# ---- the user's files ----------------------------------------------------------------------


def test_no_attachments_is_an_empty_mapping(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(INPUT_FILES_VARIABLE, raising=False)
    assert agent_runtime.input_files() == {}


def test_attachments_come_from_the_variable_at_call_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    files = {"sales.csv": str(tmp_path / "sales.csv"), "reports": str(tmp_path / "reports")}
    monkeypatch.setenv(INPUT_FILES_VARIABLE, json.dumps(files))
    found = agent_runtime.input_files()
    assert found == files
    found.clear()
    assert agent_runtime.input_files() == files, "each call reads the variable again"


@pytest.mark.parametrize(
    "value",
    ["{not json", '["a.csv"]', '{"a.csv": "relative/a.csv"}', '{"a.csv": 3}', '"text"'],
)
def test_a_malformed_attachment_variable_is_a_clear_error(
    value: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(INPUT_FILES_VARIABLE, value)
    with pytest.raises(ValueError, match=f"{INPUT_FILES_VARIABLE} must be a JSON object"):
        agent_runtime.input_files()


PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 32
PDF = b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n1 0 obj\n"


@pytest.mark.parametrize(
    ("data", "media_type"),
    [
        (PNG, "image/png"),
        (b"\xff\xd8\xff\xe0" + b"\x00" * 16, "image/jpeg"),
        (b"GIF89a" + b"\x00" * 16, "image/gif"),
        (b"GIF87a" + b"\x00" * 16, "image/gif"),
        (b"RIFF\x10\x00\x00\x00WEBPVP8 " + b"\x00" * 8, "image/webp"),
    ],
)
def test_an_image_becomes_an_image_block_by_its_magic_bytes(data: bytes, media_type: str) -> None:
    block = agent_runtime.file_block("picture.txt", data)  # the name does not decide
    assert block == {
        "type": "image",
        "source": {
            "type": "base64",
            "media_type": media_type,
            "data": base64.b64encode(data).decode("ascii"),
        },
    }


def test_a_pdf_becomes_a_document_block_titled_with_its_name() -> None:
    assert agent_runtime.file_block("scan.pdf", PDF) == {
        "type": "document",
        "source": {
            "type": "base64",
            "media_type": "application/pdf",
            "data": base64.b64encode(PDF).decode("ascii"),
        },
        "title": "scan.pdf",
    }


def test_text_is_inlined_naming_its_file() -> None:
    block = agent_runtime.file_block("notes ✓.md", "\ufeffline one\nzwei ✓\n".encode())
    assert block == {
        "type": "text",
        "text": '<file name="notes ✓.md">\nline one\nzwei ✓\n\n</file>',
    }


@pytest.mark.parametrize("data", [b"\x00\x01\x02binary", b"caf\xe9 latin-1", b"text\x00nul"])
def test_a_file_the_model_cannot_read_is_refused_by_name(data: bytes) -> None:
    with pytest.raises(ValueError, match=r"^blob\.bin: not UTF-8 text, a PDF or a PNG"):
        agent_runtime.file_block("blob.bin", data)


def test_an_image_over_the_api_limit_is_refused_by_name() -> None:
    big = PNG + b"\x00" * (agent_runtime.MAX_IMAGE_BASE64 * 3 // 4)
    with pytest.raises(ValueError, match=r"^huge\.png: too large to show the model"):
        agent_runtime.file_block("huge.png", big)


def _attach(monkeypatch: pytest.MonkeyPatch, **files: Path) -> None:
    named = {name.replace("_", "."): str(path) for name, path in files.items()}
    monkeypatch.setenv(INPUT_FILES_VARIABLE, json.dumps(named))


def test_standalone_shows_attachments_and_plain_paths_to_the_model(
    fake_api: FakeMessagesAPI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "n.txt").write_text("amounts: 1, 2", encoding="utf-8")
    (tmp_path / "s.pdf").write_bytes(PDF)
    (tmp_path / "chart.png").write_bytes(PNG)
    _attach(monkeypatch, notes_txt=tmp_path / "n.txt", scan_pdf=tmp_path / "s.pdf")
    files = ["notes.txt", "scan.pdf", str(tmp_path / "chart.png")]
    assert agent_runtime.call_llm("summarise", files=files).startswith("ok")
    [request] = fake_api.messages()
    content = request.body["messages"][0]["content"]
    assert [block["type"] for block in content] == ["text", "document", "image", "text"]
    assert content[0]["text"] == '<file name="notes.txt">\namounts: 1, 2\n</file>'
    assert content[1]["title"] == "scan.pdf"
    assert content[2]["source"]["media_type"] == "image/png"
    assert content[3] == {"type": "text", "text": "summarise"}
    assert "tools" not in request.body


def test_standalone_refuses_a_folder_or_an_unreadable_kind_before_any_call(
    fake_api: FakeMessagesAPI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "reports").mkdir()
    (tmp_path / "blob.bin").write_bytes(b"\x00\x01")
    _attach(monkeypatch, reports=tmp_path / "reports")
    with pytest.raises(ValueError, match="reports is a folder"):
        agent_runtime.call_llm("x", files=["reports"])
    with pytest.raises(ValueError, match=r"blob\.bin: not UTF-8 text"):
        agent_runtime.call_llm("x", files=[str(tmp_path / "blob.bin")])
    assert fake_api.messages() == []


# ---- the web -------------------------------------------------------------------------------

SEARCHED = "https://www.python.org/downloads/release/python-3140/"
FETCHED = "https://docs.python.org/3.14/whatsnew/3.14.html"


def searched_turn() -> list[dict[str, Any]]:
    """A search and its results, as a paused first response holds them."""
    return [
        {
            "type": "server_tool_use",
            "id": "srvtoolu_01",
            "name": "web_search",
            "input": {"query": "python 3.14"},
        },
        {
            "type": "web_search_tool_result",
            "tool_use_id": "srvtoolu_01",
            "content": [
                {
                    "type": "web_search_result",
                    "url": SEARCHED,
                    "title": "Python 3.14.0",
                    "encrypted_content": "Eqg-opaque",
                }
            ],
        },
    ]


def fetched_turn(title: str = "What's new\nin 3.14") -> list[dict[str, Any]]:
    """Cited text, a fetch, and text citing the fetched page and the search result again."""
    search_citation = {
        "type": "web_search_result_location",
        "url": SEARCHED,
        "title": "Python 3.14.0",
        "encrypted_index": "Eo8",
        "cited_text": "Python 3.14.0 is the newest major release",
    }
    return [
        {"type": "text", "text": "Python 3.14 came out", "citations": [search_citation]},
        {"type": "text", "text": " in October 2025."},
        {
            "type": "server_tool_use",
            "id": "srvtoolu_02",
            "name": "web_fetch",
            "input": {"url": FETCHED},
        },
        {
            "type": "web_fetch_tool_result",
            "tool_use_id": "srvtoolu_02",
            "content": {
                "type": "web_fetch_result",
                "url": FETCHED,
                "retrieved_at": "2026-10-01T00:00:00Z",
                "content": {
                    "type": "document",
                    "title": title,
                    "citations": {"enabled": True},
                    "source": {"type": "text", "media_type": "text/plain", "data": "page"},
                },
            },
        },
        {
            "type": "text",
            "text": " It frees the GIL.",
            "citations": [
                {
                    "type": "char_location",
                    "document_index": 0,
                    "document_title": title,
                    "start_char_index": 0,
                    "end_char_index": 4,
                    "cited_text": "page",
                },
                search_citation,
            ],
        },
    ]


ANSWER = (
    "Python 3.14 came out in October 2025. It frees the GIL.\n\nSources:\n"
    f"- Python 3.14.0 — {SEARCHED}\n- What's new in 3.14 — {FETCHED}"
)


def test_web_tools_are_the_plain_search_and_fetch_tools() -> None:
    assert agent_runtime.web_tools(5) == [
        {"type": "web_search_20250305", "name": "web_search", "max_uses": 5},
        {
            "type": "web_fetch_20250910",
            "name": "web_fetch",
            "max_uses": agent_runtime.MAX_FETCHES_PER_CALL,
            "citations": {"enabled": True},
        },
    ]
    with pytest.raises(ValueError, match="at least 1"):
        agent_runtime.web_tools(0)


def test_sources_are_listed_once_each_in_first_cited_order() -> None:
    text, sources = agent_runtime.answer_with_sources(searched_turn() + fetched_turn())
    assert text == ANSWER
    assert sources == [
        {"title": "Python 3.14.0", "url": SEARCHED},
        {"title": "What's new in 3.14", "url": FETCHED},
    ]


def test_a_fetched_page_is_found_by_its_index_when_the_citation_has_no_title() -> None:
    blocks = fetched_turn(title="")
    del blocks[-1]["citations"][0]["document_title"]
    text, sources = agent_runtime.answer_with_sources(blocks)
    assert sources[1] == {"title": FETCHED, "url": FETCHED}, "the URL stands in for a title"
    assert text.endswith(f"\n- {FETCHED} — {FETCHED}")


def test_documents_that_are_not_web_pages_and_odd_citations_are_no_sources() -> None:
    blocks: list[dict[str, Any]] = [
        {
            "type": "text",
            "text": "From your report.",
            "citations": [
                {"type": "char_location", "document_index": 0, "document_title": "report.pdf"},
                {"type": "page_location", "document_index": 5},
                {"type": "web_search_result_location", "url": "javascript:alert(1)"},
                {"type": "web_search_result_location", "url": "https://a.example/x y"},
                {"type": "content_block_location", "document_index": 0},
                "not a citation",
            ],
        },
        {"type": "thinking", "thinking": "", "signature": "s"},
    ]
    assert agent_runtime.answer_with_sources(blocks) == ("From your report.", [])


def _message(content: list[dict[str, Any]], stop_reason: str) -> Reply:
    usage = {"input_tokens": 10, "output_tokens": 5}
    body = {
        "id": "msg_web",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-5-5",
        "content": content,
        "stop_reason": stop_reason,
        "usage": {**usage, "server_tool_use": {"web_search_requests": 1, "web_fetch_requests": 0}},
    }
    return Reply(body=json.dumps(body))


def test_standalone_web_sends_the_tools_continues_a_pause_and_cites(
    fake_api: FakeMessagesAPI, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MAX_SEARCHES_PER_AGENT", "2")
    page = ("Python 3.14.0", SEARCHED, "Python 3.14.0 was released on 7 October 2025.")
    fake_api.queue(web_reply([page], pause=True))
    answer = agent_runtime.call_llm("When did 3.14 come out?", web=True)
    first, second = fake_api.messages()
    assert first.body["tools"] == second.body["tools"] == agent_runtime.web_tools(2)
    question = {"role": "user", "content": "When did 3.14 come out?"}
    assert first.body["messages"] == [question]
    assert first.reply["stop_reason"] == "pause_turn"
    assert second.body["messages"] == [
        question,
        {"role": "assistant", "content": first.reply["content"]},
    ], "the paused turn goes back unchanged, with no new user message"
    assert second.status == 200, "the fake 400s an edited continuation, as the API does"
    assert answer.startswith("Here is what I found. Python 3.14.0 was released")
    assert answer.endswith(f"\n\nSources:\n- Python 3.14.0 — {SEARCHED}")


def test_standalone_web_gives_up_continuing_after_the_cap(
    fake_api: FakeMessagesAPI,
) -> None:
    fake_api.handler = lambda request: _message([{"type": "text", "text": "."}], "pause_turn")
    assert agent_runtime.call_llm("loop", web=True) == "." * (1 + agent_runtime.MAX_CONTINUATIONS)
    assert len(fake_api.messages()) == 1 + agent_runtime.MAX_CONTINUATIONS
    assert fake_api.messages()[0].body["tools"][0]["max_uses"] == agent_runtime.DEFAULT_MAX_SEARCHES


# ---- artifacts -----------------------------------------------------------------------------


def test_an_artifact_is_one_frame_with_its_bytes_in_base64(
    scripted: Callable[[Answer], ScriptedBroker],
) -> None:
    def store(frame: dict[str, Any]) -> dict[str, Any]:
        data = base64.b64decode(frame["data"], validate=True)
        return {"ok": True, "name": "report-2.md", "bytes": len(data)}

    broker = scripted(store)
    assert agent_runtime.save_artifact("report.md", "# Totals ✓\n") == "report-2.md"
    assert agent_runtime.save_artifact("chart.png", PNG) == "report-2.md"
    first, second = broker.frames
    assert first == {
        "op": "artifact",
        "name": "report.md",
        "data": base64.b64encode("# Totals ✓\n".encode()).decode("ascii"),
    }
    assert base64.b64decode(second["data"]) == PNG


def test_a_refused_artifact_raises_with_the_brokers_reason(
    scripted: Callable[[Answer], ScriptedBroker],
) -> None:
    message = "the run's artifacts are over ARTIFACTS_MAX_MB (100 MB)"
    scripted(lambda frame: {"ok": False, "error": {"type": "too_large", "message": message}})
    with pytest.raises(BrokerRefused) as caught:
        agent_runtime.save_artifact("big.csv", b"x" * 1000)
    assert (caught.value.kind, caught.value.message) == ("too_large", message)


def test_a_large_artifact_goes_in_pieces_each_a_frame_the_table_allows(
    scripted: Callable[[Answer], ScriptedBroker],
) -> None:
    broker = scripted(lambda frame: {"ok": True, "name": frame["name"], "bytes": 0})
    data = bytes(range(256)) * (9 * 4096)  # 9 MB: three pieces
    assert agent_runtime.save_artifact("big.bin", data) == "big.bin"
    assert [frame.get("more") for frame in broker.frames] == [True, True, None]
    assert b"".join(base64.b64decode(frame["data"]) for frame in broker.frames) == data
    allowed = {"op", *agent_runtime.BROKER_OPS["artifact"].fields}
    for frame in broker.frames:
        assert frame["op"] == "artifact" and set(frame) <= allowed
        assert len(agent_runtime.encode_frame(frame)) < MAX_REQUEST_BYTES


def test_a_piece_refused_stops_the_artifact_there(
    scripted: Callable[[Answer], ScriptedBroker],
) -> None:
    refusal = {"type": "too_large", "message": "over the cap"}
    broker = scripted(
        lambda frame: {"ok": False, "error": refusal} if len(broker.frames) == 2 else
        {"ok": True, "name": "x", "bytes": 0}
    )  # fmt: skip
    with pytest.raises(BrokerRefused, match="over the cap"):
        agent_runtime.save_artifact("big.bin", bytes(13 * 1024 * 1024))
    assert len(broker.frames) == 2, "nothing more is sent once a piece is refused"


@pytest.mark.parametrize("name", ["../x.md", "sub/x.md", ".hidden", "", "a\nb", " x", "a\\b"])
def test_a_bad_artifact_name_fails_before_anything_is_sent(
    name: str, scripted: Callable[[Answer], ScriptedBroker]
) -> None:
    broker = scripted(lambda frame: {"ok": True, "name": "x", "bytes": 0})
    with pytest.raises(ValueError, match="artifact name"):
        agent_runtime.save_artifact(name, "data")
    assert broker.frames == []


def test_artifact_data_must_be_text_or_bytes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ARTIFACTS_VARIABLE, str(tmp_path / "artifacts"))
    with pytest.raises(TypeError, match="str or bytes, not int"):
        agent_runtime.save_artifact("n.txt", 3)  # type: ignore[arg-type]
    assert not (tmp_path / "artifacts").exists()


def test_standalone_writes_artifacts_into_the_named_folder_atomically(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "out" / "artifacts"
    monkeypatch.setenv(ARTIFACTS_VARIABLE, str(folder))
    victim = tmp_path / "victim.txt"
    victim.write_text("untouched")
    folder.mkdir(parents=True)
    (folder / "report.md").symlink_to(victim)
    assert agent_runtime.save_artifact("report.md", "first") == "report.md"
    assert agent_runtime.save_artifact("report.md", "second ✓") == "report.md"
    assert agent_runtime.save_artifact("chart.png", PNG) == "chart.png"
    assert (folder / "report.md").read_text(encoding="utf-8") == "second ✓"
    assert not (folder / "report.md").is_symlink()
    assert victim.read_text() == "untouched", "a symlink is replaced, never written through"
    assert (folder / "chart.png").read_bytes() == PNG
    assert sorted(path.name for path in folder.iterdir()) == ["chart.png", "report.md"]


def test_standalone_artifacts_go_to_artifacts_in_the_current_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(ARTIFACTS_VARIABLE, raising=False)
    monkeypatch.chdir(tmp_path)
    agent_runtime.save_artifact("totals.csv", "a,b\n1,2\n")
    assert (tmp_path / "artifacts" / "totals.csv").read_text() == "a,b\n1,2\n"
