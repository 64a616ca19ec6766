/* (x - mean) / (std + eps) over all elements, reduced on the device: partial, finalize, apply.
 *
 * Two layouts of the partial pass, chosen by a tuning knob (backend.reduce_chunk), never a device
 * test: the GPU shape (pk_normalize_partial: grid-strided Welford per work-item, combined by a
 * work-group tree) and the chunk shape (pk_normalize_chunks: one contiguous chunk of PK_CHUNK
 * elements per work-item, summed in PK_VW-wide vectors, a second pass over the chunk while it is
 * in cache). A CPU driver runs the work-items of a group one after another, so the GPU shape's
 * per-element division chain is serial there and its grid stride reads one element per cache line
 * per work-item. Both feed pk_normalize_finalize; the apply pass takes PK_VW * PK_NV elements
 * per work-item (1 in the GPU shape).
 */
#include "pk_common.h"
#include "pk_vload.h"

#ifndef PK_WG
#define PK_WG 256 /* work-group size of the partial and finalize kernels, a power of two */
#endif

/* Chan, Golub & LeVeque's pairwise update: fold (nb, mb, qb) into (na, ma, qa). Counts stay
 * integers so they are exact at any size; Welford/Chan keep the float accumulation stable. */
static inline void pk_chan(uint *na, REAL *ma, REAL *qa, uint nb, REAL mb, REAL qb)
{
    if (nb == 0u)
        return;
    const uint n = *na + nb;
    const REAL delta = mb - *ma;
    const REAL fa = (REAL)(*na), fb = (REAL)nb, fn = (REAL)n;
    *ma = *ma + delta * (fb / fn);
    *qa = *qa + qb + delta * delta * (fa * fb / fn);
    *na = n;
}

