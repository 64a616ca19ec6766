// Normalisation over all elements, (x - mean) / (std + eps) with population std: per-block partial
// moments, a one-block finalize, an elementwise apply. Same kernels and argument order as
// normalize.cl; the moments accumulate in double in every build, as the reference does (float64).
// So a float32 x whose spread passes float32's range (normalize.cl's PK_RESCUE, for devices without
// float64) needs nothing here: double holds its M2 (at most 2^31 elements x 2^258) with room to spare.
#include "pk_common.cuh"

#ifndef PK_WG
#define PK_WG 256  // threads per block of the partial and finalize kernels, a power of two
#endif

// Chan, Golub & LeVeque's pairwise update: fold (nb, mb, qb) into (na, ma, qa). Counts stay
// integers so they are exact at any size.
__device__ __forceinline__ void pk_chan(uint &na, double &ma, double &qa, uint nb, double mb, double qb) {
    if (nb == 0u) return;
    const uint n = na + nb;
    const double delta = mb - ma;
    const double fa = (double)na, fb = (double)nb, fn = (double)n;
    ma = ma + delta * (fb / fn);
    qa = qa + qb + delta * delta * (fa * fb / fn);
    na = n;
}

// Tree-combine the block's (count, mean, M2) into slot 0.
__device__ __forceinline__ void pk_block_reduce(uint *sc, double *sm, double *sq) {
    const uint tid = threadIdx.x;
    for (uint stride = PK_WG / 2; stride > 0u; stride >>= 1) {
        __syncthreads();
        if (tid < stride) {
            uint c = sc[tid];
            double m = sm[tid], q = sq[tid];
            pk_chan(c, m, q, sc[tid + stride], sm[tid + stride], sq[tid + stride]);
            sc[tid] = c;
            sm[tid] = m;
            sq[tid] = q;
        }
    }
    __syncthreads();
}

// One (count, mean, M2) per block: each thread runs Welford over a grid-strided slice.
extern "C" __global__ void __launch_bounds__(PK_WG) pk_normalize_partial(
    const REAL *__restrict__ x, uint *__restrict__ pcount, double *__restrict__ pmean, double *__restrict__ pm2,
    int n) {
    __shared__ uint sc[PK_WG];
    __shared__ double sm[PK_WG], sq[PK_WG];
    uint c = 0u;
    double m = 0.0, q = 0.0;
    for (long long k = (long long)blockIdx.x * PK_WG + threadIdx.x; k < n; k += (long long)gridDim.x * PK_WG) {
        const double v = (double)x[k];
        c += 1u;
        const double d = v - m;
        m = m + d / (double)c;
        q = q + d * (v - m);
    }
    sc[threadIdx.x] = c;
    sm[threadIdx.x] = m;
    sq[threadIdx.x] = q;
    pk_block_reduce(sc, sm, sq);
    if (threadIdx.x == 0) {
        pcount[blockIdx.x] = sc[0];
        pmean[blockIdx.x] = sm[0];
        pm2[blockIdx.x] = sq[0];
    }
}

// Launched as a single block: combines the partials into stats = (mean, population std), rounded to REAL.
extern "C" __global__ void __launch_bounds__(PK_WG) pk_normalize_finalize(
    const uint *__restrict__ pcount, const double *__restrict__ pmean, const double *__restrict__ pm2,
    REAL *__restrict__ stats, int groups) {
    __shared__ uint sc[PK_WG];
    __shared__ double sm[PK_WG], sq[PK_WG];
    uint c = 0u;
    double m = 0.0, q = 0.0;
    // Not unrolled: NVVM unrolled this loop 4x (eight div.rn.f64 in one body, each a fast path and a
    // call to ptxas' slow-path subroutine), and ptxas spilled 4 bytes around those calls (a 16-byte
    // stack on sm_80, 8 on sm_90). The loop runs at most MAX_PARTIALS / PK_WG times (4 at 256).
#pragma unroll 1
    for (int g = (int)threadIdx.x; g < groups; g += PK_WG) pk_chan(c, m, q, pcount[g], pmean[g], pm2[g]);
    sc[threadIdx.x] = c;
    sm[threadIdx.x] = m;
    sq[threadIdx.x] = q;
    pk_block_reduce(sc, sm, sq);
    if (threadIdx.x == 0) {
        stats[0] = (REAL)sm[0];
        stats[1] = sc[0] ? (REAL)sqrt(sq[0] / (double)sc[0]) : (REAL)0.0;
    }
}

// The reference's roundings: (x - T(mean)) / (T(std) + T(eps)).
extern "C" __global__ void pk_normalize_apply(const REAL *__restrict__ x, REAL *__restrict__ out,
                                              const REAL *__restrict__ stats, REAL eps, int n) {
    const int k = blockIdx.x * blockDim.x + threadIdx.x;
    if (k >= n) return;
    out[k] = (x[k] - stats[0]) / (stats[1] + eps);
}
