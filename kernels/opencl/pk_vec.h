/* PK_VW envs per work-item, as OpenCL vector types: env physics written once over these types.
 *
 * Why: CPU OpenCL drivers (PoCL) do not vectorise across work-items through calls such as sin and
 * cos or through the autoreset branches, so one env per work-item runs scalar. Explicit vectors
 * run the same per-lane arithmetic (vector builtins round as the scalar ones) 8-16 lanes at a time.
 * PK_VW is a tuning knob: 1 on GPUs (one env per thread), the SIMD width on CPUs.
 *
 * Masks: a comparison gives 1 for a scalar and -1 (all bits) per lane for a vector; code only
 * combines masks with & | and consumes them through select() and PK_ANY, which read both alike.
 */
#ifndef PK_VEC_H
#define PK_VEC_H

#ifndef PK_VW
#define PK_VW 1
#endif

#define PK_CAT_(a, b) a##b
#define PK_CAT(a, b) PK_CAT_(a, b)

#if PK_VW == 1
#define PK_V(T) T
#define PK_ANY(m) ((m) != 0)
#define PK_LANES 0u
#else
#define PK_V(T) PK_CAT(T, PK_VW)
#define PK_ANY(m) any(m)
#if PK_VW == 2
#define PK_LANES ((uint2)(0, 1))
#elif PK_VW == 4
#define PK_LANES ((uint4)(0, 1, 2, 3))
#elif PK_VW == 8
#define PK_LANES ((uint8)(0, 1, 2, 3, 4, 5, 6, 7))
#elif PK_VW == 16
#define PK_LANES ((uint16)(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15))
#else
#error "PK_VW must be 1, 2, 4, 8 or 16"
#endif
#endif

#define RV PK_V(REAL)
#define FV PK_V(float)
#define IV PK_V(int)
#define UV PK_V(uint)
#define PK_CONVERT(T, x) PK_CAT(convert_, T)(x)

/* Comparisons of REAL give MV; int masks are IV. PK_RMASK / PK_IMASK move a mask between them. */
#ifdef PK_DOUBLE
#define MV PK_V(long)
#define PK_RMASK(m) PK_CONVERT(MV, m)
#define PK_IMASK(m) PK_CONVERT(IV, m)
#else
#define MV IV
#define PK_RMASK(m) (m)
#define PK_IMASK(m) (m)
#endif

/* 0/1 for storing a mask as a uchar flag. */
#define PK_FLAG(m) PK_CONVERT(PK_V(uchar), select((IV)(0), (IV)(1), (m)))

/* Loads and stores of [n] arrays at envs base .. base + PK_VW - 1; lanes past n read 0 and are not
 * written (n need not be a multiple of PK_VW). */
#if PK_VW == 1
#define PK_LOAD_FN(name, T)                                                                    \
    static inline T name(__global const T *a, int base, int n) { return a[base]; }
#define PK_STORE_FN(name, T)                                                                   \
    static inline void name(__global T *a, int base, int n, T v) { a[base] = v; }
#else
#define PK_LOAD_FN(name, T)                                                                    \
    static inline PK_V(T) name(__global const T *a, int base, int n)                           \
    {                                                                                          \
        if (base + PK_VW <= n)                                                                 \
            return PK_CAT(vload, PK_VW)(0, a + base);                                          \
        T t[PK_VW];                                                                            \
        for (int l = 0; l < PK_VW; ++l)                                                        \
            t[l] = base + l < n ? a[base + l] : (T)(0);                                        \
        return PK_CAT(vload, PK_VW)(0, t);                                                     \
    }
#define PK_STORE_FN(name, T)                                                                   \
    static inline void name(__global T *a, int base, int n, PK_V(T) v)                         \
    {                                                                                          \
        if (base + PK_VW <= n) {                                                               \
            PK_CAT(vstore, PK_VW)(v, 0, a + base);                                             \
            return;                                                                            \
        }                                                                                      \
        T t[PK_VW];                                                                            \
        PK_CAT(vstore, PK_VW)(v, 0, t);                                                        \
        for (int l = 0; l < n - base; ++l)                                                     \
            a[base + l] = t[l];                                                                \
    }
