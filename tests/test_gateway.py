"""The gateway: the one key holder a batch's runs reach the model through.

It runs here, in the test, with the real road (`llm.relay_for`) to the fake Messages API;
clients are our own road (`llm`, given settings whose key is a capability and whose base URL is
the gateway) and real `agentgod --json --no-input` runs, each given a capability as its key and
the gateway as its base URL.
"""

from __future__ import annotations

import json
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import TEST_KEY, agentgod_command, agentgod_env
from fakeapi import FakeMessagesAPI, Page, Reply
from hypothesis import given
from hypothesis import strategies as st
from scripted import Factory, agent_spec, plan

from agentgod import broker, config, gateway, ledger, llm, models, problems, wire
from agentgod.kinds import BudgetOwner

MODEL = "claude-sonnet-5-5"


@pytest.fixture
def gate(fake_api: FakeMessagesAPI) -> Iterator[gateway.Gateway]:
    """A gateway holding the fake's key (the test's environment), with no budget."""
    with gateway.Gateway(llm.relay_for(config.settings()), ledger.Usage()) as server:
        yield server


def client_of(server: gateway.Gateway, capability: str) -> config.Settings:
    """Settings whose calls go through `server` with `capability` as their key."""
    return config.settings({"ANTHROPIC_API_KEY": capability, "ANTHROPIC_BASE_URL": server.url})


def billed(api: FakeMessagesAPI) -> float:
    spent = ledger.Usage()
    for request in api.messages():
        if request.status == 200 and isinstance(request.reply, dict):
            spent.record(request.body["model"], request.reply["usage"])
    return spent.cost_usd()


def test_a_call_with_a_capability_reaches_the_api_with_the_real_key(
    fake_api: FakeMessagesAPI, gate: gateway.Gateway
) -> None:
    capability = gate.mint("run1", "b1", models=[MODEL])
    settings = client_of(gate, capability)
    assert llm.complete("hello", model=MODEL, effort=None, max_tokens=64, settings=settings) == "ok"
    [request] = fake_api.messages()
    assert request.api_key == TEST_KEY
    assert capability not in json.dumps(request.headers)
    assert gate.ledger.cost_usd() == pytest.approx(billed(fake_api))
    assert gate.spent_by("b1", "run1") == pytest.approx(billed(fake_api))


def test_a_stream_passes_through_and_is_billed(
    fake_api: FakeMessagesAPI, gate: gateway.Gateway
) -> None:
    fake_api.queue(Reply("one two three four", pieces=["one ", "two ", "three ", "four"]))
    settings = client_of(gate, gate.mint("run1", "b1"))
    pieces: list[str] = []
    done = llm.completion(
        "hi", model=MODEL, effort=None, max_tokens=64, on_text=pieces.append, settings=settings
    )
    assert done.text == "one two three four"
    assert pieces == ["one ", "two ", "three ", "four"], "the pieces arrive as the API sent them"
    assert fake_api.messages()[0].body["stream"] is True
    assert gate.ledger.cost_usd() == pytest.approx(billed(fake_api)) and billed(fake_api) > 0


def test_an_expired_capability_is_refused_clearly(
    fake_api: FakeMessagesAPI, gate: gateway.Gateway
) -> None:
    settings = client_of(gate, gate.mint("run1", "b1", ttl_seconds=-1))
    with pytest.raises(wire.APIStatusError) as refused:
        llm.complete("hello", model=MODEL, effort=None, max_tokens=64, settings=settings)
    assert refused.value.status_code == 401
    problem = problems.explain(refused.value)
    assert problem.kind == "capability_expired"
    assert "expired" in problem.headline and "gateway" in problem.headline
    assert fake_api.messages() == [], "nothing reached the API"
    assert gate.refusals == {"capability_expired": 1}


