/* Validation reductions run before launches: index range for gather, count of non-finite floats. */

#ifndef PK_WG
#define PK_WG 256 /* work-group size, a power of two */
#endif

/* Per-work-group (min, max) of the indices; the host folds the few group results. */
static inline void pk_minmax_group(__local long *lo, __local long *hi, long a, long b,
                            __global long *glo, __global long *ghi)
{
    const uint lid = get_local_id(0);
    lo[lid] = a;
    hi[lid] = b;
    for (uint stride = PK_WG / 2; stride > 0u; stride >>= 1) {
        barrier(CLK_LOCAL_MEM_FENCE);
        if (lid < stride) {
            lo[lid] = min(lo[lid], lo[lid + stride]);
            hi[lid] = max(hi[lid], hi[lid + stride]);
        }
    }
    if (lid == 0u) {
        glo[get_group_id(0)] = lo[0];
        ghi[get_group_id(0)] = hi[0];
    }
}

__kernel __attribute__((reqd_work_group_size(PK_WG, 1, 1)))
void pk_index_range(__global const long *idx, __global long *glo, __global long *ghi, int n)
{
    __local long lo[PK_WG], hi[PK_WG];
    long a = LONG_MAX, b = LONG_MIN;
    for (size_t k = get_global_id(0); k < (size_t)n; k += get_global_size(0)) {
        a = min(a, idx[k]);
        b = max(b, idx[k]);
    }
    pk_minmax_group(lo, hi, a, b, glo, ghi);
}

__kernel __attribute__((reqd_work_group_size(PK_WG, 1, 1)))
void pk_index_range_i32(__global const int *idx, __global long *glo, __global long *ghi, int n)
{
    __local long lo[PK_WG], hi[PK_WG];
    long a = LONG_MAX, b = LONG_MIN;
    for (size_t k = get_global_id(0); k < (size_t)n; k += get_global_size(0)) {
        a = min(a, (long)idx[k]);
        b = max(b, (long)idx[k]);
    }
    pk_minmax_group(lo, hi, a, b, glo, ghi);
}

static inline void pk_sum_group(__local uint *acc, uint c, __global uint *gcount)
{
    const uint lid = get_local_id(0);
    acc[lid] = c;
    for (uint stride = PK_WG / 2; stride > 0u; stride >>= 1) {
        barrier(CLK_LOCAL_MEM_FENCE);
        if (lid < stride)
            acc[lid] += acc[lid + stride];
    }
    if (lid == 0u)
        gcount[get_group_id(0)] = acc[0];
}

/* Non-finite means an all-ones exponent; testing the bits needs no cl_khr_fp64 for float64. One
 * kernel per float width, over the unsigned integer T of that width and its exponent mask. */
#define PK_EXPONENT_uint 0x7F800000u
#define PK_EXPONENT_ulong 0x7FF0000000000000ul
#define PK_COUNT_NONFINITE(S, T)                                                                   \
__kernel __attribute__((reqd_work_group_size(PK_WG, 1, 1)))                                        \
void pk_count_nonfinite_##S(__global const T *x, __global uint *gcount, int n)                     \
{                                                                                                  \
    __local uint acc[PK_WG];                                                                       \
    uint c = 0u;                                                                                   \
    for (size_t k = get_global_id(0); k < (size_t)n; k += get_global_size(0))                      \
        c += (x[k] & PK_EXPONENT_##T) == PK_EXPONENT_##T;                                          \
    pk_sum_group(acc, c, gcount);                                                                  \
}

PK_COUNT_NONFINITE(f32, uint)
PK_COUNT_NONFINITE(f64, ulong)
