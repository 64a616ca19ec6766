// The MLP policy's forward pass on its own (pk_mlp_forward), the same code the fused rollouts run.
#include "pk_common.cuh"

// out[i] = MLP(obs[i]) in float32, obs cast to float first; obs_dim, hidden, out_dim <= PK_MLP_MAX.
extern "C" __global__ void pk_mlp_forward(const float *__restrict__ policy, int hidden, int obs_dim, int out_dim,
                                          const REAL *__restrict__ obs, float *__restrict__ out, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float x[PK_MLP_MAX], y[PK_MLP_MAX];
    for (int k = 0; k < obs_dim; ++k) x[k] = (float)obs[(size_t)i * obs_dim + k];
    pk_mlp(policy, hidden, obs_dim, out_dim, x, y);
    for (int j = 0; j < out_dim; ++j) out[(size_t)i * out_dim + j] = y[j];
}
