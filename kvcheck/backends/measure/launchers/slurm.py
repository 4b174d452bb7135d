"""The Slurm launcher: each role gets its own allocation, its engine runs one task per node.

For a role kvcheck runs, from the host it runs on (a login node, a CI runner with Slurm's client):

1. `salloc --no-shell --job-name kvcheck-<run>-<role> --nodes N --ntasks-per-node 1
   --gres gpu[:type]:G --time M [partition, account, qos, ...]`: one allocation per role, whose
   time limit M (minutes) outlives kvcheck's own timeout, so that even a kvcheck killed with SIGKILL
   leaves nothing running past it. The job id is read from salloc's own lines.
2. `srun --jobid J --nodes N --ntasks N --ntasks-per-node 1 --kill-on-bad-exit=0 --wait=5 sh -c
   'trap : TERM INT HUP; "$@" --node-rank "$SLURM_NODEID"; status=$?; sleep 1; exit $status'
   kvcheck-engine <engine argv> --nnodes N --dist-init-addr <first node>:<port>` (SGLang's flags,
   as the role's engine writes them: `Engine.launch_argv`, `Engine.node_argv`; vLLM's are
   `--nnodes N --master-addr <first node> --master-port <port> --node-rank`, and its nodes other
   than the head add `--headless`, `Engine.worker_argv`, in their own shell): the engine's
   exact command line on every node, with the node rank expanded by each task's own shell (never by
   a shell on kvcheck's side: there is none). srun forwards every task's lines to kvcheck, which
   reads them as they arrive. When one node's engine dies, srun ends the others 5 s later
   (`--wait`), not at once, and each task outlives its engine by a second, so that the dying
   node's own error reaches kvcheck (`task_script`).
3. The head node (the allocation's first) serves HTTP on `--host 0.0.0.0 --port P`; kvcheck reads
   `/server_info` at that node's address (its NodeAddr).
4. Stop: `scancel --signal=TERM J` (SGLang drains; nodes >= 1 wait for node 0), after the grace
   `scancel J` (Slurm kills what is left and frees the nodes), then kvcheck waits until the job has
   left the queue. A role whose job Slurm can never start (more nodes or GPUs than the partition
   gives, a limit it exceeds) is cancelled at once, with Slurm's reason.
"""

from __future__ import annotations

import math
import random
import re
import shlex
import subprocess
import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kvcheck.backends.measure.launchers.base import Launcher, LaunchRequest, RunningEngine
from kvcheck.backends.measure.launchers.command import (
    added_env,
    build_argv,
    build_env,
    needs_bootstrap_port,
    on_cpu,
    role_nnodes,
)
from kvcheck.backends.measure.launchers.process import EngineProcess
from kvcheck.backends.measure.launchers.watchdog import Watchdog
from kvcheck.engines import get_engine
from kvcheck.engines.base import Engine, NodeLaunch
from kvcheck.model import RoleTarget

ALL_INTERFACES = "0.0.0.0"
PORT_RANGE = (20000, 32000)  # below Linux's ephemeral range (32768-60999); SGLang adds small offsets
TIME_MARGIN_S = 15.0  # past kvcheck's timeout and grace, before Slurm's own time limit
STOP_WAIT_S = 60.0  # past the grace, how long a cancelled job may take to leave the queue
FAILED_BY_SCHEDULER = 1  # poll()'s status when Slurm, not the engine, ended the role
SLURM_HINT = "check the launcher.slurm settings and `sinfo`/`squeue` on this host"
# Pending reasons that no amount of waiting resolves: the job asks for what the partition, the
# account or the QOS can never give, or names something that does not exist.
NEVER_STARTS = frozenset(
    {
        "PartitionConfig",
        "PartitionNodeLimit",
        "PartitionTimeLimit",
        "BadConstraints",
        "InvalidAccount",
        "InvalidQOS",
        "DependencyNeverSatisfied",
        "ReqNodeNotAvail, Reserved for maintenance",
        "AccountNotAllowed",
        "QOSNotAllowed",
    }
)
_PER_JOB_LIMIT = re.compile(r"(QOS|Assoc)Max\w*Per(Job|Node)")
_JOB_ID = re.compile(r"(?:job allocation|job) (\d+)")
LIVE_STATES = frozenset(
    {
        "PENDING",
        "CONFIGURING",
        "RUNNING",
        "COMPLETING",
        "SUSPENDED",
        "REQUEUED",
        "RESIZING",
        "SIGNALING",
        "STAGE_OUT",
    }
)
_ports_lock = threading.Lock()
_ports_handed_out: set[int] = set()


