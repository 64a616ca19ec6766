/* Helpers shared by every portkern OpenCL kernel: REAL, Philox4x32-10, the reset draw, Python's modulo. */
#ifndef PK_COMMON_H
#define PK_COMMON_H

/* No fused multiply-adds: kernels must round exactly where the NumPy reference rounds. */
#pragma OPENCL FP_CONTRACT OFF

#ifdef PK_DOUBLE
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
#endif
#ifndef REAL
#define REAL float
#endif

/* Philox4x32-10 (Salmon et al., SC'11), constants from Random123's philox.h; matches portkern/rng.py. */
inline uint4 pk_philox4x32_10(uint4 c, uint2 k)
{
    for (int r = 0; r < 10; ++r) {
        if (r > 0) {
            k.x += 0x9E3779B9u;
            k.y += 0xBB67AE85u;
        }
        const uint hi0 = mul_hi(0xD2511F53u, c.x), lo0 = 0xD2511F53u * c.x;
        const uint hi1 = mul_hi(0xCD9E8D57u, c.z), lo1 = 0xCD9E8D57u * c.z;
        c = (uint4)(hi1 ^ c.y ^ k.x, lo1, hi0 ^ c.w ^ k.y, lo0);
    }
    return c;
}

#define PK_STREAM_RESET 0u
#define PK_STREAM_POLICY 1u

/* Four draws for env i: key (seed, i), counter (episode, block 0, stream, 0), as rng.draw. */
inline uint4 pk_draw(uint seed, uint i, uint episode, uint stream)
{
    return pk_philox4x32_10((uint4)(episode, 0u, stream, 0u), (uint2)(seed, i));
}

/* uint32 -> [-1, 1) from the top 24 bits, as rng.symmetric: every operation is exact in float and double. */
inline REAL pk_sym(uint b)
{
    return (REAL)(b >> 8) * (REAL)(5.9604644775390625e-08) * (REAL)(2.0) - (REAL)(1.0);
}

/* NumPy's npy_remainder (Python's modulo: the result takes the divisor's sign); fmod itself is exact. */
inline REAL pk_remainder(REAL a, REAL b)
{
    REAL m = fmod(a, b);
    if (m != (REAL)(0.0)) {
        if ((b < (REAL)(0.0)) != (m < (REAL)(0.0)))
            m += b;
    } else {
        m = copysign((REAL)(0.0), b);
    }
    return m;
}

#endif
