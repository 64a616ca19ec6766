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
 *
 * A float32 spread past float32's range (PK_RESCUE, float32 builds only). The moments are REAL, so
 * a float32 x whose sum of squared deviations M2 passes 3.4e38 (x = [0, 3.4e38, 3.4e38]: M2 is
 * 7.7e76), or whose differences do (-3.4e38 and 3.4e38), overflowed to inf and the result was NaN
 * (or zeros), where the reference's float64 statistics are finite. float64 moments would fix it,
 * but float32-only devices (Intel Arc, dg2: no cl_khr_fp64) build this file too, so the fix stays
 * in float: moments that overflow are recomputed from x * 2^-96, a partial kept so has its mean
 * as m * 2^-96 and its M2 as M2 * 2^-192, marked by storing that scaled M2 negated (a real M2 is
 * never negative, so the kernels' arguments and the host's scratch stay as they are):
 * - pk_normalize_partial: a work-group whose tree comes out inf or NaN is redone by one work-item
 *   over the group's elements, scaled (pk_group_welford_scaled);
 * - pk_normalize_chunks: a chunk whose moments come out inf or NaN is redone, scaled;
 * - pk_normalize_finalize, pk_normalize_apply_partials: where a partial is scaled or the plain
 *   combination comes out inf or NaN, every partial is combined in the scaled form, and the mean
 *   and std are scaled back (saturated at FLT_MAX: both are at most max |x|).
 * Why this shape:
 * - A power-of-two scale is exact (bar elements under 2^-30, which go subnormal or flush to 0:
 *   nothing beside a spread whose M2 passes 2^128), and 2^-96 keeps every scaled quantity finite:
 *   elements under 2^32, deviations under 2^33, M2 under 2^31 elements x 2^66 = 2^97.
 * - Ordinary data never takes the scaled path (entered only where a float result came out inf or
 *   NaN: an overflow anywhere propagates to the result), so its results are bit-identical to the
 *   plain kernels': same operations in the same order. A NaN or inf in x takes it too and stays NaN,
 *   as in the reference.
 * - A scaled partial whose M2 fits float32 goes back to the plain form (pk_settle), so only a
 *   partial that cannot be plain is marked.
 * - Scaling x's elements themselves (not M2 alone) also covers differences past the range.
 * The float64 build is the plain code only: its M2 overflows where the reference's float64 does.
 * CUDA's twin (kernels/cuda/normalize.cu) takes the moments in double, where a float32 x cannot
 * overflow.
 */
#include "pk_common.h"
#include "pk_vload.h"

#ifndef PK_WG
#define PK_WG 256 /* work-group size of the partial and finalize kernels, a power of two */
#endif

#ifdef PK_DOUBLE
#define PK_RESCUE 0
#else
#define PK_RESCUE 1
#define PK_DOWN 0x1.0p-96f /* the scale of a rescued partial's mean (squared: of its M2) */
#define PK_UP 0x1.0p96f
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

#if PK_RESCUE
/* A partial's (mean, M2) in the scaled form, (m * 2^-96, M2 * 2^-192), whichever form it is in. */
static inline void pk_to_scaled(REAL *m, REAL *q)
{
    if (*q < 0.0f) {
        *q = -*q;
        return;
    }
    *m = *m * PK_DOWN;
    *q = *q * PK_DOWN * PK_DOWN;
}

/* A value of the scaled form back to x's units, saturated: a mean or std of finite elements is at
 * most FLT_MAX, the scaled one's rounding may pass it by an ulp (a NaN stays NaN). */
static inline REAL pk_unscale(REAL v)
{
    const REAL u = v * PK_UP;
    return isinf(u) ? copysign(FLT_MAX, u) : u;
}

/* Scaled (mean, M2) as a partial: plain where M2 fits float32, else scaled with M2 negated. */
static inline void pk_settle(REAL *m, REAL *q)
{
    const REAL plain = *q * PK_UP * PK_UP;
    if (isfinite(plain)) {
        *m = pk_unscale(*m);
        *q = plain;
    } else {
        *q = -*q;
    }
}
#endif

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

#if PK_RESCUE
/* The rescue of a work-group whose tree came out inf or NaN (the header note): Welford over all of
 * the group's elements (its work-items' grid-strided slices) from x * 2^-96, by one work-item.
 * Serial, so no barrier sits in a branch and nothing private stays live across the tree's barriers
 * (what a CPU driver, running a group's work-items in loops between barriers, pays for). */
