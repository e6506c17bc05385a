"""Run untrusted Python functions against trusted tests, isolated from the host and from each other.

Any task can use this package: give it the candidate's code, the test code and the name (or
expression) of the function under test, and get back a :class:`Result` whose ``status`` the
candidate cannot forge.

How a run works
---------------
The harness keeps one **zygote** per worker: a small, single-threaded Python process started
once (``python -s -S -P mrbench/kit/sandbox/zygote.py --zygote CONFIG``) that loads the
standard-library modules programs commonly import and forks a persistent **tester** process.
For every run it compiles the code and forks a fresh **candidate** process:

* the candidate runs the prelude (trusted helper code such as HumanEval's prompt) and the
  untrusted code, evaluates the entry point, then serves function calls it reads from a pipe,
  replying with the return value (or the exception's type and message);
* the tester runs the trusted tests with ``candidate`` bound to a proxy that sends each call
  over that pipe. Arguments and results cross the boundary as plain data (numbers, strings,
  lists, tuples, dicts, sets, bytes, and objects of classes the prelude defines), so an object
  with a rigged ``__eq__`` cannot come back. Only after the tests finish does the tester send
  its verdict, prefixed with the run's random nonce, over a socket only it and the zygote hold.

The zygote waits for the verdict until the wall-clock deadline, kills every process of the
candidate, reaps them, removes the run's files and answers the harness with the :class:`Result`.
Forking a warm zygote instead of starting interpreters keeps a run to a few milliseconds of CPU.

Isolation, when the harness runs as root (as in CI and on the development machines)
-------------------------------------------------------------------------------------
* Users: each zygote leases three dedicated unprivileged uids (candidate, tester, reaper) from a
  range no account uses (``uid_base``; leases are ``flock``-ed files so concurrent harnesses never
  share one). Processes of the candidate uid can only be signalled by that uid, so they cannot
  touch the tester, the zygote or the harness; ``RLIMIT_NPROC`` (which root ignores) bounds
  fork bombs.
* Cleanup without cgroups: after every run a reaper child with real uid *reaper* and effective
  uid *candidate* calls ``kill(-1, SIGKILL)``. The kernel delivers that to every process of the
  uid while holding the task list, and a fork racing with it fails, so nothing escapes — not
  daemons that called ``setsid``, not double-forked children. The candidate cannot kill the
  reaper (its real and saved uids differ). The zygote is a child subreaper, so every orphan is
  re-parented to it; a run returns only when the tester is the zygote's only child left (when
  the candidate ended by itself and left nothing behind, the sweep is skipped).
* Namespaces: the zygote unshares its mount, network and IPC namespaces once at start. The new
  network namespace has only a loopback device that is down: no connection can be made, not
  even to the host's ``127.0.0.1``. Private tmpfs mounts cover every world-writable directory
  (``/tmp``, ``/var/tmp``, ``/dev/shm``, ``/run/lock``) and are emptied after each run, so a
  candidate cannot change any host file (its uid owns nothing and can write nowhere else).
  :attr:`Result.network_isolated` / ``filesystem_isolated`` say whether this was in force.
* Limits (per process): ``RLIMIT_CPU``, ``RLIMIT_AS`` (default 1 GB), ``RLIMIT_FSIZE`` (which
  also caps captured output: stdout/stderr go to files), ``RLIMIT_NOFILE``, ``RLIMIT_NPROC``,
  no core dumps; wall-clock deadline; ``PR_SET_NO_NEW_PRIVS`` (no set-uid escalation);
  parent-death signal. Each run has an empty working directory owned by the candidate uid and
  removed afterwards, stdin is ``/dev/null``, the environment is scrubbed (the zygote starts
  from an environment of one variable, a fixed ``PYTHONHASHSEED``), and the interpreter runs
  as isolated mode would (no user site, no script folder on the path) and without ``site``.

Wire format
-----------
Every stream message is a frame: a 4-byte big-endian length, then that many bytes of UTF-8
JSON. The harness sends the zygote one request per run (code, prelude, exports, the job file's
name, the limits) on its stdin and reads the result's fields from its stdout; the tester and
the candidate exchange calls and replies the same way over two pipes, values as tagged plain
data (see :mod:`.wire`), never pickles. The tests reach the tester as a JSON file in its inbox;
the zygote hands it each run as one datagram on a ``SOCK_SEQPACKET`` socket (the job file's
name and the nonce, with the channel's two descriptors attached), and the tester answers with
one datagram: the nonce, then the verdict as JSON.

Parts
-----
* :mod:`.job`: :class:`Job`, :class:`Result` and :data:`STATUSES` (what a run takes and gives);
* :mod:`.limits`: :class:`Limits` and how each child's rlimits are set from them;
* :mod:`.wire`: framing, value encoding, the children's fixed descriptor numbers;
* :mod:`.host`: :class:`Sandbox`, the pool of zygotes, uid leases, finding an interpreter;
* :mod:`.zygote`: the zygote's setup and run loop; :mod:`.isolation` (namespaces, mounts,
  uids, capabilities) and :mod:`.processes` (reaping, killing) are its tools, :mod:`.verdict`
  turns the tester's verdict into a status;
* :mod:`.candidate` and :mod:`.tester`: what the two children run.

The zygote cannot import mrbench (isolated mode: no site-packages, and its directory is not
on ``sys.path``), so everything it runs (:mod:`.zygote` and the modules it loads: ``wire``,
``limits``, ``isolation``, ``processes``, ``verdict``, ``candidate``, ``tester``) uses the
standard library and relative imports of its siblings only: the zygote script registers its
own directory as a bare package, without running this ``__init__`` (see the top of
:mod:`.zygote`). The host side is ``__init__``, :mod:`.host` and :mod:`.job`.

Threat model
------------
The candidate is arbitrary code from a model being optimised against these tests, so we assume
it will eventually try everything: exhaust CPU, memory, processes, disk or output; outlive the
run; read secrets from the environment or files; reach the network; kill or trace other
processes; and above all **fake success**. Success is decided only by the zygote, from a
verdict that (1) comes from the tester, which the candidate cannot signal, trace or read
(different uid; the tester is also non-dumpable), (2) arrives on a socket only the tester and
the zygote hold (the candidate's process never inherits it), (3) carries a nonce the zygote
draws *after* forking the candidate, so no copy of it ever exists in the candidate's memory,
and (4) is sent only after the test code returned without an exception. Exiting early
(``sys.exit``/``os._exit`` with any code), printing "passed", writing to stray file
descriptors, monkey-patching builtins or closing the channel therefore can only make the run
fail. The tests never enter the candidate's process: the harness writes them to a file in the
tester's inbox (a directory only the tester uid can open), the tester reads and deletes it,
and the zygote — whose memory each candidate is a copy of — never reads them; so a candidate
cannot look up the expected answers either.

Not covered: kernel exploits (use a VM or gVisor for hostile-by-design inputs); timing side
channels; a fork bomb's total memory is bounded by ``max_processes × memory_mb`` rather than by
one budget (cgroups would give one); candidates may import any standard-library module.

Without root (e.g. a laptop) the sandbox degrades openly: candidate and tester share the
user's uid (the tester is still non-dumpable and the nonce still required), processes are
cleaned up by walking the zygote's descendants, and namespaces are used only if unprivileged
user namespaces are allowed. ``Result.user_isolated`` is then False.
"""

from .host import Sandbox
from .job import STATUSES, Job, Result
from .limits import Limits

__all__ = ["STATUSES", "Job", "Limits", "Result", "Sandbox"]
