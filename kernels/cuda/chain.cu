// Chain-v0 (envs/chain.py, physics in envs/_chain_model.py): a planar chain of K links, MuJoCo's RK4 over
// the articulated-body algorithm, FRAME_SKIP steps per env step, a K-wide Box action.
// K is PK_LINKS, a compile-time constant (EnvSpec.define_options gives -DPK_LINKS=K): every loop over the
// links has a fixed trip count and unrolls into straight-line code over per-link private arrays.
// Every sine here comes with the cosine of the same angle: one sincos shares the argument reduction
// (long, and inlined at every call) that separate sin and cos calls would each repeat.
#ifndef PK_LINKS
#define PK_LINKS 3  // the env's default, so the file also builds on its own
#endif
// The MLP rollout's occupancy attributes (pk_policy.cuh) are measured at the default 3 links; past that the
// per-link quantities need more than 128 registers and held there the rollout spilled (329-778 at 10 links).
#if PK_LINKS > 3
#define ENV_MLP_OWN_WAVES 1
#endif
#include "pk_common.cuh"

static_assert(PK_LINKS >= 2 && PK_LINKS <= 16, "PK_LINKS: Chain-v0 has 2 to 16 links");

// Params, Act, ACTIONS and ACT_HIGH: pk_chain_shape, generated from the EnvSpec (pk_params.h).
struct PkChain : pk_chain_shape {
    static constexpr int K = PK_LINKS;
    static constexpr int D = 2 * K, O = 3 * K + 2;
    static constexpr int A = K;        // one control per joint: [N, K] actions
    static constexpr int FRAME_SKIP = 5;

    // Joint j takes draw j % 4: a reset has one Philox block per env.
    __device__ static void reset(const REAL sym[4], const pk_chain_params *__restrict__ p, REAL s[D]) {
#pragma unroll
        for (int j = 0; j < K; ++j) {
            s[j] = p->reset_noise * sym[j % 4];
            s[K + j] = (REAL)0.0;
        }
    }

    // _chain_model._qacc_aba, operation for operation: the inward pass builds each sub-chain's
    // articulated inertia (a b c / d e f, the upper triangle) and bias force (p0 p1 p2) referred to its
    // hinge, the outward pass the joint accelerations. The reference's "zero" (0 * ex[0]) only sets the
    // sign of exact zeros (a link's own e and p0, the base's alpha and a_x; own + zero is own and
    // mass + zero is mass exactly), so plain zeros stand for it. w_i^2, and the torques gear * u (in
    // step), are computed once and reused: the same values the reference recomputes.
    __device__ static void qacc(const REAL q[K], const REAL v[K], const REAL tau[K],
                                const pk_chain_params *__restrict__ p, REAL out[K]) {
        const REAL length = p->link_length, mass = p->link_mass, com = p->link_com;
        const REAL mcom = mass * com;
        const REAL own = p->link_inertia + mass * com * com;
        REAL ex[K], ez[K], w2[K];
        REAL phi = q[0], wi = v[0];
#pragma unroll
        for (int j = 0; j < K; ++j) {  // _kinematics: absolute angles and angular velocities
            if (j > 0) {
                phi = phi + q[j];
                wi = wi + v[j];
            }
            REAL sn, cs;
            pk_sincos(phi, &sn, &cs);
            ex[j] = -sn;
            ez[j] = -cs;
            w2[j] = wi * wi;
        }
        REAL ua[K], ub[K], uc[K], uu[K];  // U = IA s (ua = D too) and u = tau - s^T pA of each hinge
        REAL ca = 0, cb = 0, cc = 0, cd = 0, ce = 0, cf = 0, q0 = 0, q1 = 0, q2 = 0;  // the child's Ia, pa
#pragma unroll
        for (int i = K - 1; i >= 0; --i) {  // inward
            const REAL mdx = mcom * ex[i], mdz = mcom * ez[i];
            REAL a = own, b = mdz, c = -mdx, d = mass, e = (REAL)0.0, f = mass;
            REAL p0 = (REAL)0.0, p1 = -w2[i] * mdx, p2 = -w2[i] * mdz;
            if (i < K - 1) {
                const REAL rx = length * ex[i], rz = length * ez[i];
                const REAL cx = -w2[i] * rx, cz = -w2[i] * rz;
                q0 = q0 + cb * cx + cc * cz;
                q1 = q1 + cd * cx + ce * cz;
                q2 = q2 + ce * cx + cf * cz;
                const REAL col_a = ca + cb * rz - cc * rx;
                const REAL col_b = cb + cd * rz - ce * rx;
                const REAL col_c = cc + ce * rz - cf * rx;
                a = a + (col_a + rz * col_b - rx * col_c);
                b = b + col_b;
                c = c + col_c;
                d = d + cd;
                e = e + ce;
                f = f + cf;
                p0 = p0 + (q0 + rz * q1 - rx * q2);
                p1 = p1 + q1;
                p2 = p2 + q2;
            }
            const REAL inv_d = (REAL)1.0 / a;
            const REAL ui = tau[i] - p0;
            ua[i] = a;
            ub[i] = b;
            uc[i] = c;
            uu[i] = ui;
            const REAL ud = ui * inv_d;
            ca = a - a * a * inv_d;
            cb = b - a * b * inv_d;
            cc = c - a * c * inv_d;
            cd = d - b * b * inv_d;
            ce = e - b * c * inv_d;
            cf = f - c * c * inv_d;
            q0 = p0 + a * ud;
            q1 = p1 + b * ud;
            q2 = p2 + c * ud;
        }
        REAL alpha = (REAL)0.0, ax = (REAL)0.0, az = p->gravity;  // the base, accelerating up at g
#pragma unroll
        for (int i = 0; i < K; ++i) {  // outward
            if (i > 0) {
                const REAL rx = length * ex[i - 1], rz = length * ez[i - 1];
                ax = ax + alpha * rz - w2[i - 1] * rx;
                az = az - alpha * rx - w2[i - 1] * rz;
            }
            const REAL qdd = (uu[i] - (ua[i] * alpha + ub[i] * ax + uc[i] * az)) / ua[i];
            alpha = alpha + qdd;
            out[i] = qdd;
        }
    }

