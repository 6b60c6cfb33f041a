"""rayengine.py — a batch's runs as Ray tasks, when one machine is not enough.

Imported only for `agentgod batch --engine ray` (Ray is the optional extra `.[ray]`). With
`RAY_ADDRESS` set, the batch joins that cluster; without it, `ray.init()` starts a local Ray
instance on this machine. A run goes only to a node that advertises the custom resource
`agentgod` — a node where AgentGOD is installed and its sandbox check passed
(`python -m agentgod.rayengine` prints the resources to start such a node with, or says why the
node does not qualify). There the worker runs the same child command as the local engine
(childrun.Spawner) in a home of its own, with the run's capability as its key and the batch's
gateway as its base URL — never the real key — then hands back the run's reply, its records
and artifacts (runexport), which are written into the submitting home's history here.

A worker (or node) that dies takes the run with it: `ray.get` raises one of Ray's own errors,
which `worker_died` tells from any other failure, and the run is reported as `RunLost` (the
batch records it as crashed from the gateway's bill). The home it left on that machine names
its owner and is swept by the next `work` there. A stopped batch (Ctrl-C) is heard by each
worker from the gateway it asks (`_stop_when_told`), so its run stops as a run at home does and
comes back with its record; resume's retry of it is handed the run it carries on.

Ray's own ports must never be reachable from an untrusted network: anyone who can reach them
runs code on the cluster (README, security model).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from agentgod import config, runexport
from agentgod.childrun import KEY_VARIABLES, Job, JobResult, RunLost, Spawner, child_env
from agentgod.journal import Owner

RESOURCE = "agentgod"
"""The custom resource a node advertises when it can run AgentGOD's runs."""
RUNS_PER_CORE = 2
"""What a node advertises per core: runs mostly wait on the model."""
STOP_GRACE_SECONDS = 30.0
"""How long a stopped batch waits for a run on Ray to come back with its record before it
cancels the run's task by force."""
LOCAL_OBJECT_STORE_BYTES = 128 * 1024 * 1024
"""A local instance's object store: results are small JSON, not the 30 % of memory Ray takes."""
FOLDER_PREFIX = "agentgod-ray-"
"""The temporary folder each run on a worker gets (its home inside, `home/`)."""
OWNER_FILE = "owner.json"
"""In that folder: the worker process that made it (journal.Owner), so leftovers can be told."""


class NodeUnfit(RuntimeError):
    """This machine cannot run AgentGOD's runs as configured (its sandbox check failed)."""


def check_node(settings: config.Settings | None = None) -> None:
    """The sandbox check a node must pass to advertise RESOURCE: with SANDBOX=strict, the
    kernel's Landlock and seccomp walls (raises NodeUnfit saying why not)."""
    from agentgod import sandbox

    settings = settings or config.settings()
    if settings.sandbox == "strict":
        try:
            sandbox.require_strict()
        except sandbox.SandboxUnavailable as error:
            raise NodeUnfit(str(error)) from None


def node_resources(settings: config.Settings | None = None) -> dict[str, float]:
    """The resources this node may advertise (`ray start --resources=...`)."""
    check_node(settings)
    return {RESOURCE: float(RUNS_PER_CORE * (os.cpu_count() or 1))}


def work(job: dict[str, Any]) -> dict[str, Any]:
    """On the worker: run one job in a home of its own and hand back what it left.

    The environment is the worker's own without any key, plus the job's (the capability and
    the gateway's URL); `--out` is the submitting side's business. The home sits in a folder
    that names this process as its owner, and the run dies with this process: a worker killed
    outright leaves the folder behind, which the next `work` on this machine sweeps.
    """
    sweep_leftovers()
    folder = Path(tempfile.mkdtemp(prefix=FOLDER_PREFIX))
    try:
        (folder / OWNER_FILE).write_text(Owner.this_process().to_json(), encoding="utf-8")
        home = folder / "home"
        home.mkdir(mode=0o700)
        env = {**child_env(), "AGENTGOD_HOME": str(home)}
        args = list(job["args"])
        if "--out" in args:
            at = args.index("--out")
            del args[at : at + 2]
        if job.get("carried"):  # the run a retry carries on: here, as it is at home
            runexport.take_in(job["carried"], home)
        spawner = Spawner(env, die_with_parent=True)
        cwd = job["cwd"] if os.path.isdir(job["cwd"]) else str(home)
        ended = threading.Event()
        threading.Thread(
            target=_stop_when_told,
            args=(dict(job["env"]), spawner, ended),
            name="agentgod-stop-watch",
            daemon=True,
        ).start()
        try:
            result = spawner.run(Job(job["run_id"], tuple(args), job["env"], cwd))
        except KeyboardInterrupt:  # ray.cancel: the run archives itself as interrupted first
            spawner.interrupt()
            raise
        finally:
            ended.set()
        return {
            "exit_code": result.exit_code,
            "reply": result.reply,
            "stderr": result.stderr,
            "seconds": result.seconds,
            "record": runexport.export(home, job["run_id"]),
        }
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _stop_when_told(env: dict[str, str], spawner: Spawner, ended: threading.Event) -> None:
    """Ask the batch's gateway, as the run does (its URL and capability), whether the batch was
    stopped, until the run ends; when it was, stop the run as Ctrl-C stops one at home (SIGINT:
    it archives itself as interrupted, and `work` hands that record back). A gateway that does
    not answer is asked again a moment later: the run's own calls will say if it is gone."""
    import urllib.error
    import urllib.request

    from agentgod.gateway import STOP_PATH, STOP_WAIT_SECONDS

    url = env.get("ANTHROPIC_BASE_URL", "").rstrip("/") + STOP_PATH
    asking = urllib.request.Request(url, headers={"x-api-key": env.get("ANTHROPIC_API_KEY", "")})
    while not ended.is_set():
        try:
            with urllib.request.urlopen(asking, timeout=STOP_WAIT_SECONDS + 10) as answer:
                told = json.loads(answer.read() or b"{}").get("stop") is True
        except (OSError, ValueError, urllib.error.URLError):
            ended.wait(1.0)
            continue
        if told and not ended.is_set():
            spawner.interrupt()
            return


