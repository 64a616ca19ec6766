/* The MLP policy's forward pass on its own (pk_mlp_forward): the code the fused rollouts run. */
#include "pk_common.h"
#include "pk_policy.h"

/* out[i] = MLP(obs[i]) in float32, obs cast to float first; obs_dim, out_dim <= PK_MLP_MAX. */
__kernel void pk_mlp_forward(__global const float *policy, int hidden, int obs_dim, int out_dim,
                             __global const REAL *obs, __global float *out, int n)
{
    const int base = get_global_id(0) * PK_VW;
    if (base >= n)
        return;
    RV o[PK_MLP_MAX];
    FV x[PK_MLP_MAX], y[PK_MLP_MAX];
    pk_ld_rows(obs, obs_dim, base, n, o);
    for (int k = 0; k < obs_dim; ++k)
        x[k] = PK_CONVERT(FV, o[k]);
    pk_mlp(policy, hidden, obs_dim, out_dim, x, y);
    float t[PK_VW];
    for (int j = 0; j < out_dim; ++j) {
#if PK_VW == 1
        t[0] = y[j];
#else
        PK_CAT(vstore, PK_VW)(y[j], 0, t);
#endif
        for (int l = 0; l < min(PK_VW, n - base); ++l)
            out[(size_t)(base + l) * out_dim + j] = t[l];
    }
}
