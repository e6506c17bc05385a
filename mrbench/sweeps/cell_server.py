"""The cell server: one process per sweep that imports the heavy stack once and forks a fresh
child for every cell, so a cell starts in milliseconds instead of paying the import of torch,
transformers, trl, mlflow and the engine (8 s on a quiet machine, 15–21 s under load) each time.

The sweep (:func:`mrbench.sweeps.executors.local.run_processes`) starts
``python -m mrbench.sweeps.cell_server SWEEP_PID REPLY_FD`` in a session of its own, sends it one
JSON line on stdin with what to preload and the sweep's ``sys.path``, waits for ``ready``, then
sends one line per cell (payload file, environment, log file, working directory); the messages
are the typed records of :mod:`mrbench.sweeps.server_wire`. The server
forks; the child (:func:`_become_cell`) leaves for a session of its own, points fds 0/1/2 at
``/dev/null`` and the cell's log, takes the cell's environment (threads, GPUs), and runs
:func:`mrbench.sweeps.cell_process.run_worker`: the exit codes, result file, SIGINT handling
and parent watch of ``python -m mrbench.sweeps.cell_process``, with the server as the parent.
The server answers on ``REPLY_FD`` with the child's pid, and later its exit code.

Why a server of our own and not :mod:`multiprocessing`'s forkserver: that one is a singleton of
the whole Python process, started once with the environment of that moment and kept until exit,
while each sweep (tests run many in one process) needs its own environment and preload; its
children re-import the parent's ``__main__``; it swallows failed preloads silently, cannot refuse
to fork when a thread appeared, and does not die with its parent by signal. The protocol here is
a pipe of JSON lines in each direction, on one machine, between two processes of one sweep. A
line that is not the message it should be never ends either side with a traceback: the sweep
stops using a server that sent one, and the server refuses (or reports on stderr and skips) a
request it cannot read.

What keeps forking safe: the server starts no thread (numpy's OpenBLAS would start its pool at
import, and pyarrow's jemalloc (through mlflow) its background thread, so :data:`SERVER_ENV`
turns both off) and checks ``/proc/self/task`` before each fork, refusing when it holds more than
one thread; it never starts CUDA (``torch.cuda.is_initialized()`` is checked too), so a child's
``CUDA_VISIBLE_DEVICES`` still takes effect. ``OMP_WAIT_POLICY=PASSIVE`` is in its environment
before torch loads libgomp.

Lifetimes: the server gets SIGINT when the sweep dies (``PR_SET_PDEATHSIG``, and it compares
``os.getppid()`` with the sweep's pid between requests) and exits at once; each child gets SIGINT
when the server dies and ends its run KILLED. When stdin closes (the sweep is done) the server
sends SIGINT to any child still running, reaps them and exits. If the server cannot start, is
not ready in :data:`READY_TIMEOUT_S`, refuses or dies, the sweep runs its remaining cells the
old way (``python -m mrbench.sweeps.cell_process``); ``MRBENCH_CELL_SERVER=0`` does that from
the start.
"""

from __future__ import annotations

import atexit
import importlib
import os
import select
import signal
import subprocess
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import IO, Any, NoReturn

from mrbench.core.env import CELL_SERVER
from mrbench.kit.children import child_env, die_with_parent, module_command, parent_alive, stop
from mrbench.sweeps.server_wire import (
    Exited,
    ForkRequest,
    Init,
    Ready,
    Refused,
    Reply,
    Started,
    WireError,
    parse_init,
    parse_reply,
    parse_request,
)