def test_a_forged_or_altered_capability_and_a_model_not_granted_are_refused(
    fake_api: FakeMessagesAPI, gate: gateway.Gateway
) -> None:
    other = gateway.Minter().mint("run1", "b1")
    good = gate.mint("run1", "b1", models=["claude-haiku-5-5"])
    prefix, _, signature = good.split(".")
    widened = gateway.Minter().mint("run1", "b1")  # any model: signed by another secret
    altered = f"{prefix}.{widened.split('.')[1]}.{signature}"
    for key in (other, altered, TEST_KEY, ""):
        settings = client_of(gate, key or "x")
        with pytest.raises(wire.AuthenticationError):
            llm.complete("hello", model=MODEL, effort=None, max_tokens=64, settings=settings)
    settings = client_of(gate, good)
    with pytest.raises(wire.PermissionDeniedError) as refused:
        llm.complete("hello", model=MODEL, effort=None, max_tokens=64, settings=settings)
    assert problems.explain(refused.value).kind == "model_not_allowed"
    assert "does not allow the model" in problems.explain(refused.value).headline
    assert fake_api.messages() == []


def test_an_exhausted_capability_stops_its_run_as_a_budget_does(
    fake_api: FakeMessagesAPI, gate: gateway.Gateway
) -> None:
    settings = client_of(gate, gate.mint("run1", "b1", usd=0.0001))
    with pytest.raises(ledger.BudgetExhaustedError) as refused:
        llm.complete("hello " * 500, model=MODEL, effort=None, max_tokens=4096, settings=settings)
    assert refused.value.budget_usd == 0.0001
    assert "budget" in problems.explain(refused.value).headline
    assert fake_api.messages() == []
    # The run's share is the run's own cap: the refusal says so, and so does the run's error.
    assert _refusal_body(refused.value)["budget_of"] == "run"
    assert refused.value.owner is BudgetOwner.RUN
    assert problems.explain(refused.value).budget_of == BudgetOwner.RUN


def test_a_call_past_the_batch_budget_is_refused_as_the_batchs_not_the_runs(
    fake_api: FakeMessagesAPI,
) -> None:
    """The share pays, the batch cannot: the refusal names the batch's budget, and the run's
    error says it was the batch's (a batch resumes such a run; it does not resume one its own
    cap stopped)."""
    with gateway.Gateway(
        llm.relay_for(config.settings()), ledger.Usage(budget_usd=0.0001)
    ) as server:
        settings = client_of(server, server.mint("run1", "b1", usd=5.0))
        with pytest.raises(ledger.BudgetExhaustedError) as refused:
            llm.complete(
                "hello " * 500, model=MODEL, effort=None, max_tokens=4096, settings=settings
            )
    assert fake_api.messages() == []
    body = _refusal_body(refused.value)
    assert (body["type"], body["budget_of"], body["budget_usd"]) == (
        "budget_exhausted",
        "batch",
        0.0001,
    )
    assert refused.value.owner is BudgetOwner.BATCH and refused.value.budget_usd == 0.0001
    problem = problems.explain(refused.value)
    assert (problem.kind, problem.budget_of) == ("budget", BudgetOwner.BATCH)
    assert "batch's budget" in problem.headline and "batch resume" in problem.advice


def test_a_budget_refusal_that_names_no_owner_is_taken_as_the_batchs(
    fake_api: FakeMessagesAPI,
) -> None:
    """A gateway from before refusals named whose budget it was: the run takes it as the
    batch's, the reading under which its batch resumes it, as it always did."""
    error = {"type": "budget_exhausted", "message": "the batch budget is spent",
             "spent_usd": 0.5, "budget_usd": 0.5, "needed_usd": 0.01}  # fmt: skip
    fake_api.queue(
        Reply(
            status=402,
            body=json.dumps({"type": "error", "error": error}),
            headers={"x-should-retry": "false"},
        )
    )
    with pytest.raises(ledger.BudgetExhaustedError) as refused:
        llm.complete("hello", model=MODEL, effort=None, max_tokens=64, settings=config.settings())
    assert refused.value.owner is BudgetOwner.BATCH
    assert (refused.value.spent_usd, refused.value.budget_usd) == (0.5, 0.5)
    assert len(fake_api.messages()) == 1, "a refusal for money is not retried"