#endif
PK_LOAD_FN(pk_ld_real, REAL)
PK_LOAD_FN(pk_ld_float, float)
PK_LOAD_FN(pk_ld_int, int)
PK_LOAD_FN(pk_ld_uint, uint)
PK_LOAD_FN(pk_ld_uchar, uchar)
PK_STORE_FN(pk_st_real, REAL)
PK_STORE_FN(pk_st_float, float)
PK_STORE_FN(pk_st_int, int)
PK_STORE_FN(pk_st_uint, uint)
PK_STORE_FN(pk_st_uchar, uchar)

/* Rows of a row-major [n, width] array (observations; the actions of a Box wider than one
 * component), one vector per column; width <= PK_ROWS_MAX. pk_ld_rows / pk_st_rows are over REAL,
 * pk_ld_rows_float / pk_st_rows_float over float (the same code; both exist when REAL is float). */
#define PK_ROWS_MAX 64
#if PK_VW == 1
#define PK_ROWS_FNS(suffix, T)                                                                 \
    static inline void PK_CAT(pk_ld_rows, suffix)(__global const T *a, int width, int base, int n, \
                                                  PK_V(T) *cols)                               \
    {                                                                                          \
        for (int k = 0; k < width; ++k)                                                        \
            cols[k] = a[(size_t)base * width + k];                                             \
    }                                                                                          \
    static inline void PK_CAT(pk_st_rows, suffix)(__global T *a, int width, int base, int n,   \
                                                  const PK_V(T) *cols)                         \
    {                                                                                          \
        for (int k = 0; k < width; ++k)                                                        \
            a[(size_t)base * width + k] = cols[k];                                             \
    }
#else
/* The stores transpose into a private block, then make one contiguous copy: scattered
 * per-element stores to global memory cost more than the physics on CPUs. */
#define PK_ROWS_FNS(suffix, T)                                                                 \
    static inline void PK_CAT(pk_ld_rows, suffix)(__global const T *a, int width, int base, int n, \
                                                  PK_V(T) *cols)                               \
    {                                                                                          \
        T t[PK_VW];                                                                            \
        for (int k = 0; k < width; ++k) {                                                      \
            for (int l = 0; l < PK_VW; ++l)                                                    \
                t[l] = base + l < n ? a[(size_t)(base + l) * width + k] : (T)(0.0);            \
            cols[k] = PK_CAT(vload, PK_VW)(0, t);                                              \
        }                                                                                      \
    }                                                                                          \
    static inline void PK_CAT(pk_st_rows, suffix)(__global T *a, int width, int base, int n,   \
                                                  const PK_V(T) *cols)                         \
    {                                                                                          \
        const int count = min(PK_VW, n - base);                                                \
        T block[PK_VW * PK_ROWS_MAX], t[PK_VW];                                                \
        for (int k = 0; k < width; ++k) {                                                      \
            PK_CAT(vstore, PK_VW)(cols[k], 0, t);                                              \
            for (int l = 0; l < PK_VW; ++l)                                                    \
                block[l * width + k] = t[l];                                                   \
        }                                                                                      \
        __global T *dst = a + (size_t)base * width;                                            \
        if (count == PK_VW) {                                                                  \
            for (int c = 0; c < width; ++c)                                                    \
                PK_CAT(vstore, PK_VW)(PK_CAT(vload, PK_VW)(c, block), c, dst);                 \
        } else {                                                                               \
            for (int m = 0; m < count * width; ++m)                                            \
                dst[m] = block[m];                                                             \
        }                                                                                      \
    }
#endif
PK_ROWS_FNS(, REAL)
PK_ROWS_FNS(_float, float)

#endif