SERVER_ENV = {
    "OPENBLAS_NUM_THREADS": "1",  # OpenBLAS starts its pool when numpy loads it: a thread
    "JE_ARROW_MALLOC_CONF": "background_thread:false",  # pyarrow's jemalloc thread, via mlflow
    "OMP_WAIT_POLICY": "PASSIVE",  # libgomp reads it when torch loads it
    "PYTORCH_NVML_BASED_CUDA_CHECK": "1",  # torch.cuda.is_available() without starting CUDA
    "TOKENIZERS_PARALLELISM": "false",
}
"""Set in the server's environment only; each child takes its cell's environment instead."""
HEAVY_MODULES = (
    "torch",
    "transformers",
    "trl",
    "mlflow",
    "mrbench.engine.cell.runner",
    # What a cell imports later (transformers and trl load their parts lazily): the trainer (TRL's
    # GRPOTrainer with transformers' Trainer, accelerate, datasets, peft: 1.8 s) and MLflow's sqlite
    # store (SQLAlchemy: 0.6 s), which every cell paid again after its fork.
    "mrbench.engine.training.trainer",
    "mlflow.store.tracking.sqlalchemy_store",
)
READY_TIMEOUT_S = 300.0  # the preload takes 8 s alone and over 20 s on a loaded machine
REPLY_TIMEOUT_S = 30.0  # a fork of the preloaded server takes milliseconds
CLOSE_GRACE_S = 30.0  # how long the sweep waits for the server to stop the children it still has
POLL_S = 0.05


def enabled() -> bool:
    """False when ``$MRBENCH_CELL_SERVER`` turns the server off (``0``, ``false``, ``no``, ``off``):
    each cell is then a new interpreter."""
    return CELL_SERVER.get()


def preload_modules(cell_fn: str) -> list[str]:
    """What the server imports: the heavy stack, the built-in tasks and ``cell_fn``'s module."""
    from mrbench.core.registry import BUILT_IN
    from mrbench.tasks import TASKS

    tasks = [
        entry.target.partition(":")[0] if isinstance(entry.target, str) else entry.target.__module__
        for entry in TASKS
        if entry.source == BUILT_IN
    ]
    # cell_process: what each child runs (light, but then no child imports anything to start)
    return [*HEAVY_MODULES, *tasks, "mrbench.sweeps.cell_process", cell_fn.partition(":")[0]]


def thread_count(pid: int | str = "self") -> int:
    """Threads of process ``pid`` (Linux: its ``/proc`` entries; elsewhere this process's Python threads)."""
    try:
        return len(os.listdir(f"/proc/{pid}/task"))
    except OSError:
        return threading.active_count()


# --------------------------------------------------------------------------------- sweep side