    // _chain_model._rk4: MuJoCo's RK4 (stage s starts from X0 + h A[s] (v, a) of stage s - 1; qvel
    // advances by dv * h, qpos by h * dq with the stages' velocities). The B-weighted sums are kept
    // running, in the reference's order: stage 0's term first, then stages 1, 2, 3. The four stages are
    // one loop around one articulated-body pass, so the pass is compiled once (its sincos inline long).
    __device__ static void rk4(REAL q[K], REAL v[K], const REAL tau[K], const pk_chain_params *__restrict__ p) {
        const REAL h = p->dt;
        const REAL b0 = (REAL)(1.0 / 6.0), b1 = (REAL)(1.0 / 3.0);
        REAL qi[K], vs[K], fs[K], dq[K], dv[K];
#pragma unroll 1
        for (int s = 0; s < 4; ++s) {
            if (s == 0) {
#pragma unroll
                for (int j = 0; j < K; ++j) {
                    qi[j] = q[j];
                    vs[j] = v[j];
                }
            } else {
                const REAL a = s < 3 ? (REAL)0.5 : (REAL)1.0;  // _RK4_A[s - 1]
#pragma unroll
                for (int j = 0; j < K; ++j) {
                    qi[j] = q[j] + h * (vs[j] * a);
                    vs[j] = v[j] + (fs[j] * a) * h;
                }
            }
            qacc(qi, vs, tau, p, fs);
            const REAL b = s == 0 || s == 3 ? b0 : b1;  // _RK4_B[s]
#pragma unroll
            for (int j = 0; j < K; ++j) {
                dq[j] = s == 0 ? vs[j] * b : dq[j] + vs[j] * b;
                dv[j] = s == 0 ? fs[j] * b : dv[j] + fs[j] * b;
            }
        }
#pragma unroll
        for (int j = 0; j < K; ++j) {
            q[j] = q[j] + h * dq[j];
            v[j] = v[j] + dv[j] * h;
        }
    }

    // chain.tip: the mean of the links' unit vectors, (x, z) over the reach.
    __device__ static void tip(const REAL q[K], REAL &x, REAL &z) {
        REAL phi = q[0], sn, cs;
        pk_sincos(phi, &sn, &cs);
        x = -sn;
        z = -cs;
#pragma unroll
        for (int j = 1; j < K; ++j) {
            phi = phi + q[j];
            pk_sincos(phi, &sn, &cs);
            x = x - sn;
            z = z - cs;
        }
        x = x / (REAL)K;
        z = z / (REAL)K;
    }

    __device__ static void step(REAL s[D], const pk_box<K> &action, const pk_chain_params *__restrict__ p,
                                REAL &reward, bool &term) {
        REAL u[K], tau[K];
#pragma unroll
        for (int j = 0; j < K; ++j) {
            // ctrllimited's clip, in the state's dtype (env_step's second clip is a no-op on these).
            u[j] = pk_clip((REAL)action.v[j], (REAL)-1.0, (REAL)1.0);
            tau[j] = p->gear * u[j];
        }
#pragma unroll 1
        for (int f = 0; f < FRAME_SKIP; ++f) rk4(s, s + K, tau, p);
        REAL x, height;
        tip(s, x, height);
        REAL effort = u[0] * u[0];
#pragma unroll
        for (int j = 1; j < K; ++j) effort = effort + u[j] * u[j];
        reward = (height - (REAL)1.0) - p->ctrl_cost * effort;
        term = height >= p->target_height;
    }

    __device__ static void observe(const REAL s[D], REAL o[O]) {
#pragma unroll
        for (int j = 0; j < K; ++j) {
            pk_sincos(s[j], &o[K + j], &o[j]);  // the obs holds the K cosines, then the K sines
            o[2 * K + j] = s[K + j];
        }
        tip(s, o[3 * K], o[3 * K + 1]);
    }
};

PK_ENV_KERNELS(chain, PkChain)
