"""``portkern bench --ray [ADDRESS]``: the portability bench on every node of a Ray cluster, one report.

The unit of work is **one whole bench per node**, not a case or a group per worker. Every backend and
driver on one node's CPU times the same hardware (NumPy, torch, PoCL and Intel's OpenCL runtime all run on
those cores), and the bench's honesty rests on timing the members of a comparison together, interleaved
round by round, with nothing else running there: two groups timed at once on one CPU would each measure
its neighbour. So the serial, interleaved bench of bench/conftest.py is kept as it is, and Ray only puts
one of it on each node, holding all of the node's CPUs and GPUs (``num_cpus``/``num_gpus`` = the node's
count, pinned to the node), which also keeps any other Ray work off the hardware while it is timed. What
Ray adds is the fleet: a cluster whose nodes carry different vendors' devices gives the multi-device
report in one command, through the same multi-run merge as ``portkern report``.

Plain Ray tasks, not Ray Tune: there is nothing to search, and each task must run on a named node. Each
task is a fresh worker process (``max_calls=1``: the suite is a pytest session, run once per process).
No shared file system is assumed: a worker streams each journal record (a finished visit) through a Ray
queue to the driver, which appends it to that node's journal in the output folder
(``results-<machine>.json.journal``), and returns the results document, which the driver writes as
``results-<machine>.json``. A worker that dies is started again once, on the same node, resuming from
the node's journal (the visits it finished are kept); a second death, or a suite that fails, records
the node as failed with the reason in ``ray.json``. ``--resume`` resumes every node's journal.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from ..journal import journal_path, write_json_atomically
from .bench_journal import BenchJournal, identity

#: Attempts per node: a worker that dies is started once more (resuming from the node's journal).
ATTEMPTS = 2


@dataclass
class Node:
    node_id: str
    ip: str
    cpus: int
    gpus: int
    options: list[str]
    label: str = ""
    json_path: Path | None = None
    journal: BenchJournal | None = None
    queue: Any = None
    attempts: list[dict[str, Any]] = field(default_factory=list)
    status: str = "pending"  # pending, done, kept (finished by an earlier invocation), failed
    reason: str = ""


def _probe(options: Sequence[str]) -> dict[str, Any]:
    """On a node: its machine label and the journal identity of its bench (code, machine, options)."""
    from . import suite

    given = [o.partition("=")[2] for o in options if o.startswith("--pk-machine=")]
    label = suite.machine_label(given[0] if given else None)
    return {"label": label, "identity": identity(options, label), "pid": os.getpid()}


def _node_bench(options: Sequence[str], records: list[dict[str, Any]], queue: Any) -> dict[str, Any]:
    """On a node: the serial bench, each journal record sent to the driver as it is made."""
    from .bench_run import run_pytest

    journal = BenchJournal(records, lambda key, data, status: queue.put((key, data, status)))
    with tempfile.TemporaryDirectory(prefix="portkern-ray-") as tmp:
        path = Path(tmp) / "results.json"
        code, failed, captured = run_pytest(path, list(options), journal, progress=False)
        doc = json.loads(path.read_text()) if path.exists() else None
    return {"code": code, "failed": failed, "doc": doc, "tail": captured[-3000:], "error": journal.error,
            "worker": f"{os.uname().nodename}:{os.getpid()}"}  # fmt: skip


def _say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _nodes(ray: Any, options: Sequence[str]) -> list[Node]:
    here = ray.get_runtime_context().get_node_id()
    nodes = []
    for n in ray.nodes():
        res = n.get("Resources", {})
        if not n.get("Alive") or int(res.get("CPU", 0)) < 1:
            continue
        # --machine names the driver's own node; every other node is named by its own host (or PORTKERN_MACHINE).
        opts = [o for o in options if n["NodeID"] == here or not o.startswith("--pk-machine=")]
        nodes.append(Node(n["NodeID"], n.get("NodeManagerAddress", "?"), int(res["CPU"]), int(res.get("GPU", 0)), opts))
    return nodes


def _on(node_id: str, **options: Any) -> dict[str, Any]:
    """Ray options that put a task or actor on that node and nowhere else."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    return dict(scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False), **options)


