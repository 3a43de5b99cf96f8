"""``madengine run --parallel N``: up to N models at once on one host, on disjoint resources.

Each model gets what it needs before it starts, taken from a pool:

* a model that needs GPUs gets that many GPU indices no running model holds; its run sees only
  those (the context's ``docker_gpus``, which become the container's device requests or
  ``CUDA_VISIBLE_DEVICES``/``HIP_VISIBLE_DEVICES``);
* a model that needs no GPU gets a set of CPUs no running model holds (its ``n_cpus`` field, else
  an equal share: CPUs // N; a distributed job at least one per rank on the node); the container
  runs with that ``cpuset``, host processes with that affinity.

Models start in catalog order; one that waits for resources holds back those after it (first in,
first out), so the order of starts is the order of a sequential run. Each model runs through the
same runner, exactly as it would alone, in the slot it was granted, so rows and statuses equal
those of a sequential run; only the order of the rows in perf.csv follows the order in which models finish. Records go
through one queue to the caller, which appends them to perf.csv one at a time.
"""

from __future__ import annotations

import collections
import dataclasses
import os
import queue
import threading
from typing import Iterator

from madengine.catalog import Model
from madengine.context import Context
from madengine.core.errors import MadEngineError
from madengine.core.events import Progress, Reporter
from madengine.execution.plan import available_gpus, distributed_spec, resolve_gpus
from madengine.launch import procs_per_node
from madengine.execution.runner import ModelRunner, Slot
from madengine.results import PerfRecord, Status
from madengine.tracing import names

_POLL = 0.2


@dataclasses.dataclass(frozen=True)
class Need:
    gpus: int = 0
    cpus: int = 0


class ResourcePool:
    """Free GPU indices and CPU ids; a request is granted whole or not at all."""

    def __init__(self, gpus: list[int], cpus: list[int]) -> None:
        self.free_gpus = sorted(gpus)
        self.free_cpus = sorted(cpus)
        self.all_gpus = len(gpus)
        self.all_cpus = len(cpus)

    def take(self, need: Need) -> Slot | None:
        if need.gpus > len(self.free_gpus) or need.cpus > len(self.free_cpus):
            return None
        gpus, self.free_gpus = self.free_gpus[:need.gpus], self.free_gpus[need.gpus:]
        cpus, self.free_cpus = self.free_cpus[:need.cpus], self.free_cpus[need.cpus:]
        return Slot(gpus, cpus)

    def give_back(self, slot: Slot) -> None:
        self.free_gpus = sorted(self.free_gpus + slot.gpus)
        self.free_cpus = sorted(self.free_cpus + slot.cpus)


