/* Minibatch gather along the first axis: out[b, j] = x[indices[b], j] for rows of row_len elements,
 * each index checked against M, the rows of x, as it is read (OpenCL's gather is the checked one; the CUDA
 * twins, pk_gather[_i32], copy unchecked behind a range check of CuPy's). A row whose index is outside
 * [0, M) is not copied (nothing outside x is read) and writes this launch's stamp (never 0, a new one per
 * launch) into *bad, which the host reads after the launch: one launch and a four-byte read, no reset,
 * instead of a range reduction over the indices before the gather (validate.cl). Every writer writes the
 * same stamp, so the race between them is harmless. */

/* The backend builds this file with REAL set to the unsigned integer type of the element's width,
 * so every dtype (float, int, bool) is copied bit for bit and float64 needs no cl_khr_fp64. */
#ifndef REAL
#define REAL uint
#endif

#include "pk_vload.h"

#define PK_IN_RANGE(i, M) ((i) >= 0 && (long)(i) < (M))

/* The element shape (the GPU's: one element per work-item), once per index type. */
#define PK_GATHER(name, IDX)                                                                    \
    __kernel void name(__global const REAL *x, __global const IDX *indices, __global REAL *out, \
                       int row_len, int B, long M, uint stamp, __global uint *bad)              \
    {                                                                                           \
        const size_t k = get_global_id(0);                                                      \
        if (k >= (size_t)B * (size_t)row_len)                                                   \
            return;                                                                             \
        const size_t b = k / (size_t)row_len;                                                   \
        const size_t j = k - b * (size_t)row_len;                                               \
        const IDX i = indices[b];                                                               \
        if (!PK_IN_RANGE(i, M)) {                                                               \
            *bad = stamp;                                                                       \
            return;                                                                             \
        }                                                                                       \
        out[k] = x[(size_t)i * (size_t)row_len + j];                                            \
    }

PK_GATHER(pk_gather_checked, long)
PK_GATHER(pk_gather_checked_i32, int)

/* The row shape (backend.gather_rows_per_item > 0): each work-item copies PK_ROWS whole rows,
 * PK_GVW elements per vector load. A CPU driver runs a group's work-items one after another, so
 * the per-element shape above costs a division and an index load per element there; the GPU
 * wants it (consecutive work-items write consecutive elements). A tuning knob, never a device test. */
#ifndef PK_ROWS
#define PK_ROWS 16
#endif
#ifndef PK_GVW
#define PK_GVW 1
#endif
#if PK_GVW == 1
#define PK_GCOPY(dst, src) (*(dst) = *(src))
#else
#define PK_GCOPY(dst, src)                                                                      \
    do {                                                                                        \
        const PK_VCAT(REAL, PK_GVW) v_ = PK_VLD(REAL, PK_GVW, src);                             \
        PK_VST(PK_GVW, v_, dst);                                                                \
    } while (0)
#endif

/* PK_ROW_LEN (set by the backend for short rows): row_len as a constant, so the copy of a row is
 * straight-line code and the core overlaps the cache misses of consecutive rows (the indices are
 * random); a loop with a run-time trip count per row serialises them. */
#ifdef PK_ROW_LEN
#define PK_LEN(row_len) ((size_t)PK_ROW_LEN)
#else
#define PK_LEN(row_len) ((size_t)(row_len))
#endif

/* PK_GPF (backend.gather_prefetch > 0): prefetch the row PK_GPF rows ahead with OpenCL's prefetch(),
 * so its cache miss overlaps the copies in between (the indices are random: a hardware prefetcher
 * cannot guess them); the index ahead is clamped into x, so a bad one is never prefetched outside it.
 * A driver may compile prefetch() to nothing; whether it pays is measured per driver by tuning (on
 * the dev VM's Xeon: Intel's CPU runtime 1.9x faster at 8.4M random rows of 16 bytes, PoCL unchanged). */
#ifndef PK_GPF
#define PK_GPF 0
#endif
#if PK_GPF > 0
#define PK_PREFETCH_ROW(b, b1, len, M)                                                          \
    do {                                                                                        \
        if ((b) + PK_GPF < (b1))                                                                \
            prefetch(x + (size_t)clamp((long)indices[(b) + PK_GPF], 0L, (M) - 1) * (len), (len)); \
    } while (0)
#else
#define PK_PREFETCH_ROW(b, b1, len, M) ((void)0)
#endif

/* PK_GROWVEC (backend.gather_row_vector = 1, for rows of 8, 16, 32 or 64 bytes): the backend builds REAL as
 * the unsigned vector of the whole row (uint4 for 4 float32) and passes row_len 1, so a row is one aligned
 * element, and the kernel says so with vec_type_hint: a compiler that vectorises across work-items (Intel's
 * CPU runtime: 16 rows per vector gather, a gather and a scatter per element) leaves each work-item's loop
 * over its rows as written, one 16-byte load and store per row, as a CPU's own gather loop does. On the dev
 * VM's Xeon, Intel's runtime at 524,288 rows of 16 bytes: 3.4 ms with 16-64 rows per work-item against
 * 5.3 ms for the element copy; PoCL the same either way. A tuning knob, never a device test. */
#ifndef PK_GROWVEC
#define PK_GROWVEC 0
#endif
#if PK_GROWVEC
#define PK_GATTR __attribute__((vec_type_hint(REAL)))
#else
#define PK_GATTR
#endif

#define PK_GATHER_ROWS(name, IDX)                                                               \
    __kernel PK_GATTR void name(__global const REAL *x, __global const IDX *indices, __global REAL *out, \
                       int row_len, int B, long M, uint stamp, __global uint *bad)              \
    {                                                                                           \
        const size_t b0 = get_global_id(0) * (size_t)PK_ROWS;                                   \
        const size_t b1 = min(b0 + (size_t)PK_ROWS, (size_t)B);                                 \
        const size_t len = PK_LEN(row_len), vec_end = len - len % PK_GVW;                       \
        for (size_t b = b0; b < b1; ++b) {                                                      \
            PK_PREFETCH_ROW(b, b1, len, M);                                                     \
            const IDX i = indices[b];                                                           \
            if (!PK_IN_RANGE(i, M)) {                                                           \
                *bad = stamp;                                                                   \
                continue;                                                                       \
            }                                                                                   \
            __global const REAL *src = x + (size_t)i * len;                                     \
            __global REAL *dst = out + b * len;                                                 \
            size_t j = 0;                                                                       \
            for (; j < vec_end; j += PK_GVW)                                                    \
                PK_GCOPY(dst + j, src + j);                                                     \
            for (; j < len; ++j)                                                                \
                dst[j] = src[j];                                                                \
        }                                                                                       \
    }

PK_GATHER_ROWS(pk_gather_rows_checked, long)
PK_GATHER_ROWS(pk_gather_rows_checked_i32, int)
