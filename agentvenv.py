"""agentvenv.py — the agents' interpreter and the packages in it. No model calls.

Agents run on `.agent_venv/`, an empty venv of our own interpreter, never on ours: it starts
faster (none of our site-packages' .pth files run) and keeps our packages out of their reach.
Packages go into it only from guardpolicy.ALLOWED_PACKAGES; one that is refused or cannot be
installed is reported (`InstallReport`, which the crew turns into the run's warnings), never
fatal.
"""

from __future__ import annotations

import contextlib
import json
import re
import subprocess
import sys
import threading
import venv
from dataclasses import dataclass, field
from pathlib import Path

from agentgod import config


@dataclass
class InstallReport:
    """What install_dependencies did; never fatal."""

    installed: list[str] = field(default_factory=list)
    """Packages present in the agent venv after the call."""
    refused: list[str] = field(default_factory=list)
    """Packages not in guardpolicy.ALLOWED_PACKAGES."""
    failed: list[str] = field(default_factory=list)
    """Allowed packages pip could not install."""
    detail: str = ""
    """pip's (or the OS's) own words for what failed: the run's warning quotes them."""


_venv_lock = threading.Lock()


def _normalise(package: str) -> str:
    return re.sub(r"[-_.]+", "-", package.strip().lower())


def venv_python(settings: config.Settings | None = None) -> Path:
    return (settings or config.settings()).venv_dir / "bin" / "python"


def agent_python(settings: config.Settings | None = None) -> str:
    """The agents' interpreter: the agent venv's, created (without pip) on first use.

    An empty venv of our own interpreter starts faster than ours (none of our site-packages'
    .pth files run) and keeps our packages out of agents' reach. If it cannot be made, agents
    run with our interpreter.
    """
    python = venv_python(settings)
    if not python.exists():
        # Another agentgod may be creating it at the same moment; the check below decides.
        with _venv_lock, contextlib.suppress(OSError):
            venv.EnvBuilder(with_pip=False, symlinks=True).create(python.parent.parent)
    return str(python) if python.exists() else sys.executable


_PROBE = (
    "import importlib.metadata as m, json, sys\n"
    "found = []\n"
    "for name in sys.argv[1:]:\n"
    "    try:\n"
    "        m.distribution(name)\n"
    "        found.append(name)\n"
    "    except m.PackageNotFoundError:\n"
    "        pass\n"
    "print(json.dumps(found))\n"
)


def install_dependencies(
    packages: list[str], settings: config.Settings | None = None
) -> InstallReport:
    """Install allow-listed packages into the isolated .agent_venv/, never into our interpreter."""
    from agentgod import guardpolicy

    allowed = {_normalise(name) for name in guardpolicy.ALLOWED_PACKAGES}
    wanted = list(dict.fromkeys(_normalise(p) for p in packages if p.strip()))
    report = InstallReport(refused=[p for p in wanted if p not in allowed])
    wanted = [p for p in wanted if p in allowed]
    if not wanted:
        return report
    python = venv_python(settings)
    if agent_python(settings) != str(python):
        report.failed = wanted
        report.detail = f"the agent venv {python.parent.parent} could not be created"
        return report
    with _venv_lock:
        try:
            has_pip = subprocess.run(
                [str(python), "-I", "-m", "pip", "--version"], capture_output=True, timeout=60
            )
            if has_pip.returncode != 0:
                subprocess.run(
                    [str(python), "-I", "-m", "ensurepip", "--default-pip"],
                    check=True,
                    capture_output=True,
                    timeout=300,
                )
            probe = subprocess.run(
                [str(python), "-I", "-c", _PROBE, *wanted],
                capture_output=True,
                text=True,
                timeout=60,
                check=True,
            )
            present = {_normalise(p) for p in json.loads(probe.stdout)}
            missing = [p for p in wanted if p not in present]
            for package in missing:
                done = subprocess.run(
                    [str(python), "-m", "pip", "install", "-q", "--no-input", package],
                    capture_output=True,
                    text=True,
                    timeout=600,
                )
                if done.returncode == 0:
                    present.add(package)
                else:
                    report.failed.append(package)
                    report.detail += done.stderr[-2000:]
            report.installed = [p for p in wanted if p in present]
        except (OSError, subprocess.SubprocessError, ValueError) as error:
            report.failed = [p for p in wanted if p not in report.installed]
            report.detail += str(error)
    return report
