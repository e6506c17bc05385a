"""The candidate's side: compile the untrusted code (in the zygote), then run it and serve calls.

The zygote compiles each job into a :class:`Compiled` before forking the candidate process,
which runs :func:`serve`: it executes the prelude and the code, evaluates the exported entry
points, then answers the tester's calls (framed on :data:`~.wire.FD_CALLS_IN`, replies on
:data:`~.wire.FD_REPLIES_OUT`) until the tester hangs up. Nothing here is trusted by the zygote:
it decides success only from the tester's verdict. Loaded inside the zygote (see :mod:`.zygote`):
standard library only.

**Work.** Each reply carries ``w``: the line events the call executed in the candidate's own code
(its functions, nested functions, lambdas and comprehensions: code objects compiled from
``<candidate>``), counted with :func:`sys.settrace`. Code it calls elsewhere (builtins, the
standard library, the prelude) is not counted, so a builtin ``sorted`` costs one line where a
hand-written sort costs its loop. Unlike a timing, the count is the same on a quiet and on a
loaded machine (for one Python version; the zygote runs with a fixed hash seed, so set order is
fixed too), which makes the efficiency reward reproducible. A call that leaves another trace
function in place (the code called ``sys.settrace``) replies ``w: null``: its work is unknown.
"""

from __future__ import annotations

import sys
from typing import Any, ClassVar

from .wire import (
    FD_CALLS_IN,
    FD_REPLIES_OUT,
    Unsupported,
    decode,
    describe_exception,
    encode,
    read_frame,
    write_frame,
)

_MAX_CACHED_PRELUDES = 64
CANDIDATE_FILENAME = "<candidate>"
"""The file name the candidate's code is compiled under; only its code objects count as work."""
_settrace = sys.settrace  # bound before any candidate code runs (it could rebind the sys names)
_gettrace = sys.gettrace


class Compiled:
    """A job's code compiled by the zygote before forking (the child only executes it).

    Compiling is the same work wherever it happens, but done in the zygote it allocates in
    pages the zygote owns instead of copy-on-write pages of a short-lived child; preludes are
    cached, since a training batch runs the same problem many times.

    ``req``: the run request (``prelude``, ``code``, ``exports`` as (name, expression) pairs).
    A compile error is kept in :attr:`error` and reported by the candidate when the tests call.
    """

    _preludes: ClassVar[dict[str, Any]] = {}

    def __init__(self, req: dict[str, Any]) -> None:
        self.error: tuple[str, str] | None = None
        self.prelude: Any = None
        self.code: Any = None
        self.exports: list[tuple[str, Any]] = []
        try:
            text = req["prelude"]
            self.prelude = self._preludes.get(text)
            if self.prelude is None:
                self.prelude = compile(text, "<prelude>", "exec", dont_inherit=True)
                if len(self._preludes) >= _MAX_CACHED_PRELUDES:
                    self._preludes.pop(next(iter(self._preludes)))
                self._preludes[text] = self.prelude
            self.code = compile(req["code"], CANDIDATE_FILENAME, "exec", dont_inherit=True)
            self.exports = [
                (name, compile(expr, "<entry point>", "eval", dont_inherit=True))
                for name, expr in req["exports"]
            ]
        except BaseException as exc:  # SyntaxError, or the compiler giving up (RecursionError, …)
            self.error = ("CompileError", "{}: {}".format(*describe_exception(exc)))


def serve(job: Compiled) -> None:
    """Run the compiled code and serve calls from the tester until it hangs up."""
    import builtins

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 3000))
    ns: dict[str, Any] = {"__name__": "__candidate__", "__builtins__": builtins}
    functions: dict[str, Any] = {}
    shared: dict[str, type] = {}
    load_error = job.error
    if load_error is None:
        try:
            exec(job.prelude, ns)
            shared = {k: v for k, v in ns.items() if isinstance(v, type)}
            exec(job.code, ns)
            for name, expr in job.exports:
                functions[name] = eval(expr, ns)
        except BaseException as exc:
            load_error = describe_exception(exc)
    names = frozenset(shared)
    write_frame(FD_REPLIES_OUT, {"ready": load_error is None, "e": load_error})
    while True:
        try:
            call = read_frame(FD_CALLS_IN)
        except ValueError:
            break
        if call is None:
            break
        try:
            fn = functions[call["f"]]
            args = decode(call["a"], shared)
            kwargs = decode(call["k"], shared)
        except Unsupported as exc:
            _reply({"e": ["UnsupportedValue", str(exc)]})
            continue
        except BaseException as exc:
            _reply({"e": list(describe_exception(exc))})
            continue
        counter = _WorkCounter()
        try:
            value = counter.run(fn, args, kwargs)
            reply: dict[str, Any] = {"v": encode(value, names)}
        except Unsupported as exc:
            reply = {"e": ["UnsupportedValue", str(exc)]}
        except BaseException as exc:
            reply = {"e": list(describe_exception(exc))}
        reply["w"] = counter.lines
        _reply(reply)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:
            pass


class _WorkCounter:
    """Counts the line events of one call in code compiled from :data:`CANDIDATE_FILENAME`.

    ``lines`` is None when the call replaced the trace function (its work is unknown).
    """

    def __init__(self) -> None:
        self.lines: int | None = 0

    def run(self, fn: Any, args: Any, kwargs: Any) -> Any:
        count = 0

        def local(frame: Any, event: str, arg: Any) -> Any:
            nonlocal count
            if event == "line":
                count += 1
            return local

        def on_call(frame: Any, event: str, arg: Any) -> Any:
            # Called for every new frame; only the candidate's own frames get the line tracer,
            # so the standard library it calls runs at full speed and is not counted.
            return local if frame.f_code.co_filename == CANDIDATE_FILENAME else None

        _settrace(on_call)
        try:
            return fn(*args, **kwargs)
        finally:
            intact = _gettrace() is on_call
            _settrace(None)
            self.lines = count if intact else None


def _reply(reply: dict[str, Any]) -> None:
    try:
        write_frame(FD_REPLIES_OUT, reply)
    except (Unsupported, ValueError, TypeError, RecursionError) as exc:
        write_frame(FD_REPLIES_OUT, {"e": ["UnsupportedValue", str(exc)[:300]], "w": reply.get("w")})