def sweep_leftovers(root: Path | None = None) -> list[Path]:
    """Remove the folders `work` left in `root` (the temporary folder) when the worker that
    owned each was killed outright; the ones removed.

    A folder is removed only when it is ours (this user's, not a link) and names its owner, and
    that owner is gone (journal.Owner: this host's process with the same start time; one on
    another host, or one whose owner cannot be read — just made, or left by an older version —
    is never touched). Its run died with its owner (Spawner's die_with_parent), so nothing
    still writes in it.
    """
    root = root or Path(tempfile.gettempdir())
    swept: list[Path] = []
    try:
        found = list(root.glob(FOLDER_PREFIX + "*"))
    except OSError:
        return swept
    for folder in found:
        try:
            if folder.is_symlink() or not folder.is_dir() or folder.stat().st_uid != os.getuid():
                continue
            owner = Owner.parse((folder / OWNER_FILE).read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError):
            continue
        if owner is None or owner.alive():
            continue
        shutil.rmtree(folder, ignore_errors=True)
        swept.append(folder)
    return swept


class RayEngine:
    """batch.Engine on Ray: each job a Ray task needing one RESOURCE."""

    gateway_host = "127.0.0.1"
    """Loopback reaches a local Ray instance's workers; a cluster's workers need --listen and
    --gateway-url (a TLS proxy or a tunnel in front of it, never the plain port on an open
    network), so nothing is exposed unless asked for."""

    def __init__(self, parallel: int, settings: config.Settings | None = None) -> None:
        import ray

        _reports_to_stderr()
        self._ray = ray
        self._refs: dict[str, Any] = {}
        self._started = False
        """This engine started the Ray instance (a local one), so it shuts it down."""
        address = os.environ.get("RAY_ADDRESS") or None
        if not ray.is_initialized():
            options: dict[str, Any] = {
                "address": address,
                "log_to_driver": False,
                "include_dashboard": False,
                "logging_level": "ERROR",
            }
            if address is None:
                options["resources"] = {
                    RESOURCE: float(max(parallel, RUNS_PER_CORE * (os.cpu_count() or 1)))
                }
                options["object_store_memory"] = LOCAL_OBJECT_STORE_BYTES
                check_node(settings)
            with _without_key():
                ray.init(**options)
            self._started = True
        self._remote = ray.remote(num_cpus=0, resources={RESOURCE: 1}, max_retries=0)(work)

    def run(self, job: Job) -> JobResult:
        payload = {
            "run_id": job.run_id,
            "args": list(job.args),
            "env": dict(job.env),
            "cwd": job.cwd,
            "carried": runexport.export(config.home(), job.retries) if job.retries else None,
        }
        ref = self._remote.remote(payload)
        self._refs[job.run_id] = ref
        try:
            done: dict[str, Any] = self._ray.get(ref)
        except Exception as error:
            if isinstance(error, self._ray.exceptions.TaskCancelledError):
                raise RunLost(
                    f"stopped, and its Ray worker did not hand its record back within "
                    f"{STOP_GRACE_SECONDS:g} s",
                    interrupted=True,
                ) from error
            if worker_died(error):
                raise RunLost(
                    "the Ray worker running it died, or its machine, before its answer came back "
                    f"({type(error).__name__}: {_first_line(error)})"
                ) from error
            raise
        finally:
            self._refs.pop(job.run_id, None)
        extra: dict[str, Any] = {}
        record = done.get("record")
        reply = done.get("reply")
        if record is not None:
            made = runexport.take_in(record)
            extra["artifacts"] = [str(item.path) for item in made]
            out = _out_folder(job.args)
            if out is not None and made:
                from agentgod import artifacts

                copies = artifacts.copy_out(made, out)
                extra["copied"] = [str(path) for path in copies]
            if isinstance(reply, dict):
                _local_paths(reply, made, record)
        return JobResult(
            int(done["exit_code"]),
            reply if isinstance(reply, dict) else None,
            str(done.get("stderr") or ""),
            float(done.get("seconds") or 0.0),
            extra,
        )

    def interrupt(self) -> None:
        """The batch was stopped: each run is told by the gateway it asks (`work`) and comes
        back with its record. A run still out STOP_GRACE_SECONDS later (a worker that cannot
        reach the gateway) is cancelled by force: it ends as interrupted, its record lost."""
        timer = threading.Timer(STOP_GRACE_SECONDS, self._cancel_all)
        timer.daemon = True
        timer.start()

    def _cancel_all(self) -> None:
        for ref in list(self._refs.values()):
            with contextlib.suppress(Exception):
                self._ray.cancel(ref, force=True)

    def close(self) -> None:
        """Leave the cluster; a local instance this engine started is shut down (the command
        ends with os._exit, which would skip Ray's own exit hook and leave it running)."""
        if self._started:
            self._ray.shutdown()
            self._started = False