static inline void pk_group_welford_scaled(__global const REAL *x, int n, uint *count, REAL *mean, REAL *m2)
{
    uint c = 0u;
    REAL m = 0.0f, q = 0.0f;
    for (size_t base = get_group_id(0) * (size_t)PK_WG; base < (size_t)n; base += get_global_size(0)) {
        const size_t end = min(base + (size_t)PK_WG, (size_t)n);
        for (size_t k = base; k < end; ++k) {
            const REAL v = x[k] * PK_DOWN;
            c += 1u;
            const REAL d = v - m;
            m = m + d / (REAL)c;
            q = q + d * (v - m);
        }
    }
    *count = c;
    *mean = m;
    *m2 = q;
}
#endif

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
        c = lc[0];
        m = lm[0];
        q = lq[0];
#if PK_RESCUE
        if (!(isfinite(m) && isfinite(q))) { /* an inf or NaN anywhere in the group reaches the root */
            pk_group_welford_scaled(x, n, &c, &m, &q);
            pk_settle(&m, &q);
        }
#endif
        pcount[get_group_id(0)] = c;
        pmean[get_group_id(0)] = m;
        pm2[get_group_id(0)] = q;
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
#if PK_RESCUE
    int scaled = 0; /* a partial in the scaled form (M2 negated): poisons the plain tree below */
#endif
    for (int g = (int)lid; g < groups; g += PK_WG) {
#if PK_RESCUE
        scaled |= pm2[g] < 0.0f;
#endif
        pk_chan(&c, &m, &q, pcount[g], pmean[g], pm2[g]);
    }
    lc[lid] = c;
    lm[lid] = m;
#if PK_RESCUE
    lq[lid] = scaled ? NAN : q;
#else
    lq[lid] = q;
