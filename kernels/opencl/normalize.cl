/* (x - mean) / (std + eps) over all elements, reduced on the device: partial, finalize, apply. */
#include "pk_common.h"

#ifndef PK_WG
#define PK_WG 256 /* work-group size of the partial and finalize kernels, a power of two */
#endif

/* Chan, Golub & LeVeque's pairwise update: fold (nb, mb, qb) into (na, ma, qa). Counts stay
 * integers so they are exact at any size; Welford/Chan keep the float accumulation stable. */
inline void pk_chan(uint *na, REAL *ma, REAL *qa, uint nb, REAL mb, REAL qb)
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
inline void pk_group_reduce(__local uint *lc, __local REAL *lm, __local REAL *lq, uint lid)
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

__kernel void pk_normalize_apply(__global const REAL *x, __global REAL *out,
                                 __global const REAL *stats, REAL eps, int n)
{
    const size_t k = get_global_id(0);
    if (k >= (size_t)n)
        return;
    out[k] = (x[k] - stats[0]) / (stats[1] + eps);
}