def pick_port() -> int:
    """A port for an engine on a node kvcheck cannot inspect: random, never twice in one run."""
    with _ports_lock:
        while True:
            port = random.randrange(*PORT_RANGE)
            if not any(abs(port - used) < 10 for used in _ports_handed_out):
                _ports_handed_out.add(port)
                return port


@dataclass(frozen=True)
class SlurmContainer:
    """Container options for sites whose srun runs tasks in images (pyxis: --container-*)."""

    image: str
    mounts: tuple[str, ...] = ()
    workdir: str | None = None
    options: tuple[str, ...] = ()  # further srun options, e.g. --container-env=HF_TOKEN

    def srun_options(self) -> list[str]:
        out = [f"--container-image={self.image}"]
        if self.mounts:
            out.append(f"--container-mounts={','.join(self.mounts)}")
        if self.workdir:
            out.append(f"--container-workdir={self.workdir}")
        return out + list(self.options)


@dataclass(frozen=True)
class SlurmSettings:
    """The manifest's `launcher.slurm` block, resolved; times in seconds."""

    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    reservation: str | None = None
    constraint: str | None = None
    gres_type: str | None = None  # gpu type in the GRES request, e.g. h100 -> --gres=gpu:h100:8
    gpus_flag: str = "gres"  # "gres" (--gres=gpu:...) or "gpus-per-node"
    gpus_per_node: int | None = None  # None: the role's gpus list, else its TP x PP (x DP) / nnodes
    salloc_options: tuple[str, ...] = ()
    srun_options: tuple[str, ...] = ()
    container: SlurmContainer | None = None
    poll_s: float = 1.0
    stop_wait_s: float = STOP_WAIT_S

    @classmethod
    def from_spec(cls, spec: Any) -> SlurmSettings:
        """From the manifest's pydantic `launcher.slurm` block (None: every default)."""
        if spec is None:
            return cls()
        container = None
        if spec.container is not None:
            c = spec.container
            container = SlurmContainer(
                image=c.image, mounts=tuple(c.mounts), workdir=c.workdir, options=tuple(c.options)
            )
        return cls(
            partition=spec.partition,
            account=spec.account,
            qos=spec.qos,
            reservation=spec.reservation,
            constraint=spec.constraint,
            gres_type=spec.gres_type,
            gpus_flag=spec.gpus_flag,
            gpus_per_node=spec.gpus_per_node,
            salloc_options=tuple(spec.salloc_options),
            srun_options=tuple(spec.srun_options),
            container=container,
        )


def gpus_per_node(target: RoleTarget, settings: SlurmSettings) -> int:
    """GPUs each node of the role needs: the setting, the role's GPU list, or its parallel layout."""
    if settings.gpus_per_node is not None:
        return settings.gpus_per_node
    if target.gpus:
        return len(target.gpus)
    needed = get_engine(target.engine).gpus_needed(target.args)  # the engine's own count (vLLM's flag names)
    if needed is not None:
        return max(1, math.ceil(needed / role_nnodes(target)))

    def size(name: str) -> int:
        try:
            return max(1, int(target.args.get(name) or 1))
        except (TypeError, ValueError):
            return 1

    ranks = size("tp_size") * size("pp_size")
    if size("attn_dp_size") == 1 and not target.args.get("enable_dp_attention"):
        ranks *= size("dp_size")  # plain DP replicas have GPUs of their own
    return max(1, math.ceil(ranks / role_nnodes(target)))