@given(st.sets(st.sampled_from(list(BudgetOwner))))
def test_a_run_its_own_cap_refused_was_stopped_by_its_own_cap(owners: set[BudgetOwner]) -> None:
    """Whose budget stopped a run: its own whenever its own refused (even if the batch's did
    too), the batch's when only that one did, none when none did."""
    stopped = ledger.stopped_by(owners)
    if BudgetOwner.RUN in owners:
        assert stopped is BudgetOwner.RUN
    elif owners:
        assert stopped is BudgetOwner.BATCH
    else:
        assert stopped is None


def _refusal_body(error: BaseException) -> dict[str, Any]:
    """The gateway's error object as the run's road received it (the refusal's own error)."""
    cause = error.__cause__
    assert isinstance(cause, wire.APIStatusError), cause
    body = cause.body
    assert isinstance(body, dict) and isinstance(body.get("error"), dict), body
    inner: dict[str, Any] = body["error"]
    return inner


def test_the_gateway_lowers_max_tokens_to_what_the_share_can_pay(
    fake_api: FakeMessagesAPI, gate: gateway.Gateway
) -> None:
    settings = client_of(gate, gate.mint("run1", "b1", usd=0.01))
    llm.complete("hello", model=MODEL, effort=None, max_tokens=16_000, settings=settings)
    [request] = fake_api.messages()
    assert request.body["max_tokens"] < 1_000  # $0.01 buys about 1,000 output tokens


BIG_PAGE = Page("https://big.example/report", "The big report", "word " * 120_000)
"""600 kB of text: 150,000 tokens as the fake counts them."""


def fetch_request(max_uses: int = 1) -> dict[str, Any]:
    """A web call as a run's road sends it: one fetch tool with no page cap of its own."""
    return {
        "model": MODEL,
        "max_tokens": 1024,
        "messages": [{"role": "user", "content": f"read {BIG_PAGE.url}"}],
        "tools": [{"type": "web_fetch_20250910", "name": "web_fetch", "max_uses": max_uses}],
    }


def test_a_fetched_page_is_read_no_further_than_the_batch_budget_pays(
    fake_api: FakeMessagesAPI,
) -> None:
    """A fetch whose page is not capped would read all 150,000 tokens of it ($0.45 at the
    cache-write price) under a $0.25 batch budget: the gateway holds every page at its cap and
    cuts the cap to what the budget can pay, as the broker does for an agent's call."""
    fake_api.pages = [BIG_PAGE]
    spent = ledger.Usage(budget_usd=0.25)
    with gateway.Gateway(llm.relay_for(config.settings()), spent) as server:
        llm.forward(fetch_request(), client_of(server, server.mint("run1", "b1")))
    [request] = fake_api.messages()
    fetch = request.tool("web_fetch")
    assert fetch is not None and 0 < fetch["max_content_tokens"] < 150_000 // 2
    [result] = [b for b in request.reply["content"] if b["type"] == "web_fetch_tool_result"]
    read = result["content"]["content"]["source"]["data"]
    assert len(read) <= fetch["max_content_tokens"] * 4 < len(BIG_PAGE.text), "the page was cut"
    assert spent.cost_usd() == pytest.approx(billed(fake_api)) and billed(fake_api) <= 0.25


