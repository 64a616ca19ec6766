// The MLP policy's forward pass on its own (pk_mlp_forward), the same arithmetic the fused rollouts run.
// The host builds it with -DPK_MLP_HIDDEN=H or -DPK_MLP_RUNTIME_WIDTH=1 (pk_policy.cuh); a build with
// neither (a compile check of every file) is the run-time-width one, as this file has no random policy.
#if !defined(PK_MLP_HIDDEN) && !defined(PK_MLP_RUNTIME_WIDTH)
#define PK_MLP_RUNTIME_WIDTH 1
#endif
#include "pk_common.cuh"

// out[i] = MLP(obs[i]) in float32, obs cast to float first; obs_dim, hidden, out_dim <= PK_MLP_MAX.
extern "C" __global__ PK_MLP_KERNEL void pk_mlp_forward(const float *__restrict__ policy, int hidden, int obs_dim,
                                                        int out_dim, const REAL *__restrict__ obs,
                                                        float *__restrict__ out, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
#ifdef PK_MLP_HIDDEN
    // The fixed-width MLP of pk_policy.cuh with its widths known only at launch: the first layer reads each
    // input straight from obs, and the outputs leave PK_MLP_OUTS at a time (the second layer made once a
    // pass), so nothing is indexed at run time and every activation stays in registers.
    (void)hidden;  // the host builds with the width it launches with
    float h1[PK_MLP_HIDDEN];
    pk_mlp_h1_init(h1);
    for (int k = 0; k < obs_dim; ++k) pk_mlp_h1_add(h1, policy, k, (float)obs[(size_t)i * obs_dim + k]);
    pk_mlp_h1_end(h1, policy + obs_dim * PK_MLP_HIDDEN);
    const float *w2 = policy + obs_dim * PK_MLP_HIDDEN + PK_MLP_HIDDEN;
    for (int o0 = 0; o0 < out_dim; o0 += PK_MLP_OUTS) {
        float y[PK_MLP_OUTS];
        pk_mlp_tail<PK_MLP_OUTS>(w2, out_dim, o0, h1, y);
#pragma unroll
        for (int o = 0; o < PK_MLP_OUTS; ++o)
            if (o0 + o < out_dim) out[(size_t)i * out_dim + o0 + o] = y[o];
    }
#else
    // the run-time-width build (PK_MLP_RUNTIME_WIDTH)
    float x[PK_MLP_MAX], y[PK_MLP_MAX];
    for (int k = 0; k < obs_dim; ++k) x[k] = (float)obs[(size_t)i * obs_dim + k];
    pk_mlp_rt(policy, hidden, obs_dim, out_dim, x, y);
    for (int j = 0; j < out_dim; ++j) out[(size_t)i * out_dim + j] = y[j];
#endif
}
