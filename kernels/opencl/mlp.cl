/* The MLP policy's forward pass on its own (pk_mlp_forward): the code the fused rollouts run. */
#include "pk_common.h"
#include "pk_policy.h"

/* out[i] = MLP(obs[i]) in float32, obs cast to float first; obs_dim, out_dim <= PK_MLP_MAX. */
__kernel PK_MLP_SIMD PK_MLP_AMD_WAVES void pk_mlp_forward(__global const float *restrict policy, int hidden, int obs_dim,
                                           int out_dim, __global const REAL *obs, __global float *out,
                                           int n)
{
    const int base = get_global_id(0) * PK_VW;
    if (base >= n)
        return;
    const int lanes = min(PK_VW, n - base);
#ifdef PK_MLP_HIDDEN
    /* The fixed-width MLP of pk_policy.h with its widths known only at launch: the first layer reads each
     * input straight from obs, and the outputs leave PK_MLP_OUTS at a time (the second layer made once a
     * pass), so nothing is indexed at run time and every activation stays in registers. */
    FV h1[PK_MLP_HIDDEN];
    pk_mlp_h1_init(h1);
    for (int k = 0; k < obs_dim; ++k) {
#if PK_VW == 1
        const FV xk = (float)obs[(size_t)base * obs_dim + k];
#else
        float t[PK_VW];
        for (int l = 0; l < PK_VW; ++l)
            t[l] = l < lanes ? (float)obs[(size_t)(base + l) * obs_dim + k] : 0.0f;
        const FV xk = PK_CAT(vload, PK_VW)(0, t);
#endif
        pk_mlp_h1_add(h1, policy, k, xk);
    }
    pk_mlp_h1_end(h1, policy + obs_dim * PK_MLP_HIDDEN);
    __global const float *w2 = policy + obs_dim * PK_MLP_HIDDEN + PK_MLP_HIDDEN;
    for (int o0 = 0; o0 < out_dim; o0 += PK_MLP_OUTS) {
        FV y[PK_MLP_OUTS];
        pk_mlp_tail(w2, out_dim, o0, h1, y);
#pragma unroll
        for (int o = 0; o < PK_MLP_OUTS; ++o) {
            if (o0 + o >= out_dim)
                break;
#if PK_VW == 1
            out[(size_t)base * out_dim + o0 + o] = y[o];
#else
            float t[PK_VW];
            PK_CAT(vstore, PK_VW)(y[o], 0, t);
            for (int l = 0; l < lanes; ++l)
                out[(size_t)(base + l) * out_dim + o0 + o] = t[l];
#endif
        }
    }
#else
    /* the run-time-width build (PK_MLP_RUNTIME_WIDTH) */
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
        for (int l = 0; l < lanes; ++l)
            out[(size_t)(base + l) * out_dim + j] = t[l];
    }
#endif
}
