"""Find the PyTorch models a script calls: run it under a hook that sees every ``nn.Module`` call.

The hook replaces ``torch.nn.Module.__call__`` (and wraps ``nn.Module.__init__``) for the length of
the script's run and puts both back afterwards:

* ``__init__``: remembers *where* each module was built: the first frame outside torch, the
  standard library and site-packages that is not the module's own ``__init__`` (for a model made
  by ``transformers``, the script's line that asked for it);
* ``__call__``: counts how deep module calls are nested. A call at depth 0 (made by the script, not
  by another module) is a model; calls inside it down to ``max_depth`` are its sub-models. For
  those, the hook computes the model hash (:mod:`.hashing`) of the module and its arguments, counts
  the call and its time, and copies the arguments of the first successful call (the example inputs
  the build exports and the benchmarks run). Deeper calls only pass through a depth counter, and
  the original ``__call__`` keeps torch's own fast path, which is why the hook costs the script
  little (``benchmarks/script_hook_overhead.py``).

Modules without parameters or buffers (activations, pure containers of nothing) are not models.
Calls from threads other than the script's are not observed. A module whose ``forward`` is called
directly (``model.forward(x)``) is not seen; ``model(x)`` is.

The script runs in this process as ``__main__`` (``runpy.run_path``) with ``sys.argv`` =
``[script, *script_args]`` and its folder first on ``sys.path``; its own output goes to stderr so
that stdout stays madengine's data. An exception inside a model's call is that model's error when
none of its calls succeeded; any exception that ends the script is the script's error (what ran
before it is kept).
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import os
import runpy
import sys
import sysconfig
import threading
import time
import traceback
import weakref
from pathlib import Path
from typing import Any, Callable, Iterator

from madengine.bench.pytorch import hashing
from madengine.bench.pytorch.results import ModelInfo, TensorInfo

_MISSING = object()


@dataclasses.dataclass
class Found:
    """One observed model (see :class:`ModelInfo`), with the module and its example inputs."""

    info: ModelInfo
    module: Any
    structure: str
    example: tuple[tuple, dict] | None = None  # (args, kwargs) of the first successful call
    succeeded: bool = False


@dataclasses.dataclass
class Analysis:
    """What running a script (or one call) under the hook found."""

    found: list[Found]
    error: str = ""  # the exception that ended the script ("" when it ran to the end)
    run_time_s: float = 0.0

    @property
    def models(self) -> list[ModelInfo]:
        return [f.info for f in self.found]


class _ModuleFacts:
    __slots__ = ("structure", "structure_digest", "parameters", "parameter_bytes", "is_model")

    def __init__(self, module: Any) -> None:
        self.structure = hashing.structure_text(module)
        self.structure_digest = hashing.sha256_text(self.structure)
        tensors = [t for t in module.parameters()] + [b for b in module.buffers()]
        self.parameters = sum(p.numel() for p in module.parameters())
        self.parameter_bytes = sum(t.numel() * t.element_size() for t in tensors)
        self.is_model = bool(tensors)


class ModelSpy:
    """The hook (see the module doc). Use as a context manager around the code to observe."""

    def __init__(self, max_depth: int = 0, *, keep_inputs: bool = True, parameterless: bool = False) -> None:
        import torch

        self.torch = torch
        self.max_depth = max_depth
        self.keep_inputs = keep_inputs
        self.parameterless = parameterless
        self.found: dict[str, Found] = {}
        self._stack: list[Found] = []
        self._depth = 0
        self._thread = threading.get_ident()
        self._facts: dict[int, tuple[Any, _ModuleFacts]] = {}
        self._built_at: "weakref.WeakKeyDictionary[Any, str]" = weakref.WeakKeyDictionary()
        self._names_cache: dict[tuple, tuple[str, ...] | None] = {}
        self._library_dirs = _library_dirs(torch)
        self._original_call: Callable[..., Any] | None = None
        self._original_init: Callable[..., Any] | None = None

    # -- installing the hook ----------------------------------------------------------------------
    def __enter__(self) -> "ModelSpy":
        module_class = self.torch.nn.Module
        self._original_call = module_class.__call__
        self._original_init = module_class.__init__
        module_class.__call__ = self._make_call()
        module_class.__init__ = self._make_init()
        return self

    def __exit__(self, *exc: Any) -> None:
        module_class = self.torch.nn.Module
        module_class.__call__ = self._original_call
        module_class.__init__ = self._original_init

    def _make_init(self) -> Callable[..., None]:
        original, built_at, where = self._original_init, self._built_at, self._where_built

        def init_spy(module: Any, *args: Any, **kwargs: Any) -> None:
            original(module, *args, **kwargs)
            try:
                if module not in built_at:
                    built_at[module] = where(sys._getframe(1), module)
            except TypeError:  # an unhashable or un-weakref-able module: no build site
                pass

        return init_spy

    def _make_call(self) -> Callable[..., Any]:
        original, spy, thread = self._original_call, self, self._thread
        get_ident = threading.get_ident

        def call_spy(module: Any, *args: Any, **kwargs: Any) -> Any:
            if get_ident() != thread:
                return original(module, *args, **kwargs)
            depth = spy._depth
            if depth > spy.max_depth:
                spy._depth = depth + 1
                try:
                    return original(module, *args, **kwargs)
                finally:
                    spy._depth = depth
            return spy._observed_call(original, module, depth, args, kwargs)

        return call_spy

    # -- one observed call ------------------------------------------------------------------------
    def _observed_call(self, original: Callable[..., Any], module: Any, depth: int, args: tuple,
                       kwargs: dict) -> Any:
        facts = self._facts_of(module)
        if not facts.is_model and not self.parameterless:
            self._depth = depth + 1
            try:
                return original(module, *args, **kwargs)
            finally:
                self._depth = depth
        names = self._argument_names(module, len(args), tuple(kwargs))
        arguments = _named_arguments(names, args, kwargs)
        signature = hashing.signature_text(arguments)
        key = hashing.model_hash(facts.structure, signature)
        found = self.found.get(key)
        if found is None:
            found = self._new_model(key, module, facts, depth, arguments, sys._getframe(2))
        example = _copy_arguments(args, kwargs, self.torch) if self.keep_inputs and found.example is None else None
        found.info.calls += 1
        self._stack.append(found)
        self._depth = depth + 1
        started = time.perf_counter()
        try:
            result = original(module, *args, **kwargs)
        except BaseException as exc:
            if not found.succeeded and not isinstance(exc, (KeyboardInterrupt, SystemExit)):
                found.info.error = _exception_text(exc)
            raise
        finally:
            found.info.call_time_s += time.perf_counter() - started
            self._depth = depth
            self._stack.pop()
        if not found.succeeded:
            found.succeeded, found.info.error = True, ""
        if example is not None:
            found.example = example
        return result

    def _facts_of(self, module: Any) -> _ModuleFacts:
        known = self._facts.get(id(module))
        if known is not None and known[0]() is module:
            return known[1]
        facts = _ModuleFacts(module)
        try:
            self._facts[id(module)] = (weakref.ref(module), facts)
        except TypeError:
            pass
        return facts

    def _argument_names(self, module: Any, positional: int, keywords: tuple[str, ...]) -> tuple[str, ...] | None:
        """Names of the positional arguments (bound to ``forward``'s parameters), or None when
        ``forward`` takes ``*args`` or cannot be inspected (they are then named by position)."""
        forward = getattr(type(module), "forward", None)
        key = (forward, positional, keywords)
        if key in self._names_cache:
            return self._names_cache[key]
        names = None
        try:
            parameters = list(inspect.signature(module.forward).parameters.values())
            kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
            if all(p.kind in kinds for p in parameters[:positional]) and len(parameters) >= positional:
                names = tuple(p.name for p in parameters[:positional])
        except (TypeError, ValueError):
            pass
        self._names_cache[key] = names
        return names

    def _new_model(self, key: str, module: Any, facts: _ModuleFacts, depth: int,
                   arguments: list[tuple[str, Any]], caller: Any) -> Found:
        parent = self._stack[-1] if self._stack else None
        name = _path_in(parent.module, module) if parent is not None else _variable_name(caller, module)
        info = ModelInfo(
            hash=key, name=name or type(module).__name__, model_class=hashing.class_name(module),
            built_at=self._built_at.get(module, "") if _weakrefable(module) else "", depth=depth,
            parent=parent.info.hash if parent is not None else "", parameters=facts.parameters,
            parameter_bytes=facts.parameter_bytes, inputs=tuple(_tensor_info(n, v, self.torch) for n, v in arguments))
        found = Found(info=info, module=module, structure=facts.structure)
        self.found[key] = found
        return found

    def _where_built(self, frame: Any, module: Any) -> str:
        """The first frame outside the libraries that is not the module's own ``__init__``."""
        first_outside = ""
        while frame is not None:
            filename = frame.f_code.co_filename
            if not filename.startswith(self._library_dirs) and not filename.startswith("<frozen"):
                own_init = frame.f_code.co_name == "__init__" and frame.f_locals.get("self") is module
                if not own_init:
                    return f"{filename}:{frame.f_lineno}"
                first_outside = first_outside or f"{filename}:{frame.f_lineno}"
            frame = frame.f_back
        return first_outside


# -- running a script -----------------------------------------------------------------------------
def analyze_script(path: Path, script_args: list[str], *, max_depth: int = 0, keep_inputs: bool = True) -> Analysis:
    """Run the script under the hook (module doc); never raises for the script's own exceptions."""
    path = Path(path).resolve()
    spy = ModelSpy(max_depth, keep_inputs=keep_inputs)
    error = ""
    started = time.perf_counter()
    with _script_environment(path, script_args), spy:
        try:
            runpy.run_path(str(path), run_name="__main__")
        except SystemExit as exc:
            if exc.code not in (None, 0):
                error = f"{path.name}: exited with status {exc.code}"
        except KeyboardInterrupt:
            raise
        except BaseException as exc:  # the script's own failure is a result, not madengine's
            error = script_error_text(exc, path)
    return Analysis(found=list(spy.found.values()), error=error, run_time_s=time.perf_counter() - started)


def analyze_call(model: Any, args: tuple, kwargs: dict) -> Analysis:
    """Call ``model(*args, **kwargs)`` once under the hook (the API's benchmark_model)."""
    spy = ModelSpy(0, keep_inputs=True, parameterless=True)
    error = ""
    started = time.perf_counter()
    with spy:
        try:
            model(*args, **kwargs)
        except KeyboardInterrupt:
            raise
        except Exception as exc:
            error = _exception_text(exc)
    found = [f for f in spy.found.values() if f.module is model]
    return Analysis(found=found, error=error, run_time_s=time.perf_counter() - started)


@contextlib.contextmanager
def _script_environment(path: Path, script_args: list[str]) -> Iterator[None]:
    """The script's argv and path; afterwards madengine's are put back, and so is torch's thread
    count (a script's ``torch.set_num_threads`` must not decide the benchmarks' threads)."""
    import torch

    saved_argv, saved_path, saved_threads = sys.argv[:], sys.path[:], torch.get_num_threads()
    sys.argv = [str(path), *script_args]
    sys.path.insert(0, str(path.parent))
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        sys.argv[:] = saved_argv
        sys.path[:] = saved_path
        torch.set_num_threads(saved_threads)


def script_error_text(exc: BaseException, path: Path) -> str:
    """``script.py:12: ValueError: message``: the script's deepest line in the traceback."""
    line = ""
    for frame in traceback.extract_tb(exc.__traceback__):
        if Path(frame.filename).resolve() == path:
            line = f"{path.name}:{frame.lineno}: "
    return line + _exception_text(exc)


def _exception_text(exc: BaseException, limit: int = 500) -> str:
    text = " ".join(f"{type(exc).__name__}: {exc}".split())
    return text[:limit] + ("…" if len(text) > limit else "")


# -- helpers ----------------------------------------------------------------------------------------
def _library_dirs(torch: Any) -> tuple[str, ...]:
    paths = sysconfig.get_paths()
    dirs = {os.path.dirname(torch.__file__), paths.get("stdlib", ""), paths.get("purelib", ""),
            paths.get("platlib", ""), str(Path(__file__).resolve().parents[2])}
    return tuple(sorted(d for d in dirs if d))


def _named_arguments(names: tuple[str, ...] | None, args: tuple, kwargs: dict) -> list[tuple[str, Any]]:
    positional = [(names[i] if names else f"input_{i}", value) for i, value in enumerate(args)]
    return positional + list(kwargs.items())


def _tensor_info(name: str, value: Any, torch: Any) -> TensorInfo:
    if isinstance(value, torch.Tensor):
        return TensorInfo(name, hashing.dtype_name(value.dtype), tuple(int(d) for d in value.shape))
    return TensorInfo(name, value=hashing.value_text(value))


def _copy_arguments(args: tuple, kwargs: dict, torch: Any) -> tuple[tuple, dict]:
    """The call's arguments with every tensor copied (the call may change its inputs in place)."""

    def copy(value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            return value.detach().clone()
        if isinstance(value, (list, tuple)) and type(value) in (list, tuple):
            return type(value)(copy(v) for v in value)
        if type(value) is dict:
            return {k: copy(v) for k, v in value.items()}
        return value

    return tuple(copy(a) for a in args), {k: copy(v) for k, v in kwargs.items()}


def _variable_name(frame: Any, module: Any) -> str:
    """The name the calling code holds the model under (its locals, then its globals)."""
    if frame is None:
        return ""
    for scope in (frame.f_locals, frame.f_globals):
        for name, value in list(scope.items()):
            if value is module and not name.startswith("_"):
                return name
    return ""


def _path_in(parent: Any, module: Any) -> str:
    for name, sub in parent.named_modules():
        if sub is module and name:
            return name
    return ""


def _weakrefable(module: Any) -> bool:
    try:
        weakref.ref(module)
        hash(module)
    except TypeError:
        return False
    return True