class ServerCell:
    """A cell child of the server, with what :func:`mrbench.sweeps.executors.local._stop_children`
    uses of a :class:`subprocess.Popen`: ``pid``, ``returncode``, ``poll``, ``send_signal``,
    ``kill`` and ``wait``. Its exit code comes from the server; if the server died first, the child
    is followed through a pidfd (the pid alone could be reused) and its code is unknown (None
    in ``lost``, ``returncode`` 1)."""

    def __init__(self, server: CellServer, pid: int) -> None:
        self.server, self.pid = server, pid
        self.returncode: int | None = None
        self.lost = False  # the server died before it reported this child's exit
        try:
            self._pidfd: int | None = os.pidfd_open(pid)
        except (AttributeError, OSError):  # not Linux 5.3+, or already gone (its code is on the way)
            self._pidfd = None

    def poll(self) -> int | None:
        """The exit code once the child has ended, else None."""
        if self.returncode is None:
            self.server.pump()
            code = self.server.exits.pop(self.pid, None)
            if code is not None:
                self._set(code)
            elif not self.server.alive() and self._gone():
                self.server.pump()  # its exit may have been the server's last words
                code = self.server.exits.pop(self.pid, None)
                self.lost = code is None
                self._set(1 if code is None else code)
        return self.returncode

    def _gone(self) -> bool:
        if self._pidfd is not None:
            return bool(select.select([self._pidfd], [], [], 0)[0])
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            return False
        return False

    def _set(self, code: int) -> None:
        self.returncode = code
        if self._pidfd is not None:
            os.close(self._pidfd)
            self._pidfd = None

    def send_signal(self, sig: int) -> None:
        """Signal the child unless it has ended."""
        if self.poll() is not None:
            return
        try:
            if self._pidfd is not None:
                signal.pidfd_send_signal(self._pidfd, sig)
            else:
                os.kill(self.pid, sig)
        except ProcessLookupError:
            pass

    def kill(self) -> None:
        """SIGKILL the child."""
        self.send_signal(signal.SIGKILL)

    def wait(self, timeout: float | None = None) -> int:
        """Wait for the end of the child; :class:`subprocess.TimeoutExpired` after ``timeout`` s."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(f"cell {self.pid}", timeout or 0.0)
            time.sleep(POLL_S)
        assert self.returncode is not None
        return self.returncode


class CellServer:
    """The sweep's handle on its cell server (see the module docstring)."""

    def __init__(self, preload: list[str], *, output: IO[bytes] | None) -> None:
        """Start the server; ``output``: where its own output goes (None: this process's stdout)."""
        read_fd, write_fd = os.pipe()
        env = {**child_env(), **SERVER_ENV}
        if "JE_ARROW_MALLOC_CONF" in os.environ:  # the user's own jemalloc settings win
            env["JE_ARROW_MALLOC_CONF"] = os.environ["JE_ARROW_MALLOC_CONF"]
        try:
            self.proc = subprocess.Popen(
                module_command(__name__, str(os.getpid()), str(write_fd)),
                stdin=subprocess.PIPE,
                stdout=output,
                stderr=subprocess.STDOUT,
                env=env,
                pass_fds=(write_fd,),
                start_new_session=True,  # a terminal's Ctrl-C reaches the sweep only
            )
        except BaseException:
            os.close(read_fd)
            raise
        finally:
            os.close(write_fd)
        os.set_blocking(read_fd, False)
        self._replies, self._buffer, self._eof = read_fd, b"", False
        self.exits: dict[int, int] = {}
        self.info: Ready | None = None  # the ``ready`` reply
        self.problem: str | None = None  # why the server is unusable, once it is
        self._started = time.monotonic()
        self._next_id = 0
        self._answers: dict[int, Started | Refused] = {}  # by request id, until start takes them
        self._send(Init(tuple(preload), tuple(sys.path)))

    def _send(self, message: Init | ForkRequest) -> bool:
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(message.to_line())
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError, ValueError):
            self.problem = self.problem or "the cell server stopped reading requests"
            return False
        return True

    def pump(self) -> None:
        """Read what the server has said so far (never blocks)."""
        while not self._eof:
            try:
                chunk = os.read(self._replies, 65536)
            except BlockingIOError:
                break
            if not chunk:
                self._eof = True
                break
            self._buffer += chunk
        *lines, self._buffer = self._buffer.split(b"\n")
        for line in lines:
            try:
                reply: Reply = parse_reply(line)
            except WireError as exc:
                # A server that says what it should not cannot be trusted with new cells: ready and
                # start now fail, and the sweep starts them the old way. The lines after it are
                # still read, for the exits of the cells it already runs.
                self.problem = self.problem or f"the cell server sent a malformed reply ({exc})"
                continue
            if isinstance(reply, Exited):
                self.exits[reply.pid] = reply.code
            elif isinstance(reply, Ready):
                self.info = self.info or reply
            else:
                self._answers[reply.id] = reply

    def alive(self) -> bool:
        """True while the server runs and its reply pipe is open."""
        return not self._eof and self.proc.poll() is None

    def _exit_code(self) -> int | None:
        """The code of a server that is no longer alive (None if it still runs)."""
        # Its reply pipe closes as it exits, a moment before its exit code can be read.
        try:
            return self.proc.wait(timeout=1.0)
        except subprocess.TimeoutExpired:
            return None

    def ready(self) -> bool | None:
        """True once the server has preloaded, False when it is unusable (see ``problem``), None
        while it is still importing."""
        if self.problem:
            return False
        self.pump()
        if self.problem:  # a malformed line, even beside ``ready``, makes the server unusable
            return False
        if self.info is not None:
            return True
        if not self.alive():
            self.problem = f"the cell server exited with code {self._exit_code()} while importing"
        elif time.monotonic() - self._started > READY_TIMEOUT_S:
            self.problem = f"the cell server was not ready after {READY_TIMEOUT_S:.0f} s"
        return False if self.problem else None

    def _take(self, request: int) -> Started | Refused | None:
        """The server's answer to fork request ``request``, once it has come (each is taken once)."""
        return self._answers.pop(request, None)

    def start(self, payload: Path, env: dict[str, str], log: Path | None) -> ServerCell | None:
        """Have the server fork a child for the cell of ``payload`` with the environment ``env``
        and its output in ``log`` (None: the server's output); None, with ``problem`` set, when
        the server refused or did not answer (the cell must start another way)."""
        if self.problem:
            return None
        self._next_id += 1
        logged = None if log is None else str(log)
        request = ForkRequest(self._next_id, str(payload), dict(env), os.getcwd(), logged)
        if not self._send(request):
            return None
        deadline = time.monotonic() + REPLY_TIMEOUT_S
        while time.monotonic() < deadline:
            self.pump()
            answer = self._take(request.id)
            if isinstance(answer, Started):  # it runs, even if another line was malformed: watch it
                return ServerCell(self, answer.pid)
            if isinstance(answer, Refused):
                self.problem = f"the cell server refused to fork: {answer.why}"
                return None
            if self.problem:
                # A malformed reply (pump): this cell starts the old way. Were that line its own
                # ``started``, its forked child runs too; the cell's claim (engine.cell.cell_claim)
                # lets one of the two run it, as after a reply that came too late.
                return None
            if not self.alive():
                self.problem = f"the cell server exited with code {self._exit_code()}"
                return None
            time.sleep(0.005)
        self.problem = f"the cell server did not answer in {REPLY_TIMEOUT_S:.0f} s"
        return None

    def close(self, grace_s: float = CLOSE_GRACE_S) -> None:
        """End the server: EOF on its stdin (it stops the children it still has, then exits),
        SIGKILL after ``grace_s`` (its children then get their parent-death SIGINT)."""
        try:
            if self.proc.stdin is not None:
                self.proc.stdin.close()
        except OSError:
            pass
        stop(self.proc, None, grace_s=grace_s)  # no signal first: EOF asked it to end
        os.close(self._replies)


