/* Minibatch gather along the first axis: out[b, j] = x[indices[b], j] for rows of row_len elements. */

/* The backend builds this file with REAL set to the unsigned integer type of the element's width,
 * so every dtype (float, int, bool) is copied bit for bit and float64 needs no cl_khr_fp64. */
#ifndef REAL
#define REAL uint
#endif

__kernel void pk_gather(__global const REAL *x, __global const long *indices, __global REAL *out,
                        int row_len, int B)
{
    const size_t k = get_global_id(0);
    if (k >= (size_t)B * (size_t)row_len)
        return;
    const size_t b = k / (size_t)row_len;
    const size_t j = k - b * (size_t)row_len;
    out[k] = x[(size_t)indices[b] * (size_t)row_len + j];
}

__kernel void pk_gather_i32(__global const REAL *x, __global const int *indices,
                            __global REAL *out, int row_len, int B)
{
    const size_t k = get_global_id(0);
    if (k >= (size_t)B * (size_t)row_len)
        return;
    const size_t b = k / (size_t)row_len;
    const size_t j = k - b * (size_t)row_len;
    out[k] = x[(size_t)indices[b] * (size_t)row_len + j];
}