def test_a_fetch_the_budget_cannot_pay_a_page_for_is_sent_without_its_fetch_tool(
    fake_api: FakeMessagesAPI,
) -> None:
    """A budget that pays for the call and its fetch's fixed part, and not 500 tokens of page."""
    fake_api.pages = [BIG_PAGE]
    request = fetch_request()
    price = models.price_of(MODEL)[0]
    fixed = ledger.tokens_in_bytes(len(json.dumps(request))) + broker.WEB_USE_TOKENS
    budget = (fixed * price.cache_write + ledger.MIN_OUTPUT_TOKENS * price.output) / 1e6 + 0.0005
    spent = ledger.Usage(budget_usd=budget)
    with gateway.Gateway(llm.relay_for(config.settings()), spent) as server:
        llm.forward(request, client_of(server, server.mint("run1", "b1")))
    [sent] = fake_api.messages()
    assert sent.tool("web_fetch") is None
    assert billed(fake_api) <= budget


def test_three_concurrent_runs_under_one_batch_budget_never_pass_it(
    fake_api: FakeMessagesAPI, isolated_home: Path
) -> None:
    """Three whole runs at once, each with its own capability; the batch's budget binds them
    all at the gateway, whatever each run believes about its own spending."""
    factory = Factory(fake_api)
    factory.plans = [plan(agent_spec("first"), agent_spec("second", ["first"]))]
    factory.agent_latency = 0.2
    # Each agent answers at length: about 5,000 output tokens, $0.05 a call at Sonnet's price,
    # so three runs of two agents would cost $0.30 or more.
    factory.agent_reply = lambda name, request: f"result from {name} " + "word " * 4000
    fake_api.honour_max_tokens = True  # what is billed never exceeds what was held
    budget = 0.12
    spent = ledger.Usage(budget_usd=budget)
    with gateway.Gateway(llm.relay_for(config.settings()), spent) as server:
        processes = []
        for n in range(3):
            env = agentgod_env(
                isolated_home,
                SANDBOX="off",
                COUNCIL="off",
                ANTHROPIC_BASE_URL=server.url,
                ANTHROPIC_API_KEY=server.mint(f"run{n}", "b1"),
            )
            processes.append(
                subprocess.Popen(
                    [*agentgod_command(), "--json", "--no-input", f"task number {n} " * 5],
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    text=True,
                    env=env,
                )
            )
        replies = [json.loads(p.communicate(timeout=120)[0]) for p in processes]
    assert billed(fake_api) <= budget + 1e-9
    assert spent.cost_usd() == pytest.approx(billed(fake_api))
    assert server.refusals.get("budget_exhausted", 0) >= 1, "the budget had to refuse"
    stopped = [r for r in replies if not r["ok"] or r.get("budget_exhausted")]
    assert stopped, "a run saw the budget run out"
    for reply in replies:
        if not reply["ok"]:
            assert reply["error"]["type"] == "budget", reply["error"]
            assert reply["error"]["budget_of"] == "batch", "no run has a cap of its own here"
    keys = {request.api_key for request in fake_api.messages()}
    assert keys == {TEST_KEY}


@given(
    run=st.text(min_size=1, max_size=20),
    batch=st.text(max_size=20),
    usd=st.none() | st.floats(min_value=0.0001, max_value=1000),
    models=st.lists(st.text(min_size=1, max_size=30), max_size=3),
)
def test_a_capability_says_what_it_was_minted_with(
    run: str, batch: str, usd: float | None, models: list[str]
) -> None:
    minter = gateway.Minter()
    granted = minter.verify(minter.mint(run, batch, models=models, usd=usd))
    assert (granted.run, granted.batch, granted.usd) == (run, batch, usd)
    assert granted.models == tuple(sorted(models))


def test_the_admin_door_mints_and_reports_only_with_its_token(fake_api: FakeMessagesAPI) -> None:
    import urllib.error
    import urllib.request

    with gateway.Gateway(
        llm.relay_for(config.settings()), ledger.Usage(), admin_token="sesame"
    ) as server:

        def ask(path: str, token: str, body: dict[str, Any] | None = None) -> Any:
            request = urllib.request.Request(
                server.url + gateway.ADMIN_PATH + path,
                data=None if body is None else json.dumps(body).encode(),
                headers={"authorization": f"Bearer {token}"},
            )
            with urllib.request.urlopen(request, timeout=10) as answer:
                return json.loads(answer.read())

        with pytest.raises(urllib.error.HTTPError):
            ask("capabilities", "wrong", {"run": "r"})
        minted = ask("capabilities", "sesame", {"run": "r", "batch": "b", "usd": 1})
        assert server.minter.verify(minted["capability"]).usd == 1.0
        assert ask("ledger", "sesame")["llm_calls"] == 0


