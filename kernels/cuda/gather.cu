// Minibatch gather along the first axis: out[b, :] = x[indices[b], :], one thread per element.
// The backends build it with REAL set to any type of the element's size: it only copies bits.
#include "pk_common.cuh"

template <class IDX>
__device__ __forceinline__ void pk_gather_body(const REAL *__restrict__ x, const IDX *__restrict__ indices,
                                               REAL *__restrict__ out, int row_len, int B) {
    const long long j = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= (long long)row_len * B) return;
    const long long b = j / row_len;
    const long long k = j - b * row_len;
    out[j] = x[(long long)indices[b] * row_len + k];
}

extern "C" __global__ void pk_gather(const REAL *__restrict__ x, const long long *__restrict__ indices,
                                     REAL *__restrict__ out, int row_len, int B) {
    pk_gather_body(x, indices, out, row_len, B);
}

extern "C" __global__ void pk_gather_i32(const REAL *__restrict__ x, const int *__restrict__ indices,
                                         REAL *__restrict__ out, int row_len, int B) {
    pk_gather_body(x, indices, out, row_len, B);
}