#endif
    pk_group_reduce(lc, lm, lq, lid);
    if (lid == 0u) {
        c = lc[0];
        m = lm[0];
        q = lq[0];
#if PK_RESCUE
        if (!(isfinite(m) && isfinite(q))) { /* overflowed, a scaled partial, or a NaN: as the partial pass, */
            c = 0u;                           /* one work-item combines every partial, scaled */
            m = q = 0.0f;
            for (int g = 0; g < groups; ++g) {
                REAL mg = pmean[g], qg = pm2[g];
                pk_to_scaled(&mg, &qg);
                pk_chan(&c, &m, &q, pcount[g], mg, qg);
            }
            stats[0] = pk_unscale(m);
            stats[1] = pk_unscale(sqrt(q / (REAL)c)); /* c > 0: an empty x never launches */
            return;
        }
#endif
        stats[0] = m;
        stats[1] = c ? sqrt(q / (REAL)c) : (REAL)(0.0);
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

/* The corrected two-pass algorithm (Chan, Golub & LeVeque 1983) over x[start, end) * scale (scale 1:
 * x itself, the multiplies folded away): mean first, then the sums of d = x - mean and d^2; the
 * second pass reads the chunk from cache. The mean and M2 before M2's clamp at 0. */
static inline void pk_chunk_moments(__global const REAL *x, size_t start, size_t end, REAL scale, REAL *mean,
                                    REAL *m2)
{
    const uint c = (uint)(end - start);
    RV acc[PK_NACC];
    for (int a = 0; a < PK_NACC; ++a)
        acc[a] = (RV)(0.0);
    size_t k = start;
    for (; k + PK_STEP <= end; k += PK_STEP)
        for (int a = 0; a < PK_NACC; ++a)
            acc[a] += PK_LDV(x + k + a * PK_VW) * scale;
    REAL sum = (REAL)(0.0);
    for (; k < end; ++k)
        sum += x[k] * scale;
    for (int a = 0; a < PK_NACC; ++a)
        sum += PK_HSUM(acc[a]);
    const REAL m0 = sum / (REAL)c;

    RV ad[PK_NACC], aq[PK_NACC];
    for (int a = 0; a < PK_NACC; ++a)
        ad[a] = aq[a] = (RV)(0.0);
    for (k = start; k + PK_STEP <= end; k += PK_STEP)
        for (int a = 0; a < PK_NACC; ++a) {
            const RV d = PK_LDV(x + k + a * PK_VW) * scale - m0;
            ad[a] += d;
            aq[a] += d * d;
        }
    REAL sd = (REAL)(0.0), sq = (REAL)(0.0);
    for (; k < end; ++k) {
        const REAL d = x[k] * scale - m0;
        sd += d;
        sq += d * d;
    }
    for (int a = 0; a < PK_NACC; ++a) {
        sd += PK_HSUM(ad[a]);
        sq += PK_HSUM(aq[a]);
    }
    /* sd is the rounding left in m0: it corrects the mean and (subtracting sd^2 / c) M2. */
    const REAL fc = (REAL)c;
    *mean = m0 + sd / fc;
    *m2 = sq - sd * (sd / fc);
}

/* One (count, mean, M2) per work-item over x[g * PK_CHUNK, min((g + 1) * PK_CHUNK, n)) by
 * pk_chunk_moments. The host launches ceil(n / PK_CHUNK) work-items. */
PK_VKERNEL void pk_normalize_chunks(__global const REAL *x, __global uint *pcount,
                                    __global REAL *pmean, __global REAL *pm2, int n)
{
    const size_t g = get_global_id(0);
    const size_t start = g * (size_t)PK_CHUNK;
    if (start >= (size_t)n)
        return;
    const size_t end = min(start + (size_t)PK_CHUNK, (size_t)n);
    REAL mean, m2;
    pk_chunk_moments(x, start, end, (REAL)(1.0), &mean, &m2);
#if PK_RESCUE
    if (!(isfinite(mean) && isfinite(m2))) { /* overflowed (or a NaN/inf in x): the chunk again, scaled */
        pk_chunk_moments(x, start, end, PK_DOWN, &mean, &m2);
        if (m2 < 0.0f) /* max()'s clamp, keeping a NaN (max of a NaN is undefined) */
            m2 = 0.0f;
        pk_settle(&mean, &m2);
    } else
#endif
        m2 = max(m2, (REAL)(0.0));
    pcount[g] = (uint)(end - start);
    pmean[g] = mean;
    pm2[g] = m2;
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

/* The mean and M2 of the `groups` partials by the parallel form of Chan et al.'s update, no division
 * per partial: the mean as the first partial's plus the count-weighted mean of the others'
 * differences from it (shifted, so a mean far from 0 does not round away the spread), then
 * M2 = sum(M2_g + c_g (m_g - mean)^2). scaled: every partial taken in the scaled form (the header
 * note), the results scaled too; *marked: whether a partial was in it already. */
static inline void pk_combine_partials(__global const uint *pcount, __global const REAL *pmean,
                                       __global const REAL *pm2, int groups, REAL fn, int scaled,
                                       REAL *mean_out, REAL *m2_out, int *marked)
{
    REAL shift = pmean[0];
    int any = 0;
#if PK_RESCUE
    REAL q0 = pm2[0];
    any = q0 < 0.0f;
    if (scaled)
        pk_to_scaled(&shift, &q0);
#endif
    REAL s = (REAL)(0.0);
    for (int g = 1; g < groups; ++g) {
        REAL mg = pmean[g];
#if PK_RESCUE
        REAL qg = pm2[g];
        any |= qg < 0.0f;
        if (scaled)
            pk_to_scaled(&mg, &qg);
#endif
        s += (REAL)pcount[g] * (mg - shift);
    }
    const REAL mean = shift + s / fn;
    REAL q = (REAL)(0.0);
    for (int g = 0; g < groups; ++g) {
        REAL mg = pmean[g], qg = pm2[g];
#if PK_RESCUE
        if (scaled)
            pk_to_scaled(&mg, &qg);
#endif
        const REAL d = mg - mean;
        q += qg + (REAL)pcount[g] * d * d;
    }
    *mean_out = mean;
    *m2_out = q;
    *marked = any;
}

/* pk_normalize_apply over the chunk layout's partials, without pk_normalize_finalize's launch: every
 * work-item combines the `groups` partials itself (pk_combine_partials), in the same order (so every
 * one gets the very same stats), where the host finds them few enough (2 groups^2 reads under a
 * quarter of the n elements; a finer chunk keeps the finalize group). */
PK_VKERNEL void pk_normalize_apply_partials(__global const REAL *x, __global REAL *out,
                                            __global const uint *pcount, __global const REAL *pmean,
                                            __global const REAL *pm2, REAL eps, int n, int groups)
{
    const size_t base = get_global_id(0) * (size_t)(PK_VW * PK_NV);
    if (base >= (size_t)n)
        return;
    const REAL fn = (REAL)n;
    REAL mean, q;
    int marked;
    pk_combine_partials(pcount, pmean, pm2, groups, fn, 0, &mean, &q, &marked);
    REAL den;
#if PK_RESCUE
    if (marked || !(isfinite(mean) && isfinite(q))) { /* a scaled partial, or the plain sums overflowed */
        pk_combine_partials(pcount, pmean, pm2, groups, fn, 1, &mean, &q, &marked);
        mean = pk_unscale(mean);
        den = pk_unscale(sqrt(q / fn)) + eps;
    } else
#endif
        den = sqrt(q / fn) + eps;
    pk_normalize_write(x, out, mean, den, base, n);
}