def test_requests_past_a_busy_gateway_are_metered_one_by_one(
    fake_api: FakeMessagesAPI, gate: gateway.Gateway
) -> None:
    settings = client_of(gate, gate.mint("run1", "b1"))
    errors: list[BaseException] = []

    def call() -> None:
        try:
            llm.complete("hello", model=MODEL, effort=None, max_tokens=64, settings=settings)
        except BaseException as error:  # pragma: no cover - reported below
            errors.append(error)

    threads = [threading.Thread(target=call) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert not errors
    assert gate.ledger.cost_summary()["llm_calls"] == 8 == len(fake_api.messages())


def test_agentgod_gateway_serves_until_stopped(
    fake_api: FakeMessagesAPI, isolated_home: Path
) -> None:
    """The command on its own: where it listens and its admin token on its first line; a
    capability minted through it carries a call to the API with the real key."""
    import signal
    import urllib.request

    env = agentgod_env(
        isolated_home, ANTHROPIC_BASE_URL=fake_api.base_url, ANTHROPIC_API_KEY=TEST_KEY
    )
    process = subprocess.Popen(
        [*agentgod_command(), "gateway", "--budget", "1"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert process.stdout is not None
        first = json.loads(process.stdout.readline())
        token_file = Path(first["admin_token_file"])
        assert token_file.stat().st_mode & 0o077 == 0
        token = token_file.read_text().strip()
        request = urllib.request.Request(
            first["url"] + gateway.ADMIN_PATH + "capabilities",
            data=json.dumps({"run": "r1", "batch": "b"}).encode(),
            headers={"authorization": f"Bearer {token}"},
        )
        with urllib.request.urlopen(request, timeout=10) as answer:
            capability = json.loads(answer.read())["capability"]
        call = urllib.request.Request(
            first["url"] + "/v1/messages",
            data=json.dumps(
                {"model": MODEL, "max_tokens": 64, "messages": [{"role": "user", "content": "hi"}]}
            ).encode(),
            headers={"x-api-key": capability, "content-type": "application/json"},
        )
        with urllib.request.urlopen(call, timeout=30) as answer:
            assert json.loads(answer.read())["content"][0]["text"] == "ok"
        assert [r.api_key for r in fake_api.messages()] == [TEST_KEY]
        process.send_signal(signal.SIGINT)
        process.wait(30)
        assert not token_file.exists(), "the admin token goes with the gateway"
    finally:
        if process.poll() is None:
            process.kill()


def test_a_client_that_drops_its_connection_is_nothing_to_report(
    gate: gateway.Gateway, capfd: pytest.CaptureFixture[str]
) -> None:
    """A run stopped mid-request resets its connection: the batch's terminal gets no
    traceback from the gateway's server for it."""
    import socket
    import struct

    before = set(threading.enumerate())
    client = socket.create_connection(gate.address)
    client.sendall(b"POST /v1/messages HTTP/1.1\r\nhost: x\r\n")  # headers never finished
    handler = None
    for _ in range(200):  # the server's thread for it, waiting for the rest of the headers
        new = [
            t
            for t in threading.enumerate()
            if t not in before and "process_request" in t.name and t.is_alive()  # started
        ]
        if new:
            handler = new[0]
            break
        threading.Event().wait(0.05)
    assert handler is not None, "the gateway took the connection"
    client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    client.close()  # a reset, not a polite close
    handler.join(10)
    assert not handler.is_alive(), "the handler saw the reset and ended"
    assert "Traceback" not in capfd.readouterr().err
