"""``portkern train --ray``: the run grid on a Ray cluster, one timed run per piece of hardware at a time.

Plain Ray actors, not Ray Tune: a training benchmark is a fixed grid of timed runs, not a search, and what
matters is *where* each run executes. An actor is a long-lived worker process that owns one **slot** --
a disjoint block of K cores of one node (``--cores-per-run``), or one GPU plus K cores for its host side --
for its whole life: the process is pinned to those cores (``sched_setaffinity`` on every thread) and
PyTorch, OpenMP/BLAS and the OpenCL CPU drivers (PoCL, Intel's runtime) are told the count through the
environment Ray starts the process with, so they size their thread pools before they initialise. PoCL
and Intel's runtime on one CPU are the same hardware: a slot is cores, whatever driver a run uses, so two
timed runs never share a core. The driver hands one run at a time to each idle slot, writes every finished
run into the journal itself (workers need no shared file system), and replaces a worker that dies: its run
goes back to the head of the queue once (to the next free worker), then is recorded as failed with the
reason. Ray's own task retries are off for the same reason: a run that is retried must be seen to be.
"""

from __future__ import annotations

import os
import platform
import sys
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

#: Environment variables that size a worker's thread pools to its K cores (read when each library starts).
THREAD_ENV = (
    "OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS",  # PyTorch's intra-op pool, BLAS
    "POCL_MAX_PTHREAD_COUNT",  # PoCL's pthread CPU driver (PoCL <= 3)
    "POCL_CPU_MAX_CU_COUNT",  # PoCL's cpu driver (PoCL >= 4: compute units = threads)
    "CL_CONFIG_CPU_TBB_NUM_WORKERS",  # Intel's OpenCL CPU runtime (TBB workers)
)
#: A slot's worker is replaced at most this many times; past that the slot is dropped (a broken node).
MAX_WORKER_DEATHS = 3
GPU_WORDS = ("cuda", "gpu", "nvidia", "rocm", "hip", "amd", "mps")


def needs_gpu(spec: Any) -> bool:
    """Whether a stack times a GPU: the CUDA-only backends, or a device naming a GPU (torch@cuda,
    opencl@nvidia). Everything else (numpy, gymnasium, opencl@pocl, opencl@intel, torch) runs on CPU cores."""
    if spec.backend in ("cupy", "cuda_host"):
        return True
    return bool(spec.device) and any(w in spec.device.lower() for w in GPU_WORDS)


@dataclass
class Slot:
    """One piece of hardware a run holds alone: a block of cores of one node, and a GPU when ``gpu``."""

    node_id: str
    node_ip: str
    block: int  # the block-th run of K cores of the node's usable cores
    gpu: bool
    deaths: int = 0
    actor: Any = None
    info: dict[str, Any] = field(default_factory=dict)


@dataclass
class Item:
    task: Any
    spec: Any
    seed: int
    attempts: list[dict[str, Any]] = field(default_factory=list)

    @property
    def label(self) -> str:
        return f"{self.task.env_id} {self.spec.label} seed {self.seed}"


def pin_all_threads(cores: Sequence[int]) -> None:
    """Pin this process to ``cores``: every thread it already has (Ray's own) and, by inheritance, every one
    it starts later (PyTorch's, the OpenCL drivers')."""
    mask = set(cores)
    try:
        tids = [int(t) for t in os.listdir("/proc/self/task")]
    except OSError:
        tids = [0]
    for tid in tids:
        try:
            os.sched_setaffinity(tid, mask)
        except OSError:  # a thread that ended meanwhile
            pass
    os.sched_setaffinity(0, mask)


class _Worker:
    """The actor body: a process that owns one slot and runs one training run at a time on it."""

    def __init__(self, block: int, cores_per_run: int, gpu: bool) -> None:
        usable = sorted(os.sched_getaffinity(0))
        cores = usable[block * cores_per_run:(block + 1) * cores_per_run]
        if len(cores) < cores_per_run:
            raise RuntimeError(f"slot {block}: this node has {len(usable)} usable cores, too few for block {block} "
                               f"of {cores_per_run}")  # fmt: skip
        pin_all_threads(cores)
        self.cores, self.threads, self.gpu = cores, cores_per_run, gpu
        self.primed: set[tuple[str, str]] = set()
        self.name = f"{platform.node()}:{os.getpid()}"

    def info(self) -> dict[str, Any]:
        import ray

        from .runner import code_revision

        return {"worker": self.name, "pid": os.getpid(), "cores": self.cores, "code_revision": code_revision(),
                "gpus": [str(g) for g in ray.get_gpu_ids()] if self.gpu else []}  # fmt: skip

    def run(self, task: Any, spec: Any, seed: int) -> dict[str, Any]:
        from .runner import _iso, prime, train_one

        pin_all_threads(self.cores)  # threads a library started since are pinned too
        primed = None
        if (task.env_id, spec.label) not in self.primed:  # compile caches are per process: prime untimed
            primed = prime(task, spec, threads=self.threads)
            self.primed.add((task.env_id, spec.label))
        start = time.time()
        result, identity = train_one(task, spec, seed, threads=self.threads)
        end = time.time()
        hardware = identity["hardware_key"]
        info = self.info()
        if info["gpus"]:
            hardware += f" (GPU {','.join(info['gpus'])})"
        schedule = {"worker": self.name, "hardware": hardware, "cores": self.cores, "start": _iso(start),
                    "end": _iso(end)}  # fmt: skip
        return {"run": {**result.as_dict(), "schedule": schedule}, "device": identity, "prime_s": primed}