def _open_journals(ray: Any, nodes: list[Node], out: Path, resume: bool, command: str) -> None:
    """Name each node's results file and open its journal (checked against the node's identity on resume)."""
    probe = ray.remote(_probe)
    got = ray.get([probe.options(**_on(n.node_id, num_cpus=0, max_retries=0)).remote(n.options) for n in nodes])
    from . import suite

    mine = suite.code_fingerprint()
    for node, info in zip(nodes, got):  # one report, one code: a node running other code would mix two
        if info["identity"]["code"] != mine:
            differ = sorted(k for k in set(mine) | set(info["identity"]["code"])
                            if mine.get(k) != info["identity"]["code"].get(k))  # fmt: skip
            raise ValueError(f"--ray: node {node.ip} runs other portkern code than the driver ({', '.join(differ)} "
                             "differ); install the same revision on every node")  # fmt: skip
    seen: dict[str, int] = {}
    for node, info in zip(nodes, got):
        label = info["label"]
        seen[label] = seen.get(label, 0) + 1
        node.label = label if seen[label] == 1 else f"{label}-{node.ip}"  # two nodes of one name stay apart
        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in node.label)
        node.json_path = out / f"results-{safe}.json"
        jpath = journal_path(node.json_path)
        if resume and not jpath.exists():
            if node.json_path.exists():  # finished by the interrupted invocation: its file is kept as it is
                node.status = "kept"
                continue
            resume_node = False  # a node the interrupted run never reached: it starts here
        else:
            resume_node = resume
        node.journal = BenchJournal.open(jpath, "bench", info["identity"], resume_node,
                                         extra={"created": _now(), "command": command, "node": node.ip})  # fmt: skip


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def bench_on_ray(args: argparse.Namespace, out: Path, options: list[str], command: str) -> tuple[list[Path], list[str]]:
    """Run the bench once on every node of the cluster (see the module docstring): (run files, failures)."""
    try:
        import ray
    except ImportError:
        raise ValueError("--ray: needs Ray: pip install 'portkern[ray]'") from None
    started_here = not ray.is_initialized()
    if started_here:
        address = None if args.ray == "local" else args.ray
        ray.init(address=address, include_dashboard=False if address is None else None, log_to_driver=False,
                 configure_logging=False)  # fmt: skip
    nodes: list[Node] = []
    try:
        nodes = _nodes(ray, options)
        if not nodes:
            raise ValueError("--ray: the cluster has no live node with a CPU")
        _open_journals(ray, nodes, out, args.resume, command)
        _say(f"ray: one bench per node, {len(nodes)} node(s): " + "; ".join(
            f"{n.label} ({n.ip}, {n.cpus} CPU, {n.gpus} GPU)" for n in nodes))  # fmt: skip
        failures = _run(ray, nodes)
    except KeyboardInterrupt:
        from .bench_run import Interrupted, resume_hint

        kept = [str(n.journal.journal.path) for n in nodes if n.journal and n.journal.journal and n.journal.finished()]
        for n in nodes:
            if n.journal is not None:
                n.journal.close() if n.journal.finished() else n.journal.finish()
        raise Interrupted("interrupted: no results written for the nodes still running; " +
                          (f"their finished visits are kept in {', '.join(kept)}; finish with "
                           f"{resume_hint(command)}" if kept else "no visit had finished")) from None  # fmt: skip
    except BaseException:
        for n in nodes:  # a journal that holds nothing would only make the next plain run ask for --resume
            if n.journal is not None:
                n.journal.close() if n.journal.finished() else n.journal.finish()
        raise
    finally:
        if started_here:
            ray.shutdown()
    write_json_atomically(out / "ray.json", {
        "created": _now(), "command": command, "unit": "one bench per node, holding all its CPUs and GPUs",
        "nodes": [{"label": n.label, "node_id": n.node_id, "ip": n.ip, "cpus": n.cpus, "gpus": n.gpus,
                   "status": n.status, "reason": n.reason, "attempts": n.attempts,
                   "results": n.json_path.name if n.status in ("done", "kept") and n.json_path else None}
                  for n in nodes]})  # fmt: skip
    return [n.json_path for n in nodes if n.status in ("done", "kept") and n.json_path], failures