def time_limit_minutes(timeout_s: float, grace_s: float) -> int:
    """Slurm's --time (whole minutes): kvcheck's timeout, its grace and a margin, rounded up.

    kvcheck's timeout counts from the submission, so the job has always been told to stop (scancel)
    before this limit; the limit only ends what a kvcheck killed with SIGKILL could not stop.
    """
    return max(1, math.ceil((timeout_s + grace_s + TIME_MARGIN_S) / 60))


def job_name(run_id: str, role: str) -> str:
    return f"kvcheck-{run_id}-{re.sub(r'[^A-Za-z0-9._-]', '_', role) or 'role'}"


def salloc_argv(target: RoleTarget, settings: SlurmSettings, *, name: str, minutes: int) -> tuple[str, ...]:
    """The allocation: N nodes, one task per node, the GPUs per node, a time limit."""
    nnodes = role_nnodes(target)
    gpus = gpus_per_node(target, settings)
    argv = ["salloc", "--no-shell", f"--job-name={name}", f"--nodes={nnodes}", "--ntasks-per-node=1"]
    kind = f"{settings.gres_type}:" if settings.gres_type else ""
    if settings.gpus_per_node is not None or not on_cpu(target):  # a CPU role (device: cpu) asks for no GPU
        if settings.gpus_flag == "gpus-per-node":
            argv.append(f"--gpus-per-node={kind}{gpus}")
        else:
            argv.append(f"--gres=gpu:{kind}{gpus}")
    argv.append(f"--time={minutes}")
    for option, value in (
        ("partition", settings.partition),
        ("account", settings.account),
        ("qos", settings.qos),
        ("reservation", settings.reservation),
        ("constraint", settings.constraint),
    ):
        if value:
            argv.append(f"--{option}={value}")
    return (*argv, *settings.salloc_options)


# After one task ends, srun waits this long for the others before it kills them: short enough that
# a node left hanging on a dead peer does not run on to kvcheck's timeout. Not --kill-on-bad-exit=1:
# that aborts the step without draining its output, and the dying node's own error was then lost.
TASK_EXIT_WAIT_S = 5

# Each task is a small shell around the engine. It expands $SLURM_NODEID itself (no shell on
# kvcheck's side sees it), passes the engine's argv through untouched ("$@"), and stays one second
# after the engine has ended before it exits with the engine's status (128 + N for signal N): srun
# may stop reading a step's output as soon as its last task is reported ended, and an engine that
# dies within a fraction of a second (an OOM at start, a node that loses its peer) then had its
# lines dropped, in about 1 run of 40 on the test cluster. Trapping TERM, INT and HUP defers them
# until the engine has ended (the engine gets them from Slurm itself, at their defaults).
TASK_LINGER_S = 1
TASK_SCRIPT = 'trap : TERM INT HUP; {workers}"$@"{rank}; status=$?; sleep {linger}; exit $status'
# Nodes other than the head append the engine's worker arguments (vLLM's --headless), in their own shell.
WORKER_SCRIPT = '[ "{node}" = 0 ] || set -- "$@"{words}; '
NODE_ID = "$SLURM_NODEID"  # each task's own node index in the allocation, 0 on the head


def node_rank_words(engine: Engine) -> str:
    """The engine's node-rank arguments as shell words, `$SLURM_NODEID` left for the task to expand."""
    words = engine.node_argv(NodeLaunch(node_rank=NODE_ID))
    return "".join(f' "{NODE_ID}"' if word == NODE_ID else f" {shlex.quote(word)}" for word in words)


def task_script(nnodes: int, engine: Engine | None = None) -> str:
    """The shell each task runs: the engine, with its node rank when the role spans nodes.

    `engine` writes the rank's flag (None: the registry's default engine).
    """
    engine = engine or get_engine()
    rank = node_rank_words(engine) if nnodes > 1 else ""
    extra = engine.worker_argv() if nnodes > 1 else []
    workers = WORKER_SCRIPT.format(node=NODE_ID, words="".join(f" {shlex.quote(w)}" for w in extra)) if extra else ""
    return TASK_SCRIPT.format(workers=workers, rank=rank, linger=TASK_LINGER_S)


