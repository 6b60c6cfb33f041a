"""agent_runtime: the frames it speaks to the broker, and its standalone road to the API."""

from __future__ import annotations

import ast
import json
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import TEST_KEY
from fakeapi import FakeMessagesAPI, Reply

import agent_runtime
from agent_runtime import BROKER_FD_VARIABLE, BrokerRefused, LLMError

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


def test_standalone_has_no_web_search_or_files(fake_api: FakeMessagesAPI) -> None:
    for web, files in ((True, ()), (False, ["a.txt"])):
        with pytest.raises(LLMError) as caught:
            agent_runtime.call_llm("hello", web=web, files=files)
        assert caught.value.kind == "unsupported"
    assert fake_api.messages() == []


def _kept_agent(folder: Path) -> Path:
    """An agent file as generator.py will inline the runtime: its text between the markers."""
    folder.mkdir(parents=True)
    path = folder / "kept_agent.py"
    main = "\nprint(call_llm(sys.argv[1]))\n"
    path.write_text(agent_runtime.runtime_source() + main, encoding="utf-8")
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
    assert nested == {"urllib.error", "urllib.request"}, "only the standalone road needs HTTP"


def test_the_inlined_runtime_defines_what_agents_use() -> None:
    namespace: dict[str, Any] = {"__file__": __file__}
    exec(compile(agent_runtime.runtime_source(), "runtime", "exec"), namespace)
    for name in ("call_llm", "format_previous", "api_key", "LLMError", "BrokerRefused"):
        assert callable(namespace[name]), name
    for name in ("json", "os", "sys", "time", "Path"):
        assert name in namespace, name
    assert "runtime_source" not in namespace, "the module's own helpers stay out of agents"


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