class RayGrid:
    """Runs a training grid's remaining runs on Ray (see the module docstring)."""

    def __init__(self, address: str | None, cores_per_run: int, stacks: Sequence[Any],
                 on_dispatch: Callable[[str, dict[str, Any]], None] | None = None) -> None:  # fmt: skip
        if not isinstance(cores_per_run, int) or cores_per_run < 1:
            raise ValueError(f"--cores-per-run: expected an integer >= 1, got {cores_per_run!r}")
        try:
            import ray  # noqa: F401
        except ImportError:
            raise ValueError("--ray: needs Ray: pip install 'portkern[ray]'") from None
        self.address, self.cores_per_run, self.on_dispatch = address, cores_per_run, on_dispatch
        gpu = any(needs_gpu(s) for s in stacks)
        self.unit = (f"{cores_per_run} CPU core(s) reserved by one run at a time (pinned, disjoint)"
                     + (", or one GPU (with its run's host cores)" if gpu else ""))  # fmt: skip

    # ---- slots ---------------------------------------------------------------------------------------
    def _slots(self, want_cpu: bool, want_gpu: bool) -> list[Slot]:
        import ray

        slots = []
        for node in ray.nodes():
            if not node.get("Alive"):
                continue
            res = node.get("Resources", {})
            blocks, gpus = int(res.get("CPU", 0)) // self.cores_per_run, int(res.get("GPU", 0)) if want_gpu else 0
            gpus = min(gpus, blocks)  # a GPU run's host side needs its cores too
            for b in range(blocks):
                gpu = b < gpus
                if gpu or want_cpu:
                    slots.append(Slot(node["NodeID"], node.get("NodeManagerAddress", "?"), b, gpu))
        return slots

    def _start(self, slot: Slot) -> None:
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        k = self.cores_per_run
        env = {name: str(k) for name in THREAD_ENV}
        if os.environ.get("PORTKERN_MACHINE") and slot.node_id == ray.get_runtime_context().get_node_id():
            env["PORTKERN_MACHINE"] = os.environ["PORTKERN_MACHINE"]  # --machine names this node only
        actor_cls = ray.remote(_Worker)
        slot.actor = actor_cls.options(
            num_cpus=k, num_gpus=1 if slot.gpu else 0, max_restarts=0, max_task_retries=0,
            scheduling_strategy=NodeAffinitySchedulingStrategy(slot.node_id, soft=False),
            runtime_env={"env_vars": env},  # set before the worker process starts: before any library reads them
        ).remote(slot.block, k, slot.gpu)  # fmt: skip
        slot.info = ray.get(slot.actor.info.remote())
        from .runner import code_revision

        if slot.info["code_revision"] != code_revision():  # one JSON, one code revision: no mixed measurements
            ray.kill(slot.actor)
            raise ValueError(f"--ray: the worker on {slot.node_ip} runs portkern at revision "
                             f"{slot.info['code_revision']}, the driver {code_revision()}; install the same "
                             "revision on every node")  # fmt: skip

    # ---- the grid ------------------------------------------------------------------------------------
    def execute(self, todo: Sequence[tuple[Any, Any, int]], record: Callable[..., None],
                record_failed: Callable[..., None], record_prime: Callable[..., None],
                progress: bool = True) -> None:  # fmt: skip
        """Run ``todo`` and hand each outcome to the callbacks (the caller journals them). No progress bar:
        runs finish out of order, so a line per worker, finished run and retry is printed whatever
        ``progress`` says."""
        import ray

        if not todo:
            return
        started_here = not ray.is_initialized()
        if started_here:
            if self.address is None:
                ray.init(include_dashboard=False, log_to_driver=False, configure_logging=False)
            else:
                ray.init(address=self.address, log_to_driver=False, configure_logging=False)
        try:
            self._execute(ray, todo, record, record_failed, record_prime)
        finally:
            if started_here:
                ray.shutdown()

    def _execute(self, ray: Any, todo: Sequence[tuple[Any, Any, int]], record: Callable[..., None],
                 record_failed: Callable[..., None], record_prime: Callable[..., None]) -> None:  # fmt: skip
        queue = deque(Item(t, s, sd) for t, s, sd in todo)
        slots = self._slots(any(not needs_gpu(i.spec) for i in queue), any(needs_gpu(i.spec) for i in queue))
        if not slots:
            raise ValueError(f"--ray: no node of the cluster has {self.cores_per_run} free CPU core(s) for a run "
                             "(see --cores-per-run)")  # fmt: skip
        for slot in slots:
            self._start(slot)
        def say(m: str) -> None:
            print(m, file=sys.stderr, flush=True)

        say(f"ray: {len(slots)} worker(s): " + "; ".join(
            f"{s.info['worker']} cores {s.info['cores']}" + (f" GPU {s.info['gpus']}" if s.gpu else "") for s in slots))
        primed: set[tuple[str, str]] = set()
        inflight: dict[Any, tuple[Slot, Item]] = {}
        while queue or inflight:
            for slot in [s for s in slots if s.actor is not None and all(s is not v[0] for v in inflight.values())]:
                item = next((i for i in queue if needs_gpu(i.spec) == slot.gpu), None)
                if item is None:
                    continue
                queue.remove(item)
                ref = slot.actor.run.remote(item.task, item.spec, item.seed)
                inflight[ref] = (slot, item)
                if self.on_dispatch is not None:
                    self.on_dispatch(item.label, dict(slot.info))
            if not inflight:  # runs left that no live slot can take (their kind of slot is gone)
                for item in queue:
                    record_failed(item.task, item.spec, item.seed, "no live worker can run it", item.attempts)
                return
            ready, _ = ray.wait(list(inflight), num_returns=1)
            for ref in ready:
                slot, item = inflight.pop(ref)
                try:
                    got = ray.get(ref)
                except (ray.exceptions.RayActorError, ray.exceptions.WorkerCrashedError) as exc:
                    self._failed(item, slot, f"worker {slot.info.get('worker')} died: {type(exc).__name__}", queue,
                                 record_failed, say)  # fmt: skip
                    self._replace(slot, say)
                    continue
                except ray.exceptions.RayTaskError as exc:
                    cause = exc.cause if getattr(exc, "cause", None) is not None else exc
                    self._failed(item, slot, f"{type(cause).__name__}: {cause}", queue, record_failed, say)
                    continue
                key = (item.task.env_id, item.spec.label)
                if got["prime_s"] is not None and key not in primed:
                    primed.add(key)
                    record_prime(item.task, item.spec, got["prime_s"])
                got["run"]["schedule"]["attempts"] = item.attempts  # the workers that died under it first
                record(item.task, item.spec, item.seed, got["run"], got["device"])
                r = got["run"]
                say(f"{item.label}: {r['stop_reason']} after {r['env_steps']:,} steps in {r['wall_s']:.1f} s on "
                    f"{r['schedule']['worker']} cores {r['schedule']['cores']}")  # fmt: skip

    @staticmethod
    def _failed(item: Item, slot: Slot, reason: str, queue: deque[Item], record_failed: Callable[..., None],
                say: Callable[[str], None]) -> None:  # fmt: skip
        item.attempts.append({"worker": slot.info.get("worker"), "cores": slot.info.get("cores"), "reason": reason})
        if len(item.attempts) < 2:
            say(f"{item.label}: {reason}; retrying it once on another worker")
            queue.appendleft(item)
        else:
            say(f"{item.label}: {reason}; failed twice, recorded as failed")
            record_failed(item.task, item.spec, item.seed, reason, item.attempts)

    def _replace(self, slot: Slot, say: Callable[[str], None]) -> None:
        """A fresh worker process on the dead one's cores (they are free now), unless the slot keeps dying."""
        slot.deaths += 1
        slot.actor = None
        if slot.deaths > MAX_WORKER_DEATHS:
            say(f"ray: slot {slot.node_ip} block {slot.block}: {slot.deaths} workers died there; not used again")
            return
        try:
            self._start(slot)
        except Exception as exc:  # noqa: BLE001 - a node that went away: the other slots carry on
            say(f"ray: could not restart a worker on {slot.node_ip} block {slot.block}: {exc}")
            slot.actor = None
