// Pendulum-v1 (envs/pendulum.py): torque terms in float32 in every build, as Gymnasium computes them.
#include "pk_common.cuh"

// Params, D, O, Act, ACTIONS and ACT_HIGH: pk_<kernel>_shape, generated from the EnvSpec (pk_params.h).
struct PkPendulum : pk_pendulum_shape {
    __device__ static void reset(const REAL sym[4], const pk_pendulum_params *__restrict__ p, REAL s[2]) {
        s[0] = p->x_init * sym[0];
        s[1] = p->y_init * sym[1];
    }

    // np.remainder(x + pi, 2 pi) - pi: fmod (exact) with NumPy's sign fix-up for Python's modulo.
    __device__ static REAL angle_normalize(REAL x, REAL pi, REAL two_pi) {
        REAL m = fmod(x + pi, two_pi);
        if (m != (REAL)0.0) {
            if ((two_pi < (REAL)0.0) != (m < (REAL)0.0)) m += two_pi;
        } else {
            m = copysign((REAL)0.0, two_pi);
        }
        return m - pi;
    }

    __device__ static void step(REAL s[2], float action, const pk_pendulum_params *__restrict__ p, REAL &reward,
                                bool &term) {
        const REAL th = s[0], thdot = s[1];
        const float max_torque = (float)p->max_torque;
        const float u = pk_clip(action, -max_torque, max_torque);
        const REAL u_cost = (REAL)(0.001f * (u * u));
        const REAL u_acc = (REAL)((float)p->torque_coef * u);
        const REAL an = angle_normalize(th, p->pi, p->two_pi);
        const REAL costs = an * an + (REAL)(0.1) * (thdot * thdot) + u_cost;
        REAL newthdot = thdot + (p->grav_coef * pk_sin(th) + u_acc) * p->dt;
        newthdot = pk_clip(newthdot, -p->max_speed, p->max_speed);
        s[0] = th + newthdot * p->dt;
        s[1] = newthdot;
        reward = -costs;
        term = false;
    }

    __device__ static void observe(const REAL s[2], REAL o[3]) {
        o[0] = pk_cos(s[0]);
        o[1] = pk_sin(s[0]);
        o[2] = s[1];
    }
};

PK_ENV_KERNELS(pendulum, PkPendulum)