def srun_argv(
    job_id: str,
    nnodes: int,
    settings: SlurmSettings,
    engine_argv: Sequence[str],
    engine: Engine | None = None,
) -> tuple[str, ...]:
    """The step: one task per node of the allocation, each running the engine with its node rank."""
    argv = [
        "srun",
        f"--jobid={job_id}",
        f"--nodes={nnodes}",
        f"--ntasks={nnodes}",
        "--ntasks-per-node=1",
        "--kill-on-bad-exit=0",  # explicit: a site's KillOnBadExit=1 would drop the dying node's output
        f"--wait={TASK_EXIT_WAIT_S}",
    ]
    if settings.container is not None:
        argv += settings.container.srun_options()
    argv += list(settings.srun_options)
    argv += ["sh", "-c", task_script(nnodes, engine), "kvcheck-engine"]
    return (*argv, *engine_argv)


def scheduler_env(base: Mapping[str, str]) -> dict[str, str]:
    """kvcheck's environment without a surrounding job's SLURM_* (they would redirect salloc/srun)."""
    return {k: v for k, v in base.items() if not k.startswith("SLURM_") or k == "SLURM_CONF"}


def _run(argv: Sequence[str], env: Mapping[str, str], timeout_s: float = 30.0) -> tuple[int, str]:
    """Run a Slurm client command; (status, stdout+stderr). A missing program is status 127."""
    try:
        done = subprocess.run(
            list(argv),
            env=dict(env),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )
    except FileNotFoundError as exc:
        return 127, f"{argv[0]}: {exc.strerror}"
    except subprocess.TimeoutExpired:
        return 124, f"{argv[0]} did not answer within {timeout_s:g} s"
    return done.returncode, (done.stdout + done.stderr).strip()


def parse_fields(text: str) -> dict[str, str]:
    """`scontrol show ... -o` output (Key=Value pairs on one line) as a dict."""
    fields: dict[str, str] = {}
    for match in re.finditer(r"(\w+)=(.*?)(?=\s+\w+=|$)", text.strip()):
        fields[match.group(1)] = match.group(2)
    return fields


