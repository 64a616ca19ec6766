"""Repeated blocks of env physics: a reference function one step calls many times on arrays of the same
shapes, which a tracing compiler can compile once and call again (docs/ARCHITECTURE.md, "Repeated blocks")."""

from __future__ import annotations

import functools
from typing import Any, Callable


class Block:
    """A function marked by :func:`repeated_block`, and the compiled region a backend made of it."""

    __slots__ = ("fn", "region")

    def __init__(self, fn: Callable) -> None:
        self.fn, self.region = fn, None


#: Every repeated block, and what runs a call of one: None (the function itself), or the runner and the
#: region maker a tracing backend installed (:func:`install_block_runner`).
_BLOCKS: list[Block] = []
_BLOCK_RUNNER: Callable[[Block, tuple], Any] | None = None
_REGION_MAKER: Callable[[Callable], Any] | None = None


def repeated_block(fn: Callable) -> Callable:
    """Marks ``fn(*arrays, p)`` as a block one env step calls many times with arrays of the same shapes:
    ``arrays`` are tuples of same-shaped arrays, ``p`` a :class:`~portkern.envs.base.ParamView` or
    :class:`~portkern.envs.base.KernelParams`, and it
    returns a tuple of arrays of that shape, computed from its arguments only.

    Chain-v0's articulated-body pass runs 20 times a step (5 RK4 steps of 4 stages). A compiler that traces
    the whole step into one graph inlines every call, and its time grows with the graph: torch.compile
    took 250 s for Chain-v0's step without a cache. A backend that can compile a region once and call it
    (``torch_compile``, through ``torch.compiler.nested_compile_region``) installs a runner for these
    blocks; every other backend, and every call outside a compiler's trace, calls ``fn`` itself, so the
    block is the reference's code either way.
    """
    block = Block(fn)
    _BLOCKS.append(block)
    if _REGION_MAKER is not None:
        block.region = _REGION_MAKER(fn)

    @functools.wraps(fn)
    def call(*args: Any) -> Any:
        runner = _BLOCK_RUNNER
        return fn(*args) if runner is None else runner(block, args)

    return call


def install_block_runner(runner: Callable[[Block, tuple], Any], make_region: Callable[[Callable], Any]) -> None:
    """Run every :func:`repeated_block` through ``runner(block, args)``, with ``block.region`` made by
    ``make_region(fn)`` now for the blocks marked so far and when marked for later ones. Regions are made
    here, outside any trace: a tracing compiler cannot make one mid-trace without breaking its graph."""
    global _BLOCK_RUNNER, _REGION_MAKER
    _REGION_MAKER = make_region
    for block in _BLOCKS:
        if block.region is None:
            block.region = make_region(block.fn)
    _BLOCK_RUNNER = runner