def available_cpus() -> list[int]:
    try:
        return sorted(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return list(range(os.cpu_count() or 1))


def model_need(model: Model, context: Context, pool: ResourcePool, workers: int) -> Need:
    """GPUs the model's run would get (a distributed job: one per rank); a model without GPUs needs
    CPUs instead, at least one per process of its job on this node, so jobs never share a CPU (a
    job of more ranks than the host has CPUs gets all of them, and runs alone)."""
    try:
        gpus = len(resolve_gpus(model, context))
        spec = distributed_spec(model, context)
    except MadEngineError:
        return Need()  # the run itself records why; it holds nothing
    if gpus:
        return Need(gpus=min(gpus, pool.all_gpus))
    wanted = model.extra.get("n_cpus", context.get("n_cpus"))
    try:
        cpus = int(wanted) if wanted is not None else max(1, pool.all_cpus // workers)
    except (TypeError, ValueError):
        cpus = max(1, pool.all_cpus // workers)
    if spec is not None:
        cpus = max(cpus, procs_per_node(spec, []))
    return Need(cpus=max(1, min(cpus, pool.all_cpus)))


class LockedReporter:
    """Whole lines from concurrent models: one lock around every write to the shared streams."""

    def __init__(self, inner: Reporter) -> None:
        self._inner = inner
        self._lock = threading.Lock()

    def message(self, text: str) -> None:
        with self._lock:
            self._inner.message(text)

    def output(self, key: str, line: str) -> None:
        with self._lock:
            self._inner.output(key, line)

    def data(self, text: str) -> None:
        with self._lock:
            self._inner.data(text)

    def progress(self, event: Progress) -> None:
        with self._lock:
            self._inner.progress(event)


@dataclasses.dataclass
class _Crash:
    model: Model
    error: BaseException


_DONE = object()


class ParallelScheduler:
    """Runs ``models`` on ``runner`` (whose reporter must be a :class:`LockedReporter`), up to
    ``workers`` at once, each in the slot of resources it was granted."""

    def __init__(self, runner: ModelRunner, models: list[Model], workers: int) -> None:
        self.runner = runner
        self.models = collections.deque(models)
        self.workers = max(1, min(workers, len(models)))
        self.pool = ResourcePool(available_gpus(runner.context), available_cpus())
        self.needs = {m.name: model_need(m, runner.context, self.pool, self.workers) for m in models}
        self.results: queue.Queue = queue.Queue()
        self.cond = threading.Condition()
        self.stopping = False

    # -- workers -------------------------------------------------------------------------------
    def _next(self) -> tuple[Model, Slot] | None:
        with self.cond:
            while True:
                if self.stopping or not self.models:
                    return None
                slot = self.pool.take(self.needs[self.models[0].name])
                if slot is not None:
                    return self.models.popleft(), slot
                self.cond.wait(_POLL)

    def _slot(self, number: int) -> None:
        with self.runner.tracer.span(names.SPAN_PARALLEL_SLOT, {names.ATTR_SLOT: number}):
            self._work()

    def _work(self) -> None:
        try:
            while True:
                job = self._next()
                if job is None:
                    return
                model, slot = job
                try:
                    for record in self.runner.run_model(model, slot):
                        self.results.put(self._marked(record))
                    if self.runner.stopped:
                        self.stopping = True
                except BaseException as exc:  # handed to the caller's thread, which re-raises it
                    self.results.put(_Crash(model, exc))
                finally:
                    with self.cond:
                        self.pool.give_back(slot)
                        self.cond.notify_all()
        finally:
            self.results.put(_DONE)

    def _marked(self, record: PerfRecord) -> PerfRecord:
        """A model that failed because the run was being stopped says so."""
        if self.stopping and not record.ok:
            why = self.runner.stopped.reason if self.runner.stopped else "interrupted"
            if not record.reason.startswith(why):
                record.reason = f"{why} ({record.reason})" if record.reason else why
            record.status = Status.FAILURE
        return record

    # -- caller's thread -----------------------------------------------------------------------
    def run(self) -> Iterator[PerfRecord]:
        # each slot thread continues the run's trace (threads do not inherit the current span)
        threads = [threading.Thread(target=self.runner.tracer.bind(self._slot), args=(i,),
                                    name=f"madengine-parallel-{i}", daemon=True) for i in range(self.workers)]
        for thread in threads:
            thread.start()
        done = 0
        crash: _Crash | None = None
        while done < len(threads):
            try:
                item = self.results.get(timeout=_POLL)
            except queue.Empty:
                continue
            except KeyboardInterrupt as exc:
                self.runner.note_stop(exc)
                self._abort()
                continue
            if item is _DONE:
                done += 1
            elif isinstance(item, _Crash):
                if isinstance(item.error, KeyboardInterrupt) or self.stopping:
                    yield self.runner.failure(item.model, self.runner.note_stop(item.error)
                                              if isinstance(item.error, KeyboardInterrupt) else "interrupted")
                    self._abort()
                elif crash is None:
                    crash = item
                    self._abort()
            else:
                yield item
        if crash is not None:
            raise crash.error

    def _abort(self) -> None:
        """Stop starting models and end the running ones (their rows say 'interrupted')."""
        with self.cond:
            self.stopping = True
            self.cond.notify_all()
        self.runner.executor.abort(self.runner.run_id)


def run_parallel(runner: ModelRunner, models: list[Model], workers: int) -> Iterator[PerfRecord]:
    """Records of every model, as they finish; up to ``workers`` models run at once."""
    if not models:
        return iter(())
    return ParallelScheduler(runner, models, workers).run()