def _drain(node: Node) -> None:
    """Append to the node's journal every record its worker has sent so far."""
    if node.queue is None or node.journal is None:
        return
    while not node.queue.empty():
        key, data, status = node.queue.get_nowait()
        node.journal.store(key, data, status)


def _run(ray: Any, nodes: list[Node]) -> list[str]:
    from ray.util.queue import Queue

    # max_calls=1: a fresh process per bench (one pytest session per process).
    task = ray.remote(max_calls=1)(_node_bench)
    here = ray.get_runtime_context().get_node_id()
    failures: list[str] = []
    pending: dict[Any, Node] = {}

    def start(node: Node) -> None:
        # On the driver's node: the records a dying node sent must outlive it.
        node.queue = Queue(actor_options={"num_cpus": 0, **_on(here)})
        # The whole node is held: nothing else of Ray's runs on the hardware being timed.
        ref = task.options(**_on(node.node_id, num_cpus=node.cpus, num_gpus=node.gpus, max_retries=0)).remote(
            node.options, node.journal.records(), node.queue)  # fmt: skip
        pending[ref] = node
        node.status = "running"

    for node in nodes:
        if node.status == "pending":
            start(node)
    while pending:
        ready, _ = ray.wait(list(pending), num_returns=1, timeout=0.5)
        for node in pending.values():
            _drain(node)
        for ref in ready:
            node = pending.pop(ref)
            _drain(node)  # the records a worker sent before it ended (or died) are kept first
            node.queue.shutdown()
            node.queue = None
            t_end = time.time()
            try:
                got = ray.get(ref)
            except (ray.exceptions.WorkerCrashedError, ray.exceptions.NodeDiedError, ray.exceptions.RayActorError,
                    ray.exceptions.LocalRayletDiedError) as exc:  # fmt: skip
                node.attempts.append({"reason": f"the worker died: {type(exc).__name__}",
                                      "at": _dt.datetime.fromtimestamp(t_end, _dt.timezone.utc).isoformat(),
                                      "records_kept": node.journal.finished()})  # fmt: skip
                if len(node.attempts) < ATTEMPTS:
                    _say(f"ray: {node.label}: the worker died; starting it again, resuming from "
                         f"{node.journal.finished()} journaled visit(s)")  # fmt: skip
                    start(node)
                else:
                    _failed(node, f"the worker died {len(node.attempts)} times", failures)
                continue
            except ray.exceptions.RayTaskError as exc:
                cause = exc.cause if getattr(exc, "cause", None) is not None else exc
                _failed(node, f"{type(cause).__name__}: {cause}".splitlines()[0], failures)
                continue
            if got["error"] or got["code"] not in (0, 1) or got["doc"] is None:
                _say(got["tail"])
                _failed(node, got["error"] or f"the bench did not complete (pytest exit code {got['code']})", failures)
                continue
            write_json_atomically(node.json_path, got["doc"])
            node.journal.finish()
            node.status = "done"
            failures += [f"{node.label}: {f}" for f in got["failed"]]
            _say(f"ray: {node.label}: bench done on {got['worker']} -> {node.json_path}")
    return failures


def _failed(node: Node, reason: str, failures: list[str]) -> None:
    node.status, node.reason = "failed", reason
    if node.journal is not None:
        node.journal.close()  # kept: --resume starts from the visits it holds
    failures.append(f"{node.label}: the node's bench failed: {reason}")
    _say(f"ray: {node.label}: failed: {reason}")


__all__ = ["bench_on_ray"]