def _reports_to_stderr() -> None:
    """What the cluster reports to this driver (a worker that died, a node gone) goes to stderr.

    Ray's driver prints those reports to stdout, where a batch's answers go, one JSON object a
    line: a worker's death would break every reader of them. Ray has no setting for it, so its
    printer (a private function, looked up by name each time a report comes) is wrapped to
    print as an error; a Ray without it is left as it is.
    """
    try:
        from ray._private import worker
    except ImportError:
        return
    printer = getattr(worker, "print_to_stdstream", None)
    if printer is None or getattr(printer, "agentgod_stderr", False):
        return

    def to_stderr(data: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
        return printer({**data, "is_err": True}, *args, **kwargs)

    to_stderr.agentgod_stderr = True  # type: ignore[attr-defined]
    worker.print_to_stdstream = to_stderr


def worker_died(error: Exception) -> bool:
    """Whether Ray says the process or machine running the task died (or the machine that held
    its result): the run crashed, and its record went with it. Ray's own classes tell: a
    worker that crashed or was killed for memory, a node or its raylet gone, a result lost with
    its node (no retries: nothing can rebuild it). Anything `work` itself raised (a
    RayTaskError, whatever it wraps) and Ray's other errors are not a crash."""
    from ray import exceptions

    if isinstance(error, exceptions.RayTaskError):
        return False
    died = (
        exceptions.WorkerCrashedError,
        exceptions.NodeDiedError,
        exceptions.LocalRayletDiedError,
        exceptions.OutOfMemoryError,
        exceptions.ObjectLostError,
    )
    not_a_death = (
        exceptions.ObjectFreedError,
        exceptions.ReferenceCountingAssertionError,
        exceptions.OwnerDiedError,  # the owner is this process, which is alive
    )
    return isinstance(error, died) and not isinstance(error, not_a_death)


def _first_line(error: Exception) -> str:
    """What Ray said, in one line (its messages run to paragraphs of advice)."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return (lines[0] if lines else "no detail")[:300]


@contextlib.contextmanager
def _without_key() -> Iterator[None]:
    """The real key out of this process's environment while Ray starts: the processes of a
    local Ray instance (and so every worker) inherit it, and none of them may hold the key.
    It is back the moment Ray is up; nothing of ours reads it meanwhile (the gateway's road
    is made later, from the settings)."""
    kept = {name: os.environ.pop(name) for name in KEY_VARIABLES if name in os.environ}
    try:
        yield
    finally:
        os.environ.update(kept)


def _out_folder(args: tuple[str, ...]) -> Path | None:
    if "--out" in args:
        return Path(args[args.index("--out") + 1])
    return None


def _local_paths(reply: dict[str, Any], made: list[Any], record: dict[str, Any]) -> None:
    """The reply's artifact and run-file paths, as they are in this home now."""
    by_name = {item.name: str(item.path) for item in made}
    for item in reply.get("artifacts") or []:
        if isinstance(item, dict) and item.get("name") in by_name:
            item["path"] = by_name[item["name"]]
    run_file = record.get("run_file")
    if run_file and isinstance(reply.get("run_file"), str):
        reply["run_file"] = str(config.runs_dir() / Path(run_file["name"]).name)


def main() -> int:
    """`python -m agentgod.rayengine`: the resources this node may advertise, or why not."""
    try:
        print(json.dumps(node_resources()))
    except NodeUnfit as error:
        print(f"this node cannot run AgentGOD's runs: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