class SlurmJob(RunningEngine):
    """One role's allocation and engine step; a thread walks salloc -> nodes -> srun."""

    def __init__(
        self,
        request: LaunchRequest,
        settings: SlurmSettings,
        *,
        name: str,
        env: Mapping[str, str],
        engine_argv: tuple[str, ...],
        report_argv: tuple[str, ...],
        port: int,
        dist_port: int | None,
        details: dict[str, Any],
        salloc: tuple[str, ...],
    ) -> None:
        self.request = request
        self.settings = settings
        self.name = name
        self.argv = report_argv
        self.started_at = time.monotonic()
        self._env = dict(env)
        self._engine_argv = engine_argv
        self._port = port
        self._dist_port = dist_port
        self._details = details
        self._salloc_argv = salloc
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._salloc: subprocess.Popen[bytes] | None = None
        self._salloc_lines: list[str] = []
        self._step: EngineProcess | None = None
        self._failure: tuple[str, str] | None = None
        self._phase: str | None = "submitting to Slurm"
        self.job_id: str | None = None
        self._head_addr: str | None = None
        self._state: str | None = None
        self._thread = threading.Thread(target=self._drive, name=f"kvcheck-slurm-{name}", daemon=True)
        self._thread.start()

    # -- what the boot loop reads ---------------------------------------------------------------

    @property
    def details(self) -> Mapping[str, Any]:
        return self._details

    @property
    def http_port(self) -> int:
        return self._port

    def base_url(self) -> str | None:
        return f"http://{self._head_addr}:{self._port}" if self._head_addr and self._step else None

    def poll(self) -> int | None:
        if self._failure is not None:
            return FAILED_BY_SCHEDULER
        step = self._step
        return step.poll() if step is not None else None

    @property
    def returncode(self) -> int | None:
        if self._failure is not None:
            return FAILED_BY_SCHEDULER
        step = self._step
        return step.returncode if step is not None else None

    @property
    def pump_error(self) -> Exception | None:
        return self._step.pump_error if self._step is not None else None

    @property
    def output_held(self) -> bool:
        return self._step.output_held if self._step is not None else False

    def phase(self) -> str | None:
        return self._phase

    def failure(self) -> tuple[str, str] | None:
        return self._failure

    def exit_note(self) -> str:
        state = self._state or self._job_state()
        return f" (Slurm job {self.job_id}: {state})" if self.job_id and state else ""

    # -- the launch, in a thread ----------------------------------------------------------------

    def _fail(self, message: str, hint: str = SLURM_HINT) -> None:
        with self._lock:
            if self._failure is None:
                self._failure = (message, hint)

    def _drive(self) -> None:
        try:
            if not self._allocate():
                return
            if not self._locate_nodes():
                return
            self._start_step()
        except Exception as exc:  # noqa: BLE001 - becomes the role's KV301, never a silent hang
            self._fail(f"the Slurm launcher failed: {type(exc).__name__}: {exc}", hint="please report it")

    def _allocate(self) -> bool:
        """salloc until granted; the job id from its lines; a job that can never start is cancelled."""
        try:
            proc = subprocess.Popen(
                list(self._salloc_argv),
                env=self._env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        except OSError as exc:
            self._fail(
                f"could not run Slurm's salloc: {exc.strerror or exc} ({self._salloc_argv[0]})",
                hint="install Slurm's client commands (salloc, srun, squeue, scancel, scontrol) on this host",
            )
            return False
        self._salloc = proc
        reader = threading.Thread(target=self._read_salloc, args=(proc,), daemon=True)
        reader.start()
        next_check = time.monotonic() + self.settings.poll_s
        while proc.poll() is None:
            if self._stopping.is_set():
                return False
            if self.job_id and time.monotonic() >= next_check:
                self._check_pending()
                next_check = time.monotonic() + self.settings.poll_s
            time.sleep(0.05)
        reader.join(timeout=5)
        if self._stopping.is_set() or self._failure is not None:
            return False
        if proc.returncode != 0 or not self.job_id:
            said = "\n".join(f"    | {line}" for line in self._salloc_lines[-8:]) or "    | (nothing)"
            self._fail(
                f"Slurm did not allocate the role's nodes (salloc exited with status {proc.returncode}):\n{said}",
            )
            return False
        return True

    def _read_salloc(self, proc: subprocess.Popen[bytes]) -> None:
        assert proc.stdout is not None
        for raw in proc.stdout:
            line = raw.decode("utf-8", "replace").rstrip()
            self._salloc_lines.append(line)
            match = _JOB_ID.search(line)
            if match and self.job_id is None:
                with self._lock:
                    self.job_id = match.group(1)
                self._details["slurm"]["job_id"] = self.job_id
                self._phase = f"queued in Slurm (job {self.job_id})"
            try:
                self.request.on_line(line)  # Slurm's own words sit beside the engine's in the tail
            except Exception:  # noqa: BLE001, S110 - the engine's lines are what a parser bug must not lose
                pass

    def _check_pending(self) -> None:
        """While salloc waits: show Slurm's reason; cancel a job that can never start."""
        status, out = _run(["squeue", "-h", "-j", str(self.job_id), "-o", "%T|%r"], self._env)
        if status != 0 or "|" not in out:
            return
        state, reason = out.splitlines()[0].split("|", 1)
        self._phase = f"queued in Slurm (job {self.job_id}: {reason})"
        if state == "PENDING" and (reason in NEVER_STARTS or _PER_JOB_LIMIT.search(reason)):
            said = "\n".join(f"    | {line}" for line in self._salloc_lines[-4:])
            self._fail(
                f"Slurm cannot run job {self.job_id} as requested: it stays pending with reason {reason} "
                f"(the role asks for {self._details['slurm']['nodes_requested']} node(s) with "
                f"{self._details['slurm']['gpus_per_node']} GPU(s) each){':' if said else ''}\n{said}".rstrip(),
                hint="ask for what the partition can give (sinfo -o '%P %D %G %l'), or choose another "
                "partition, account or QOS in launcher.slurm",
            )
            _run(["scancel", str(self.job_id)], self._env)

    def _locate_nodes(self) -> bool:
        """The allocation's nodes, in order; the first is the head (HTTP and the dist-init address)."""
        self._phase = f"job {self.job_id} allocated, starting the engine"
        status, out = _run(["scontrol", "show", "job", "-o", str(self.job_id)], self._env)
        nodelist = parse_fields(out).get("NodeList", "") if status == 0 else ""
        status, out = _run(["scontrol", "show", "hostnames", nodelist], self._env) if nodelist else (1, out)
        nodes = out.split() if status == 0 else []
        if not nodes:
            self._fail(f"could not read the nodes of Slurm job {self.job_id}: {out or 'no node list'}")
            return False
        status, out = _run(["scontrol", "show", "node", "-o", nodes[0]], self._env)
        head_addr = parse_fields(out).get("NodeAddr") if status == 0 else None
        self._head_addr = head_addr or nodes[0]
        self._details["slurm"].update(nodes=nodes, head=nodes[0], address=f"{self._head_addr}:{self._port}")
        return True

    def _start_step(self) -> None:
        nnodes = len(self._details["slurm"]["nodes"])
        engine = get_engine(self.request.target.engine)
        engine_argv = list(self._engine_argv)
        if nnodes > 1:  # the rank is added by each task's shell (task_script)
            engine_argv += engine.node_argv(
                NodeLaunch(nnodes=nnodes, dist_init_addr=f"{self._head_addr}:{self._dist_port}")
            )
        argv = srun_argv(str(self.job_id), nnodes, self.settings, engine_argv, engine)
        self._details["slurm"]["srun"] = list(argv)
        with self._lock:
            if self._stopping.is_set():
                return
            try:
                self._step = EngineProcess(
                    argv, self._env, log_path=self.request.log_path, on_line=self.request.on_line,
                    grace_s=self.request.grace_s,
                )
            except OSError as exc:
                self._fail(f"could not run Slurm's srun: {exc.strerror or exc} ({argv[0]})")
                return
        self._phase = None  # the engine's own log phases from here on

    # -- the end ---------------------------------------------------------------------------------

    def _job_state(self) -> str | None:
        if not self.job_id:
            return None
        status, out = _run(["scontrol", "show", "job", "-o", str(self.job_id)], self._env)
        return parse_fields(out).get("JobState") if status == 0 else None

    def _job_live(self) -> bool | None:
        """True while the job is in the queue or running; None when Slurm cannot be asked."""
        status, out = _run(["squeue", "-h", "-j", str(self.job_id), "-o", "%T"], self._env)
        if status != 0:
            return False if "Invalid job id" in out else None
        return bool(out) and out.split()[0] in LIVE_STATES

    def stop(self, grace_s: float) -> str | None:
        self._stopping.set()
        with self._lock:
            step = self._step
        salloc = self._salloc
        interrupted = salloc is not None and salloc.poll() is None
        if salloc is not None and interrupted:
            salloc.terminate()  # salloc withdraws a pending request on SIGTERM
        if not self.job_id and salloc is not None:
            try:
                salloc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                salloc.kill()
        self._thread.join(timeout=30)
        survivors: str | None = None
        if self.job_id:
            survivors = self._cancel(step, grace_s)
        elif interrupted:  # stopped before salloc printed an id: cancel by the run's unique job name
            _run(["scancel", f"--name={self.name}"], self._env)
        if (self.job_id and survivors is None) or not (self.job_id or interrupted):
            Watchdog.slurm_stopped(self.name)  # gone from the queue, or never submitted
        if step is not None:
            step.stop(5.0)  # srun has exited with its step; end and reap it here
        self._state = self._job_state() or self._state
        if self.job_id:
            self._details["slurm"]["state"] = self._state
        return survivors

    def _cancel(self, step: EngineProcess | None, grace_s: float) -> str | None:
        """scancel --signal=TERM, the grace, scancel; then wait until the job has left the queue."""
        job = str(self.job_id)
        if step is not None and step.poll() is None and grace_s > 0:  # 0: a measured role, scancel at once
            _run(["scancel", "--signal=TERM", job], self._env)
            deadline = time.monotonic() + grace_s
            while step.poll() is None and time.monotonic() < deadline:
                time.sleep(0.05)
        status, out = _run(["scancel", job], self._env)
        deadline = time.monotonic() + grace_s + self.settings.stop_wait_s
        live: bool | None = True
        while time.monotonic() < deadline:
            live = self._job_live()
            if live is False:
                return None
            time.sleep(0.2)
        state = self._job_state() or "unknown"
        why = "" if live else f"; Slurm could not be asked ({out})" if status else ""
        return (
            f"Slurm job {job} was still in the queue (state {state}) {grace_s + self.settings.stop_wait_s:g} s "
            f"after scancel{why}; its nodes may still be held until its time limit"
        )


@dataclass
class SlurmLauncher(Launcher):
    """Hands each role to Slurm: one allocation per role, all roles submitted at once."""

    settings: SlurmSettings = field(default_factory=SlurmSettings)
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex[:8])
    base_env: Mapping[str, str] | None = None
    name = "slurm"
    picks_ports = True  # pick_port() at each start: a boot retried on another port is a new allocation
    runs_cpu_roles = True  # a CPU role asks for no GPU (salloc_argv); the node, not this host, holds its pool

    @classmethod
    def from_settings(cls, settings: Any, *, gpu_check: bool) -> SlurmLauncher:
        # Slurm hands each task its GPUs; there is no inventory to skip
        return cls(settings=SlurmSettings.from_spec(settings))

    def start(self, request: LaunchRequest) -> SlurmJob:
        target = request.target
        port = pick_port()
        bootstrap_port = pick_port() if needs_bootstrap_port(target) else None
        nnodes = role_nnodes(target)
        dist_port = pick_port() if nnodes > 1 else None
        engine_argv = build_argv(
            target,
            port=port,
            bootstrap_port=bootstrap_port,
            dummy_weights=request.dummy_weights,
            host=ALL_INTERFACES,
        )
        env = scheduler_env(build_env(target, self.base_env, set_gpus=False))
        name = job_name(self.run_id, target.name)
        minutes = time_limit_minutes(request.timeout_s, request.grace_s)
        salloc = salloc_argv(target, self.settings, name=name, minutes=minutes)
        report_argv = engine_argv
        if nnodes > 1:
            # what every node runs, as the report has always shown it: the rank before the address
            engine = get_engine(target.engine)
            report_argv = (
                *engine_argv,
                *engine.node_argv(NodeLaunch(nnodes=nnodes, node_rank=NODE_ID)),
                *engine.node_argv(NodeLaunch(dist_init_addr=f"<first node>:{dist_port}")),
            )
        # the watchdog cancels the job by its unique name if kvcheck dies, SIGKILL included (watchdog.py)
        Watchdog.prepare()
        Watchdog.slurm_started(name, env)
        details: dict[str, Any] = {
            "engine_env": added_env(target, env),
            "ports": {"http": port, "bootstrap": bootstrap_port, "dist_init": dist_port},
            "slurm": {
                "job_id": None,
                "job_name": name,
                "time_limit_min": minutes,
                "nodes_requested": nnodes,
                "gpus_per_node": gpus_per_node(target, self.settings),
                "salloc": list(salloc),
            },
        }
        return SlurmJob(
            request,
            self.settings,
            name=name,
            env=env,
            engine_argv=engine_argv,
            report_argv=report_argv,
            port=port,
            dist_port=dist_port,
            details=details,
            salloc=salloc,
        )
