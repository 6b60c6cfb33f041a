"""The README's Quick start, run as written, the way a new user on a fresh machine runs it.

The commands are read from README.md itself, so the two cannot drift apart. They run through
bash in a copy of the checkout's tracked files (no build artefacts or data of this working tree),
with a home of their own, no venv active and a `python3` outside any venv first on PATH: the
environment running the tests is never the one tested. The model is the fake Messages API.

pip installs the dependencies (its cache and configuration are reused), so this is the suite's
slowest test; `python -m pytest -q -k "not quickstart"` leaves it out.
"""

from __future__ import annotations

import hashlib
import os
import re
import shlex
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT
from fakeapi import FakeMessagesAPI
from scripted import Factory, agent_spec, plan

from agentgod import cli

KEY = "sk-ant-quickstart-0123456789abcdef"
ANSWER = "Event sourcing: a full audit trail, at the price of replays and schema care."

ARTEFACTS = {".venv", "__pycache__", "build"}
"""What installing and running may leave in a checkout (all in .gitignore); data never."""


def quick_start(readme: str) -> list[str]:
    """The command lines of the ```bash block under "## Quick start".

    Fails loudly when the section or its block is gone or no longer two commands ending in a
    one-shot task, rather than testing something else than what the README tells people.
    """
    section = re.search(r"^## Quick start\n(.*?)(?=^## |\Z)", readme, re.MULTILINE | re.DOTALL)
    assert section, 'README.md has no "## Quick start" section'
    block = re.search(r"^```(\w*)\n(.*?)^```$", section.group(1), re.MULTILINE | re.DOTALL)
    assert block, "README.md's Quick start has no fenced block"
    assert block.group(1) == "bash", f"the Quick start block is {block.group(1)!r}, not bash"
    lines = [line for line in block.group(2).splitlines() if line.strip()]
    assert len(lines) == 2, f"the Quick start is no longer two commands: {lines}"
    words = shlex.split(lines[1])
    assert len(words) == 2 and Path(words[0]).name == "agentgod", (
        f'the second Quick start command is not `agentgod "task"`: {lines[1]!r}'
    )
    return lines


@pytest.mark.parametrize(
    "readme",
    [
        "# AgentGOD\n\nNo quick start here.\n",
        "## Quick start\n\nJust run it.\n\n## Next\n\n```bash\nagentgod x\n```\n",
        "## Quick start\n\n```\npip install .\nagentgod 'task'\n```\n",
        "## Quick start\n\n```bash\npip install .\nagentgod key set\nagentgod 'task'\n```\n",
        "## Quick start\n\n```bash\npip install .\nagentgod --plain 'task'\n```\n",
    ],
)
def test_a_quick_start_of_another_shape_fails_loudly(readme: str) -> None:
    with pytest.raises(AssertionError):
        quick_start(readme)


def base_python() -> Path:
    """An interpreter outside any venv: the one the running interpreter's venv, if any, is of."""
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    for candidate in (
        Path(sys.base_prefix) / "bin" / version,
        Path(getattr(sys, "_base_executable", sys.executable)),
    ):
        if candidate.is_file() and not (candidate.parent.parent / "pyvenv.cfg").exists():
            return candidate
    raise AssertionError(f"no interpreter outside a venv under {sys.base_prefix}")


def outside_venvs(path: str) -> list[str]:
    """PATH without the bin directory of any venv (the active one or any other)."""
    active = os.environ.get("VIRTUAL_ENV")
    return [
        entry
        for entry in path.split(os.pathsep)
        if entry
        and not (Path(entry).parent / "pyvenv.cfg").exists()
        and not (active and Path(entry) == Path(active) / "bin")
    ]


def pip_settings() -> dict[str, str]:
    """pip as this machine configured it (index, certificates, cache), though HOME will differ."""
    found = {name: value for name, value in os.environ.items() if name.startswith("PIP_")}
    config_home = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config")
    if "PIP_CONFIG_FILE" not in found and (config_home / "pip" / "pip.conf").is_file():
        found["PIP_CONFIG_FILE"] = str(config_home / "pip" / "pip.conf")
    cache_home = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    found.setdefault("PIP_CACHE_DIR", str(cache_home / "pip"))
    found |= {"PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_NO_INPUT": "1"}
    return found


def proxies() -> dict[str, str]:
    """The machine's proxies, which pip may need; the fake Messages API is reached directly."""
    found = {
        name: value
        for name, value in os.environ.items()
        if name.lower().endswith("_proxy") and name.lower() != "no_proxy"
    }
    if found:
        direct = ",".join(filter(None, [os.environ.get("no_proxy", ""), "127.0.0.1,localhost"]))
        found |= {"no_proxy": direct, "NO_PROXY": direct}
    return found


