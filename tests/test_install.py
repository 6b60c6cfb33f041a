"""Installed for real, next to packages that own the names our modules have in the checkout.

`llm` is the import name of a popular CLI, and `models`, `config`, `events`… are names any project
may use. The checkout installs as one package, `agentgod`, so a venv that already holds an `llm`
and a `models` keeps both, and the command, a whole run (sandbox, broker, agents) and a kept agent
run by hand all work from site-packages, with nothing of the checkout on the path.

The venv sees this environment's site-packages for the dependencies (anthropic, pydantic…), so
pip builds only the two packages below and the checkout's copy, without fetching anything else.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import venv
from pathlib import Path

import pytest
from conftest import ROOT, TEST_KEY
from fakeapi import FakeMessagesAPI
from scripted import Factory, agent_spec, plan
from test_quickstart import copy_of_checkout, pip_settings, proxies

from agentgod import cli

OTHER_PACKAGES = {"llm": "the other llm", "models": "the other models"}
"""Packages of another project, each with the name of one of our modules, and what it says."""


def _pip(python: Path, *args: str) -> None:
    done = subprocess.run(
        [str(python), "-m", "pip", "install", "-q", *args],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, **pip_settings(), **proxies(), "PYTHONPATH": ""},
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv holding the other project's `llm` and `models`, then AgentGOD (not editable);
    its bin folder."""
    root = tmp_path_factory.mktemp("install")
    venv.create(root / "venv", system_site_packages=True, with_pip=True)
    python = root / "venv" / "bin" / "python"
    other = root / "other"
    for name, says in OTHER_PACKAGES.items():
        (other / name).mkdir(parents=True)
        (other / name / "__init__.py").write_text(f"SAYS = {says!r}\n")
    (other / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools>=68"]\nbuild-backend = "setuptools.build_meta"\n'
        '[project]\nname = "other-project"\nversion = "1.0"\n'
        '[tool.setuptools]\npackages = ["llm", "models"]\n'
    )
    _pip(python, str(other))
    _pip(python, "--no-deps", str(copy_of_checkout(root / "checkout")))
    return python.parent


def _site_packages(bin_folder: Path) -> Path:
    done = subprocess.run(
        [
            str(bin_folder / "python"),
            "-c",
            "import sysconfig; print(sysconfig.get_path('purelib'))",
        ],
        capture_output=True,
        text=True,
        check=True,
        env={"PATH": os.defpath},
    )
    return Path(done.stdout.strip())


def test_one_name_goes_into_site_packages(installed: Path) -> None:
    site = _site_packages(installed)
    (record,) = site.glob("agentgod-*.dist-info/RECORD")
    tops = {line.split(",")[0].split("/")[0] for line in record.read_text().splitlines()}
    assert tops == {"agentgod", record.parent.name, ".."}, "the package, its metadata, the script"
    shipped = {path.stem for path in (site / "agentgod").glob("*.py")}
    assert shipped == {path.stem for path in ROOT.glob("*.py")}, "every module, and nothing else"
    assert not (site / "agentgod" / "tests").exists() and not (site / "agentgod" / "bench").exists()


def test_the_other_packages_stay_themselves(installed: Path, tmp_path: Path) -> None:
    done = subprocess.run(
        [
            str(installed / "python"),
            "-c",
            "import llm, models, agentgod.llm, agentgod.models; "
            "print(llm.SAYS); print(models.SAYS); print(agentgod.llm.__file__)",
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={"PATH": os.defpath, "HOME": str(tmp_path)},
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    said_llm, said_models, ours = done.stdout.splitlines()
    assert (said_llm, said_models) == (OTHER_PACKAGES["llm"], OTHER_PACKAGES["models"])
    assert Path(ours).is_relative_to(_site_packages(installed)), "ours, from site-packages"


def test_the_installed_command_runs_a_whole_task_and_its_kept_agent_runs_by_hand(
    installed: Path, fake_api: FakeMessagesAPI, tmp_path: Path
) -> None:
    factory = Factory(fake_api)
    factory.plans = [plan(agent_spec("fact_finder"), agent_spec("summariser", ["fact_finder"]))]
    home = tmp_path / "user"
    home.mkdir()
    env = {
        "PATH": f"{installed}{os.pathsep}{os.defpath}",
        "HOME": str(home),
        "AGENTGOD_HOME": str(home / ".agentgod"),
        "LANG": "C.UTF-8",
        "ANTHROPIC_BASE_URL": fake_api.base_url,
        "ANTHROPIC_API_KEY": TEST_KEY,
        "SANDBOX": "auto",
    }
    version = subprocess.run(
        ["agentgod", "--version"], capture_output=True, text=True, env=env, cwd=home, timeout=60
    )
    assert version.stdout.strip() == f"agentgod {cli.__version__}", version.stderr
    done = subprocess.run(
        ["agentgod", "--json", "--no-input", "--keep", "find the facts about otters, then sum up"],
        capture_output=True,
        text=True,
        env=env,
        cwd=home,
        timeout=300,
    )
    reply = json.loads(done.stdout)
    assert reply["ok"], done.stderr
    assert reply["answer"] == "MERGED: fact_finder, summariser"
    assert sorted(reply["kept"]) == ["fact_finder", "summariser"]
    assert [agent["ok"] for agent in reply["agents"]] == [True, True]
    assert len(factory.of("agent")) == 2, "both agents reached the model through the broker"

    kept = home / ".agentgod" / "inventory" / "agents" / "fact_finder.py"
    by_hand = subprocess.run(
        [sys.executable, "-I", "-S", str(kept)],
        input=json.dumps({"task": "what do otters eat?", "previous_outputs": {}}),
        capture_output=True,
        text=True,
        env={
            "PATH": "/usr/bin:/bin",
            "ANTHROPIC_BASE_URL": fake_api.base_url,
            "ANTHROPIC_API_KEY": TEST_KEY,
        },
        timeout=60,
    )
    assert by_hand.returncode == 0, by_hand.stderr
    assert by_hand.stdout.strip() == "result from fact_finder"