/* Tree-combine the work-group's (count, mean, M2) into slot 0. */
static inline void pk_group_reduce(__local uint *lc, __local REAL *lm, __local REAL *lq, uint lid)
{
    for (uint stride = PK_WG / 2; stride > 0u; stride >>= 1) {
        barrier(CLK_LOCAL_MEM_FENCE);
        if (lid < stride) {
            uint c = lc[lid];
            REAL m = lm[lid], q = lq[lid];
            pk_chan(&c, &m, &q, lc[lid + stride], lm[lid + stride], lq[lid + stride]);
            lc[lid] = c;
            lm[lid] = m;
            lq[lid] = q;
        }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
}

/* One (count, mean, M2) per work-group: each work-item runs Welford over a grid-strided slice. */
__kernel __attribute__((reqd_work_group_size(PK_WG, 1, 1)))
void pk_normalize_partial(__global const REAL *x, __global uint *pcount, __global REAL *pmean,
                          __global REAL *pm2, int n)
{
    __local uint lc[PK_WG];
    __local REAL lm[PK_WG], lq[PK_WG];
    const uint lid = get_local_id(0);
    uint c = 0u;
    REAL m = (REAL)(0.0), q = (REAL)(0.0);
    for (size_t k = get_global_id(0); k < (size_t)n; k += get_global_size(0)) {
        const REAL v = x[k];
        c += 1u;
        const REAL d = v - m;
        m = m + d / (REAL)c;
        q = q + d * (v - m);
    }
    lc[lid] = c;
    lm[lid] = m;
    lq[lid] = q;
    pk_group_reduce(lc, lm, lq, lid);
    if (lid == 0u) {
        pcount[get_group_id(0)] = lc[0];
        pmean[get_group_id(0)] = lm[0];
        pm2[get_group_id(0)] = lq[0];
    }
}

/* Launched as a single work-group: combines the partials into stats = (mean, population std). */
__kernel __attribute__((reqd_work_group_size(PK_WG, 1, 1)))
void pk_normalize_finalize(__global const uint *pcount, __global const REAL *pmean,
                           __global const REAL *pm2, __global REAL *stats, int groups)
{
    __local uint lc[PK_WG];
    __local REAL lm[PK_WG], lq[PK_WG];
    const uint lid = get_local_id(0);
    uint c = 0u;
    REAL m = (REAL)(0.0), q = (REAL)(0.0);
    for (int g = (int)lid; g < groups; g += PK_WG)
        pk_chan(&c, &m, &q, pcount[g], pmean[g], pm2[g]);
    lc[lid] = c;
    lm[lid] = m;
    lq[lid] = q;
    pk_group_reduce(lc, lm, lq, lid);
    if (lid == 0u) {
        stats[0] = lm[0];
        stats[1] = lc[0] ? sqrt(lq[0] / (REAL)lc[0]) : (REAL)(0.0);
    }
}

#ifndef PK_CHUNK
#define PK_CHUNK 4096 /* elements per work-item of pk_normalize_chunks */
#endif
#ifndef PK_NV
#define PK_NV 1 /* vectors of PK_VW elements per work-item of pk_normalize_apply */
#endif
/* Independent vector accumulators in pk_normalize_chunks: a single one would make every add wait
 * for the previous one (a 3-4 cycle latency) instead of running at the load rate. */
#define PK_NACC 4
#define PK_STEP (PK_VW * PK_NACC)
#if PK_VW == 1
#define PK_LDV(p) (*(p))
#define PK_STV(v, p) (*(p) = (v))
#define PK_HSUM(v) (v)
#define PK_VKERNEL __kernel
#else
#define PK_LDV(p) PK_VLD(REAL, PK_VW, p)
#define PK_STV(v, p) PK_VST(PK_VW, v, p)
/* Already vectorised: tells drivers that vectorise across work-items (Intel's) so. */
#define PK_VKERNEL __kernel __attribute__((vec_type_hint(RV)))
static inline REAL pk_hsum(RV v)
{
    REAL lanes[PK_VW];
    PK_VST(PK_VW, v, lanes);
    REAL s = (REAL)(0.0);
    for (int l = 0; l < PK_VW; ++l)
        s += lanes[l];
    return s;
}
#define PK_HSUM(v) pk_hsum(v)
#endif

/* One (count, mean, M2) per work-item over x[g * PK_CHUNK, min((g + 1) * PK_CHUNK, n)): the
 * corrected two-pass algorithm (Chan, Golub & LeVeque 1983), mean first, then the sums of
 * d = x - mean and d^2; the second pass reads the chunk from cache. The host launches
 * ceil(n / PK_CHUNK) work-items. */
PK_VKERNEL void pk_normalize_chunks(__global const REAL *x, __global uint *pcount,
                                    __global REAL *pmean, __global REAL *pm2, int n)
{
    const size_t g = get_global_id(0);
    const size_t start = g * (size_t)PK_CHUNK;
    if (start >= (size_t)n)
        return;
    const size_t end = min(start + (size_t)PK_CHUNK, (size_t)n);
    const uint c = (uint)(end - start);
    RV acc[PK_NACC];
    for (int a = 0; a < PK_NACC; ++a)
        acc[a] = (RV)(0.0);
    size_t k = start;
    for (; k + PK_STEP <= end; k += PK_STEP)
        for (int a = 0; a < PK_NACC; ++a)
            acc[a] += PK_LDV(x + k + a * PK_VW);
    REAL sum = (REAL)(0.0);
    for (; k < end; ++k)
        sum += x[k];
    for (int a = 0; a < PK_NACC; ++a)
        sum += PK_HSUM(acc[a]);
    const REAL m0 = sum / (REAL)c;

    RV ad[PK_NACC], aq[PK_NACC];
    for (int a = 0; a < PK_NACC; ++a)
        ad[a] = aq[a] = (RV)(0.0);
    for (k = start; k + PK_STEP <= end; k += PK_STEP)
        for (int a = 0; a < PK_NACC; ++a) {
            const RV d = PK_LDV(x + k + a * PK_VW) - m0;
            ad[a] += d;
            aq[a] += d * d;
        }
    REAL sd = (REAL)(0.0), sq = (REAL)(0.0);
    for (; k < end; ++k) {
        const REAL d = x[k] - m0;
        sd += d;
        sq += d * d;
    }
    for (int a = 0; a < PK_NACC; ++a) {
        sd += PK_HSUM(ad[a]);
        sq += PK_HSUM(aq[a]);
    }
    /* sd is the rounding left in m0: it corrects the mean and (subtracting sd^2 / c) M2. */
    const REAL fc = (REAL)c;
    pcount[g] = c;
    pmean[g] = m0 + sd / fc;
    pm2[g] = max(sq - sd * (sd / fc), (REAL)(0.0));
}

/* (x - mean) / den for the PK_VW * PK_NV consecutive elements from base (fewer at the end); every
 * element is computed as the scalar expression (same roundings in every layout). */
static inline void pk_normalize_write(__global const REAL *x, __global REAL *out, REAL mean, REAL den,
                               size_t base, int n)
{
    if (base + PK_VW * PK_NV <= (size_t)n) {
        for (int j = 0; j < PK_NV; ++j) {
            const size_t k = base + (size_t)(j * PK_VW);
            const RV y = (PK_LDV(x + k) - mean) / den;
            PK_STV(y, out + k);
        }
        return;
    }
    for (size_t k = base; k < (size_t)n; ++k)
        out[k] = (x[k] - mean) / den;
}

/* (x - mean) / (std + eps) for PK_VW * PK_NV consecutive elements per work-item; every element
 * is computed as the scalar expression (same roundings in every layout). */
PK_VKERNEL void pk_normalize_apply(__global const REAL *x, __global REAL *out,
                                   __global const REAL *stats, REAL eps, int n)
{
    const size_t base = get_global_id(0) * (size_t)(PK_VW * PK_NV);
    if (base >= (size_t)n)
        return;
    const REAL mean = stats[0], den = stats[1] + eps;
    pk_normalize_write(x, out, mean, den, base, n);
}

/* pk_normalize_apply over the chunk layout's partials, without pk_normalize_finalize's launch: every
 * work-item combines the `groups` partials itself, in the same order (so every one gets the very same
 * stats), where the host finds them few enough (2 groups^2 reads under a quarter of the n elements; a
 * finer chunk keeps the finalize group). The parallel form of Chan et al.'s update, no division per
 * partial: the mean as the first partial's plus the count-weighted mean of the others' differences
 * from it (shifted, so a mean far from 0 does not round away the spread), then
 * M2 = sum(M2_g + c_g (m_g - mean)^2). */
PK_VKERNEL void pk_normalize_apply_partials(__global const REAL *x, __global REAL *out,
                                            __global const uint *pcount, __global const REAL *pmean,
                                            __global const REAL *pm2, REAL eps, int n, int groups)
{
    const size_t base = get_global_id(0) * (size_t)(PK_VW * PK_NV);
    if (base >= (size_t)n)
        return;
    const REAL fn = (REAL)n;
    const REAL shift = pmean[0];
    REAL s = (REAL)(0.0);
    for (int g = 1; g < groups; ++g)
        s += (REAL)pcount[g] * (pmean[g] - shift);
    const REAL mean = shift + s / fn;
    REAL q = (REAL)(0.0);
    for (int g = 0; g < groups; ++g) {
        const REAL d = pmean[g] - mean;
        q += pm2[g] + (REAL)pcount[g] * d * d;
    }
    const REAL den = sqrt(q / fn) + eps;
    pk_normalize_write(x, out, mean, den, base, n);
}
