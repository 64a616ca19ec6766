/* Helpers shared by every portkern OpenCL kernel: REAL, the vector types, Philox4x32-10, Python's modulo. */
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

#include "pk_vec.h"

/* PK_PIN(v), on AMD GPUs: an empty asm statement that takes v in a VGPR, so clang must have v made by then, and
 * keeps such statements in order. The layers are unrolled straight-line code of 64 units, and without it clang
 * scheduled all the units' products, or all their tanh, ahead of the adds that consume them: 64 temporaries on
 * top of the 64 activations (mlp.cl's per-step kernel 241 VGPRs, 2 waves a SIMD on gfx942). Pinned unit by unit, the
 * same code needs 87 (5 waves); Chain-v0's link loops use it alike (chain.cl). No instruction is added and
 * the values are unchanged. Other compilers keep their order (the macro is empty there). */
#ifdef __AMDGCN__
#define PK_PIN(v) __asm__ volatile("" : "+v"(v))
#else
#define PK_PIN(v) ((void)0)
#endif

#define PK_STREAM_RESET 0u
#define PK_STREAM_POLICY 1u

/* Philox4x32-10 (Salmon et al., SC'11), constants from Random123's philox.h; matches portkern/rng.py.
 * On every lane (pk_vec.h): key (seed, env), counter (c0, c1, c2, c3). c3 is the block of a draw
 * wider than one block (the policy's draws for a Box of more than one component); 0 otherwise. */
typedef struct {
    UV x, y, z, w;
} pk_bits;

static inline pk_bits pk_philox_block_v(UV c0, UV c1, uint c2, uint c3, uint seed, UV env)
{
    UV x = c0, y = c1, z = (UV)(c2), w = (UV)(c3), k1 = env;
    uint k0 = seed;
    for (int r = 0; r < 10; ++r) {
        if (r > 0) {
            k0 += 0x9E3779B9u;
            k1 += 0xBB67AE85u;
        }
        const UV hi0 = mul_hi((UV)(0xD2511F53u), x), lo0 = (UV)(0xD2511F53u) * x;
        const UV hi1 = mul_hi((UV)(0xCD9E8D57u), z), lo1 = (UV)(0xCD9E8D57u) * z;
        x = hi1 ^ y ^ (UV)(k0);
        y = lo1;
        z = hi0 ^ w ^ k1;
        w = lo0;
    }
    pk_bits b = {x, y, z, w};
    return b;
}

/* Counter (c0, c1, c2, 0): every draw of the resets and of one-block policies. */
static inline pk_bits pk_philox_v(UV c0, UV c1, uint c2, uint seed, UV env)
{
    return pk_philox_block_v(c0, c1, c2, 0u, seed, env);
}

/* uint32 -> [-1, 1) from the top 24 bits, as rng.symmetric: every operation is exact in float and double. */
static inline RV pk_sym_v(UV b)
{
    return PK_CONVERT(RV, b >> 8) * (REAL)(5.9604644775390625e-08) * (REAL)(2.0) - (REAL)(1.0);
}

/* Four state variables, each bound * U[-1, 1) from one word of the reset block (CartPole's and
 * Acrobot's reset: every variable uniform in [-reset_bound, reset_bound)). */
static inline void pk_reset_sym4(RV *s, REAL bound, pk_bits b)
{
    s[0] = bound * pk_sym_v(b.x);
    s[1] = bound * pk_sym_v(b.y);
    s[2] = bound * pk_sym_v(b.z);
    s[3] = bound * pk_sym_v(b.w);
}

/* NumPy's npy_remainder (Python's modulo: the result takes the divisor's sign); fmod itself is exact. */
static inline RV pk_remainder_v(RV a, REAL b)
{
    const RV m = fmod(a, (RV)(b));
    const MV zero = m == (RV)(0.0);
    /* a nonzero m whose sign differs from b's moves into b's half-line */
    const MV opposite = b < (REAL)(0.0) ? (m > (RV)(0.0)) : (m < (RV)(0.0));
    return select(select(m, m + b, opposite), (RV)(copysign((REAL)(0.0), b)), zero);
}

#endif