# -------------------------------------------------------------------------------- server side


def _exit_now(signum: int, frame: Any) -> None:
    """The server's stop-signal handler: exit at once; each child gets its parent-death SIGINT."""
    os._exit(130)


def _die_with(sweep_pid: int) -> None:
    """SIGINT to this process when the sweep exits (and exit now if it already has)."""
    # No watch thread: the server forks, and must stay single-threaded (_unsafe_to_fork); _serve
    # checks the parent between requests instead.
    if not die_with_parent(sweep_pid, signal.SIGINT, watch=False):
        os._exit(130)


def _preload(modules: list[str]) -> list[str]:
    """Import ``modules``; return ``"module: error"`` for each that failed (a child imports what it
    needs itself, so a failed preload only costs time)."""
    failed = []
    for module in modules:
        try:
            importlib.import_module(module)
        except BaseException as exc:  # a module that exits at import must not end the server
            failed.append(f"{module}: {type(exc).__name__}: {exc}"[:500])
    return failed


def _unsafe_to_fork() -> str | None:
    """Why forking this process now could hand a child a broken state, or None."""
    threads = thread_count()
    if threads > 1:
        return f"the server runs {threads} threads (a module started one at import)"
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        return "CUDA was started in the server"
    return None


def _become_cell(request: ForkRequest, server_pid: int, reply_fd: int) -> NoReturn:
    """In a freshly forked child: become the cell's worker process and exit with its code."""
    code = 1
    try:
        os.setsid()  # a terminal's Ctrl-C reaches the sweep only, which passes on one SIGINT
        os.close(reply_fd)  # the sweep sees EOF when the server dies, not when its last child does
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)  # the server's stdin carries the sweep's requests
        os.close(null)
        if request.log:
            log = os.open(request.log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.dup2(log, 1)
            os.dup2(log, 2)
            os.close(log)
        os.chdir(request.cwd)
        os.environ.clear()
        os.environ.update(request.env)  # the cell's threads, GPUs and tokenizers setting
        from mrbench.sweeps.cell_process import read_payload, run_worker

        payload = read_payload(Path(request.payload))
        _resize_blas(payload.threads)
        code = run_worker(payload, server_pid)
    except BaseException:  # whatever happens, the child must not return into the server
        traceback.print_exc()
    finally:
        # As a fresh interpreter would end: join the cell's threads (a logging queue), run the
        # exit handlers, flush; then leave without unwinding into the server's loop.
        try:
            threading._shutdown()  # type: ignore[attr-defined]
            atexit._run_exitfuncs()
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def _resize_blas(threads: int) -> None:
    """Give OpenBLAS (one thread in the server) the cell's threads, where threadpoolctl is there."""
    if threads <= 1:
        return
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        return
    threadpool_limits(limits=threads, user_api="blas")


def _reply(fd: int, message: Reply) -> None:
    """Tell the sweep ``message``."""
    line = message.to_line()
    while line:  # a write to a pipe may take part of a long line (a ``ready`` with many failures)
        line = line[os.write(fd, line) :]


def _fork_cell(request: ForkRequest, reply_fd: int, children: set[int]) -> None:
    """Fork a child for ``request`` (or refuse) and tell the sweep its pid."""
    problem = _unsafe_to_fork()
    if problem is not None:
        _reply(reply_fd, Refused(request.id, problem))
        return
    sys.stdout.flush()  # else the child would write the server's buffered output again
    sys.stderr.flush()
    server_pid = os.getpid()
    pid = os.fork()
    if pid == 0:
        _become_cell(request, server_pid, reply_fd)
    children.add(pid)
    _reply(reply_fd, Started(request.id, pid))


def _reap(reply_fd: int, children: set[int]) -> None:
    """Report every child that has ended."""
    while children:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            children.clear()
            return
        if pid == 0:
            return
        children.discard(pid)
        _reply(reply_fd, Exited(pid, os.waitstatus_to_exitcode(status)))


def _serve(sweep_pid: int, reply_fd: int, buffer: bytes = b"") -> None:
    """Answer requests (``buffer``: what was read of them already) until stdin closes, then stop
    the children left and return."""
    children: set[int] = set()
    closing = False
    while not closing or children:
        if not parent_alive(sweep_pid):  # the sweep died before the parent-death signal took effect
            os._exit(130)
        readable = [] if closing else select.select([0], [], [], POLL_S)[0]
        if closing:
            time.sleep(POLL_S)
        chunk = os.read(0, 65536) if readable else b"-"
        if not chunk:  # the sweep is done with this server: whatever still runs is stopped
            closing = True
            for pid in children:
                _signal(pid, signal.SIGINT)
        elif readable:
            buffer += chunk
        *lines, buffer = buffer.split(b"\n")
        for line in lines:
            request = _read_request(line, reply_fd)
            if request is not None:
                _fork_cell(request, reply_fd, children)
        _reap(reply_fd, children)


def _read_request(line: bytes, reply_fd: int) -> ForkRequest | None:
    """The fork request ``line``, or None when it is malformed: refused when it has an id (the
    sweep waits for that answer), else reported on stderr (the server's log) and skipped. Either
    way the server keeps serving: the cells it runs stay in its care."""
    try:
        return parse_request(line)
    except WireError as exc:
        if exc.request_id is not None:
            _reply(reply_fd, Refused(exc.request_id, f"malformed request ({exc})"))
        else:
            print(f"cell server: skipped a malformed request ({exc})", file=sys.stderr, flush=True)
        return None


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def main(argv: list[str] | None = None) -> int:
    """``python -m mrbench.sweeps.cell_server SWEEP_PID REPLY_FD``: see the module docstring."""
    args = sys.argv[1:] if argv is None else argv
    sweep_pid, reply_fd = int(args[0]), int(args[1])
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _exit_now)
    _die_with(sweep_pid)
    buffer = b""
    while b"\n" not in buffer:
        chunk = os.read(0, 65536)
        if not chunk:
            return 0
        buffer += chunk
    first, _, rest = buffer.partition(b"\n")
    try:
        init = parse_init(first)
    except WireError as exc:  # nothing to preload or serve by: the sweep starts its cells the old way
        print(f"cell server: {exc}", file=sys.stderr, flush=True)
        return 2
    sys.path.extend(p for p in init.path if p not in sys.path)  # the cell function's module
    failed = _preload(list(init.preload))
    _reply(reply_fd, Ready(os.getpid(), thread_count(), tuple(failed)))
    _serve(sweep_pid, reply_fd, rest)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # tearing down the imported stack would keep the sweep waiting 1–2 s


if __name__ == "__main__":
    sys.exit(main())