def copy_of_checkout(target: Path) -> Path:
    """The working tree's files git would commit (edits and new files included), nothing else:
    no venv, build output or data of this working tree."""
    listed = subprocess.run(
        ["git", "-C", str(ROOT), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        capture_output=True,
        check=True,
    ).stdout
    for name in listed.decode().split("\0"):
        source = ROOT / name
        if name and source.is_file():
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / name)
    return target


def snapshot(tree: Path) -> dict[str, str]:
    """Every file under `tree` but the artefacts, by relative path, with its content's hash."""
    return {
        str(path.relative_to(tree)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in tree.rglob("*")
        if path.is_file()
        and not any(
            part in ARTEFACTS or part.endswith(".egg-info") for part in path.relative_to(tree).parts
        )
    }


def test_the_readme_quick_start_works_as_written(fake_api: FakeMessagesAPI, tmp_path: Path) -> None:
    commands = quick_start((ROOT / "README.md").read_text(encoding="utf-8"))
    command, task = shlex.split(commands[1])
    fake_api.valid_keys = {KEY}
    factory = Factory(fake_api)
    factory.plans = [plan(agent_spec("tradeoff_lister"), complexity="simple")]
    factory.merge_reply = lambda request: ANSWER

    checkout = copy_of_checkout(tmp_path / "checkout")
    before = snapshot(checkout)
    home = tmp_path / "user"
    home.mkdir()
    shims = tmp_path / "shims"
    shims.mkdir()
    (shims / "python3").write_text(f'#!/bin/sh\nexec {shlex.quote(str(base_python()))} "$@"\n')
    (shims / "python3").chmod(0o755)
    env = {
        "PATH": os.pathsep.join([str(shims), *outside_venvs(os.environ.get("PATH", os.defpath))]),
        "HOME": str(home),
        "LANG": "C.UTF-8",
        "ANTHROPIC_BASE_URL": fake_api.base_url,
        **pip_settings(),
        **proxies(),
    }

    # The key goes in as `key set` reads it from a pipe; nothing else in the block reads stdin.
    done = subprocess.run(
        ["bash", "-c", "set -e\n" + "\n".join(commands) + "\n"],
        input=KEY + "\n",
        capture_output=True,
        text=True,
        cwd=checkout,
        env=env,
        timeout=900,
    )
    assert done.returncode == 0, (done.stdout[-3000:], done.stderr[-3000:])
    assert done.stdout.rstrip("\n").endswith(ANSWER), done.stdout[-2000:]
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    (planned,) = factory.of("plan")
    assert task in planned.prompt, "the README's task is the one planned"
    assert {request.api_key for request in fake_api.messages()} == {KEY}, "the saved key was used"

    after = snapshot(checkout)
    written = sorted(name for name in after if after[name] != before.get(name))
    assert not written, f"written into the checkout: {written}"
    data = home / ".agentgod"
    assert (data / ".env").is_file(), f"the key was not saved in {data}"
    assert stat.S_IMODE((data / ".env").stat().st_mode) == 0o600
    assert f"ANTHROPIC_API_KEY={KEY}" in (data / ".env").read_text(encoding="utf-8")
    assert (data / "runs" / "history.db").is_file()
    assert list((data / "runs").glob("*.md")), "the run file is in the home"

    installed = checkout / command if "/" in command else shutil.which(command, path=env["PATH"])
    assert installed, f"{command} is not on the Quick start's PATH"

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(installed), *args], capture_output=True, text=True, cwd=home, env=env, timeout=120
        )

    version = run("--version")
    assert (version.returncode, version.stdout.strip()) == (0, f"agentgod {cli.__version__}")
    usage = run("--help")
    assert usage.returncode == 0 and "usage" in usage.stdout.lower(), usage.stderr

    # The command runs the copy's code in the venv the README made, not the tests' environment.
    python = Path(installed).parent / "python"
    where = subprocess.run(
        [
            str(python),
            "-c",
            "import sys; from agentgod import main; print(sys.prefix, main.__file__, sep='\\n')",
        ],
        capture_output=True,
        text=True,
        cwd=home,
        env=env,
        check=True,
    ).stdout.splitlines()
    assert Path(where[0]).resolve() == Path(installed).parent.parent.resolve() != Path(sys.prefix)
    assert Path(where[1]).resolve() == (checkout / "main.py").resolve()
