"""The Jobs endpoints huggingface_hub's HfApi.run_job, inspect_job, fetch_job_logs and wait_for_job call, answered
by running the job's command as a local process in a folder of its own (`hub serve --run-jobs`, off by default: a
write token then runs commands on this machine). The image is not pulled: its place is taken by this machine, and
a command starting with python or python3 runs with the Python serving the Hub. The process gets the job's
environment and secrets over this process's environment without its Hub and huggingface variables, and dies with
the server."""

from __future__ import annotations

import asyncio
import datetime
import json
import os
import secrets
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web

from .app import answer, can_write, read_json
from .rules import HubError, bad_request

MAX_LINES = 20_000  # log lines a job keeps (the oldest go first)
STDIO_LIMIT = 1 << 20  # a log line longer than this is cut


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat().replace("+00:00", "Z")


@dataclass
class Job:
    id: str
    owner: str
    spec: dict[str, Any]
    folder: Path
    created: str = field(default_factory=_now)
    started: str | None = None
    finished: str | None = None
    stage: str = "SCHEDULING"
    message: str | None = None
    lines: list[tuple[str, str]] = field(default_factory=list)  # (timestamp, text)
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    process: asyncio.subprocess.Process | None = None

    def info(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "createdAt": self.created,
            "startedAt": self.started,
            "finishedAt": self.finished,
            "dockerImage": self.spec.get("dockerImage"),
            "spaceId": self.spec.get("spaceId"),
            "command": self.spec.get("command"),
            "arguments": self.spec.get("arguments") or [],
            "environment": self.spec.get("environment") or {},
            "secrets": dict.fromkeys(self.spec.get("secrets") or {}, "******"),  # names only, as the Hub shows
            "flavor": self.spec.get("flavor"),
            "labels": self.spec.get("labels"),
            "owner": {"id": self.owner, "name": self.owner, "type": "user"},
            "status": {"stage": self.stage, "message": self.message},
        }

    def say(self, text: str) -> None:
        self.lines.append((_now(), text))
        del self.lines[:-MAX_LINES]
        self.changed.set()


class Jobs:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.jobs: dict[str, Job] = {}
        self.tasks: set[asyncio.Task[None]] = set()

    def get(self, owner: str, job_id: str) -> Job:
        job = self.jobs.get(job_id)
        if job is None or job.owner != owner:
            raise HubError(404, "NotFound", f"Job {job_id} not found")
        return job

    async def stop_all(self, app: web.Application) -> None:
        for job in self.jobs.values():
            if job.process is not None and job.process.returncode is None:
                job.process.kill()
        for task in list(self.tasks):
            task.cancel()


JOBS: web.AppKey[Jobs] = web.AppKey("jobs", Jobs)


def enable(app: web.Application, root: Path) -> None:
    app[JOBS] = Jobs(root / "jobs")
    app.on_cleanup.append(app[JOBS].stop_all)


def _jobs(request: web.Request) -> Jobs:
    if JOBS not in request.app:
        raise HubError(404, "NotFound", "this local Hub runs no jobs (start it with hub serve --run-jobs)")
    return request.app[JOBS]


def _command(spec: dict[str, Any]) -> list[str]:
    command = spec.get("command")
    if not isinstance(command, list) or not command or not all(isinstance(c, str) for c in command):
        raise bad_request("command must be a non-empty list of strings")
    arguments = spec.get("arguments") or []
    if not isinstance(arguments, list) or not all(isinstance(a, str) for a in arguments):
        raise bad_request("arguments must be a list of strings")
    if command[0] in ("python", "python3"):
        command = [sys.executable, *command[1:]]
    return [*command, *arguments]


def _environment(spec: dict[str, Any]) -> dict[str, str]:
    given = {**(spec.get("environment") or {}), **(spec.get("secrets") or {})}
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in given.items()):
        raise bad_request("environment and secrets must map names to strings")
    inherited = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGING_FACE_", "PACKAGER_HUB_"))}
    return {**inherited, **given}


async def create(request: web.Request) -> web.Response:
    can_write(request)
    jobs = _jobs(request)
    spec = await read_json(request)
    command, environment = _command(spec), _environment(spec)
    job_id = secrets.token_hex(12)
    job = Job(job_id, request.match_info["ns"], spec, jobs.root / job_id)
    job.folder.mkdir(parents=True)
    jobs.jobs[job.id] = job
    task = asyncio.get_running_loop().create_task(_run(job, command, environment))
    jobs.tasks.add(task)
    task.add_done_callback(jobs.tasks.discard)
    return answer(job.info())


async def _run(job: Job, command: list[str], environment: dict[str, str]) -> None:
    from ...infra.lifeline import die_with

    server = os.getpid()
    try:
        job.process = await asyncio.create_subprocess_exec(
            *command,
            cwd=job.folder,
            env=environment,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            limit=STDIO_LIMIT,
            preexec_fn=lambda: die_with(server),
        )
    except OSError as exc:
        job.stage, job.message, job.finished = "ERROR", f"the command could not start: {exc.strerror}", _now()
        job.changed.set()
        return
    job.stage, job.started = "RUNNING", _now()
    job.say("===== Job started =====")
    assert job.process.stdout is not None
    while True:
        try:
            line = await job.process.stdout.readline()
        except ValueError:  # longer than the limit: its start is kept
            line = b"(a line longer than the log keeps)\n"
        if not line:
            break
        job.say(line.decode("utf-8", "replace").rstrip("\n"))
    code = await job.process.wait()
    job.stage = "COMPLETED" if code == 0 else "ERROR"
    job.message = None if code == 0 else f"the command exited with {code}"
    job.finished = _now()
    job.changed.set()


async def listing(request: web.Request) -> web.Response:
    """The namespace's jobs, oldest first, those with every `label=KEY=VALUE` and (if given) a `stage` asked."""
    owner = _reader(request)
    labels = [value.partition("=") for value in request.query.getall("label", [])]
    stages = set(request.query.getall("stage", []))
    found = [
        job.info()
        for job in _jobs(request).jobs.values()
        if job.owner == owner
        and all((job.spec.get("labels") or {}).get(key) == value for key, _, value in labels)
        and (not stages or job.stage in stages)
    ]
    return answer(found)


async def inspect(request: web.Request) -> web.Response:
    return answer(_jobs(request).get(_reader(request), request.match_info["id"]).info())


def _reader(request: web.Request) -> str:
    namespace = request.match_info["ns"]
    can_write(request, namespace)  # a job's logs and environment are its owner's
    return namespace


async def logs(request: web.Request) -> web.StreamResponse:
    """Server-sent events, one `data: {"data": line, "timestamp": ...}` per log line, until the job ends."""
    job = _jobs(request).get(_reader(request), request.match_info["id"])
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
    await response.prepare(request)
    sent = 0
    while True:
        job.changed.clear()
        while sent < len(job.lines):
            stamp, text = job.lines[sent]
            event = json.dumps({"data": text, "timestamp": stamp})
            await response.write(f"data: {event}\n\n".encode())
            sent += 1
        if job.stage in ("COMPLETED", "ERROR", "CANCELED", "DELETED"):
            break
        await job.changed.wait()
    await response.write_eof()
    return response
