"""The OpenCL backend's rollout-buffer ops (gae, discounted_returns, normalize, gather) and the
device reductions behind argument validation; launch mechanism only, the arguments are checked by the caller."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .. import _abi, tuning
from ._opencl_build import _data

#: Unsigned OpenCL type of each element width: gather copies elements bit for bit.
_BITS_TYPE = {1: "uchar", 2: "ushort", 4: "uint", 8: "ulong"}
#: gather_row_vector: the unsigned OpenCL vector a row of this many bytes is copied as, one element per row.
_ROW_VECTORS = {8: "uint2", 16: "uint4", 32: "uint8", 64: "uint16"}


class OpenCLBufferOps:
    """The buffer ops of :class:`~portkern.backends.opencl.OpenCLBackend` (a mixin). Their arguments
    are validated by portkern.buffer before they are called: these launch only."""

    # ---- rollout buffer ops ------------------------------------------------------------------
    #: Rows of at most this many elements are gathered by a program built for their length.
    _GATHER_CONST_ROW = 64

    #: Bytes of private carry one work-group of a buffer scan may hold (PK_NV vectors of PK_VW values per
    #: work-item, live across the whole loop over t). PoCL's CPU driver runs a work-group on one thread's
    #: stack: 256 work-items x 32 KiB of carry (8 MiB) crashed it with a segmentation fault, 4 MiB ran, and
    #: nothing it advertises says so (CL_KERNEL_PRIVATE_MEM_SIZE 1 KiB, work-group size 4096). A larger
    #: work-group is never launched (_launch_scan); the bound is half the largest size seen to run.
    _MAX_GROUP_CARRY = 2 << 20

    def _launch_scan(self, op: str, kernel: Any, items: int, envs: int, dtype: Any, *args: Any) -> None:
        """Launch a buffer scan with a work-group whose private carry fits (_MAX_GROUP_CARRY): a tuned default
        that does not (measured in float32, run in float64) is halved until it does; a local_size set by hand
        that does not is refused with the largest that fits, before anything runs."""
        gs, ls = self._ranges(items, kernel)
        carry = envs * np.dtype(dtype).itemsize
        if ls is not None and ls[0] * carry > self._MAX_GROUP_CARRY:
            most = max(1, self._MAX_GROUP_CARRY // carry)
            setting = self.knob_setting("local_size")
            if not (isinstance(setting, str) and setting == tuning.TUNED):
                raise ValueError(
                    f"local_size: {ls[0]} work-items of {op} with {envs} envs each ({carry // 1024} KiB of private "
                    f"carry per work-item) exceed {self._MAX_GROUP_CARRY >> 20} MiB per work-group; use a "
                    f"local_size of at most {most}, or fewer scan_vectors_per_item"
                )
            size = 1 << int(math.log2(most))
            gs, ls = (-(-items // size) * size,), (size,)
        if items > 0:
            self._enqueue(kernel, gs, ls, args)

    def _scan_options(self, op: str, dtype: Any) -> tuple[tuple[str, ...], int]:
        """Build options of gae / discounted_returns and the envs each work-item owns."""
        vw = self._buffer_knob(op, "scan_vector_width")
        nv = self._buffer_knob(op, "scan_vectors_per_item")
        if vw * nv > 8192:  # the recursion's carry lives in private memory, PK_NV vectors of it
            raise ValueError(
                f"scan_vectors_per_item: at most {8192 // vw} with scan_vector_width {vw} "
                f"(8192 envs per work-item), got {nv}"
            )
        vw = self._width("scan_vector_width", vw, dtype)  # a layout checked as asked, then built as it can be
        return (*self._real_options(dtype), f"-DPK_VW={vw}", f"-DPK_NV={nv}"), vw * nv

    def gae(self, rewards, values, next_values, terminated, truncated, advantages, returns, gamma, lam):
        dt = rewards.dtype
        T = dt.type
        steps, n = rewards.shape
        self._sized(n)  # the knobs of this launch's size class: N columns in parallel, the T rows in sequence
        opts, envs = self._scan_options("gae", dt)
        k = self._kernel("gae.cl", "pk_gae", opts)
        # gamma * lam is rounded in the env dtype on the host exactly as the reference does.
        values = {"rewards": rewards, "values": values, "next_values": next_values, "terminated": terminated,
                  "truncated": truncated, "advantages": advantages, "returns": returns, "gamma": gamma,
                  "gamma_lam": T(gamma) * T(lam), "T": steps, "N": n}  # fmt: skip
        self._launch_scan("gae", k, -(-n // envs), envs, dt, *_abi.pack("pk_gae", values, _data, dt))

    def discounted_returns(self, rewards, terminated, truncated, bootstrap, out, gamma):
        dt = rewards.dtype
        steps, n = rewards.shape
        per_step = bootstrap.ndim == 2
        self._sized(n)  # N columns, as gae
        opts, envs = self._scan_options("discounted_returns", dt)
        k = self._kernel("discounted_returns.cl", "pk_discounted_returns", opts)
        values = {"rewards": rewards, "terminated": terminated, "truncated": truncated, "bootstrap": bootstrap,
                  "out": out, "gamma": gamma, "per_step_bootstrap": int(per_step), "T": steps, "N": n}  # fmt: skip
        self._launch_scan("discounted_returns", k, -(-n // envs), envs, dt,
                          *_abi.pack("pk_discounted_returns", values, _data, dt))  # fmt: skip

    def normalize(self, x, out, eps):
        dt = x.dtype
        n = x.size
        if n == 0:
            return
        self._sized(n)
        wg = self.reduce_wg
        if not isinstance(wg, int) or wg < 1 or wg & (wg - 1):
            raise ValueError(f"reduce_wg: expected a power of two, got {wg!r}")
        chunk = self._buffer_knob("normalize", "reduce_chunk")
        vw = self._buffer_knob("normalize", "reduce_vector_width")  # checked even where unused
        vw = self._width("reduce_vector_width", vw, dt) if chunk else 1
        per_item = max(1, chunk // vw)  # vectors per work-item of the apply pass
        opts = (*self._real_options(dt), f"-DPK_WG={wg}", f"-DPK_VW={vw}", f"-DPK_CHUNK={max(chunk, 1)}",
                f"-DPK_NV={per_item}")  # fmt: skip
        # The GPU shape: a fixed number of groups, each a tree over its grid-strided slices; the
        # chunk shape: one partial per chunk of `chunk` elements.
        groups = -(-n // chunk) if chunk else max(1, min(-(-n // wg), self.reduce_groups))
        # partials and stats: allocated once per (dtype, group count), reused by every call
        pcount = self._scratch(("normalize", "count"), (groups,), np.uint32)
        pmean = self._scratch(("normalize", "mean"), (groups,), dt)
        pm2 = self._scratch(("normalize", "m2"), (groups,), dt)
        values = {"x": x, "out": out, "pcount": pcount, "pmean": pmean, "pm2": pm2, "eps": eps, "n": n,
                  "groups": groups}  # fmt: skip
        items = -(-n // (vw * per_item))  # work-items of the apply pass
        if chunk:
            chunks = self._kernel("normalize.cl", "pk_normalize_chunks", opts)
            self._launch(chunks, groups, *_abi.pack("pk_normalize_chunks", values, _data, dt))
        else:
            partial = self._kernel("normalize.cl", "pk_normalize_partial", opts)
            self._enqueue(partial, (groups * wg,), (wg,), _abi.pack("pk_normalize_partial", values, _data, dt))
        if chunk and 8 * groups * groups <= n:
            # No finalize launch: every work-item of the apply pass combines the chunks' partials itself. On PoCL
            # a launch costs 0.1-0.2 ms, a fifth of the whole op at 128 x 4,096 (1.24 -> 1.02 ms measured; Intel's
            # runtime 1.01 -> 0.84 ms). The layout runs one apply work-item per chunk, so the partials read (2
            # groups^2) stay under a quarter of the elements; a finer chunk (a quadratic number of reads) keeps
            # the finalize group.
            apply = self._kernel("normalize.cl", "pk_normalize_apply_partials", opts)
            self._launch(apply, items, *_abi.pack("pk_normalize_apply_partials", values, _data, dt))
            return
        values["stats"] = self._scratch(("normalize", "stats"), (2,), dt)
        finalize = self._kernel("normalize.cl", "pk_normalize_finalize", opts)
        self._enqueue(finalize, (wg,), (wg,), _abi.pack("pk_normalize_finalize", values, _data, dt))
        apply = self._kernel("normalize.cl", "pk_normalize_apply", opts)
        self._launch(apply, items, *_abi.pack("pk_normalize_apply", values, _data, dt))

    def gather_checks_indices(self) -> bool:
        # gather.cl's checked kernels test each index as they read it and flag a bad one (nothing outside x is
        # read): the range reduction before the launch (validate.cl, a second pass and a host read) is saved.
        return True

    def gather(self, x, indices, out):
        b = indices.shape[0]
        self._sized(b)  # gathered rows
        kernel = "pk_gather_checked_i32" if indices.dtype == np.int32 else "pk_gather_checked"
        row_len = math.prod(x.shape[1:])
        bad = self._scratch(("gather", "bad"), (1,), np.uint32)  # zeroed once: a stamp is never 0
        # A new stamp per launch, so the flag needs no reset (one command and, on PoCL, a round trip less); it
        # comes round again after 2**32 - 1 launches, when only a flag left by that very launch could match.
        stamp = self._gather_stamp = getattr(self, "_gather_stamp", 0) % 0xFFFFFFFF + 1
        values = {"x": x, "indices": indices, "out": out, "row_len": row_len, "B": b, "M": x.shape[0],
                  "stamp": stamp, "bad": bad}  # fmt: skip
        self._gather_launch(kernel, x, values, b, row_len)
        if bad.get(queue=self.queue)[0] == stamp:
            raise IndexError(f"indices: a value outside [0, {x.shape[0] - 1}] (rows of x)")

    def _gather_launch(self, kernel: str, x: Any, values: dict, b: int, row_len: int) -> None:
        rows = self._buffer_knob("gather", "gather_rows_per_item")
        vw = self._buffer_knob("gather", "gather_vector_width")  # checked even where unused
        rowvec = self._buffer_knob("gather", "gather_row_vector")  # likewise
        opts: tuple[str, ...] = (f"-DREAL={_BITS_TYPE[x.dtype.itemsize]}",)
        if rows == 0 or row_len == 0:  # the GPU shape: one element per work-item
            k = self._kernel("gather.cl", kernel, opts)
            self._launch(k, b * row_len, *_abi.pack(kernel, values, _data))
            return
        vw = self._width("gather_vector_width", vw, x.dtype)
        pf = self._buffer_knob("gather", "gather_prefetch")
        row_bytes = row_len * x.dtype.itemsize
        cap = self.max_vector_bytes
        if rowvec and row_bytes in _ROW_VECTORS and (cap is None or row_bytes <= cap):
            # The whole row as one element (gather.cl, PK_GROWVEC): bits copied as they are, as ever.
            opts, row_len, vw = (f"-DREAL={_ROW_VECTORS[row_bytes]}",), 1, 1
            values = {**values, "row_len": 1}
        else:
            rowvec = 0
        opts = (*opts, f"-DPK_ROWS={rows}", f"-DPK_GVW={vw}", f"-DPK_GPF={pf}", f"-DPK_GROWVEC={rowvec}")
        if row_len <= self._GATHER_CONST_ROW:  # short rows: the row length compiled in (gather.cl)
            opts = (*opts, f"-DPK_ROW_LEN={row_len}")
        name = kernel.replace("pk_gather_checked", "pk_gather_rows_checked")
        k = self._kernel("gather.cl", name, opts)
        self._launch(k, -(-b // rows), *_abi.pack(name, values, _data))

    def _validate_reduce(self, kernel: str, a: Any, outputs: tuple[Any, ...]) -> list[np.ndarray]:
        """Run one validate.cl reduction over ``a``; returns the per-group partials on the host.

        pyopencl's own reductions need Mako, which pyopencl does not install; these need nothing.
        """
        wg = self.reduce_wg
        groups = max(1, min(-(-a.size // wg), 64))  # few partials: the host folds them
        bufs = [self._scratch(("validate", kernel, i), (groups,), dt) for i, dt in enumerate(outputs)]
        k = self._kernel("validate.cl", kernel, (f"-DPK_WG={wg}",))
        names = [arg.name for arg in _abi.declaration(kernel)]  # the array, its outputs, then n
        values = {**dict(zip(names, [a, *bufs])), "n": a.size}
        self._enqueue(k, (groups * wg,), (wg,), _abi.pack(kernel, values, _data))
        # Every partial read enqueued before one wait: a blocking read each would pay the driver's
        # round trip per output (two for index_range: on PoCL most of a small gather's time).
        pending = [b.get_async(queue=self.queue) for b in bufs]
        for _, event in pending:
            event.wait()
        return [host for host, _ in pending]

    def index_range(self, indices):
        self._check_array(indices, "indices")
        kernels = {np.dtype(np.int64): "pk_index_range", np.dtype(np.int32): "pk_index_range_i32"}
        kernel = kernels.get(indices.dtype)
        if kernel is None:
            raise TypeError(f"indices: expected an int64 or int32 array, got {indices.dtype}")
        if indices.size == 0:
            raise ValueError("indices: empty array has no range")
        lo, hi = self._validate_reduce(kernel, indices, (np.int64, np.int64))
        return int(lo.min()), int(hi.max())

    def all_finite(self, a):
        self._check_array(a, "a")
        kernel = {np.dtype(np.float32): "pk_count_nonfinite_f32",
                  np.dtype(np.float64): "pk_count_nonfinite_f64"}.get(a.dtype)  # fmt: skip
        if kernel is None:
            raise TypeError(f"a: expected a float32 or float64 array, got {a.dtype}")
        if a.size == 0:
            return True
        (count,) = self._validate_reduce(kernel, a, (np.uint32,))
        return int(count.sum()) == 0
