"""The definitions section of every report: what each figure and word in it means."""

from __future__ import annotations

from .. import metrics
from ..training.mixes import MIX_EXCLUDED

DEFINITIONS = {
    "throughput": "T = items per launch / the median over the case's interleaved rounds of the seconds per "
                  "launch (each round: enough back-to-back synchronised launches to last a few ms); items are "
                  "env steps, buffer elements or gathered rows. Runs of schema 1 (before interleaving): the best "
                  "(minimum) time, no interval. Compared between backends on one device (the efficiency "
                  "tables), and between devices at one common size (the cross-device section).",
    "interleaved rounds": "every case of one comparison kernel (a kernel, or all three data paths of one rollout) "
                          "at one size on one piece of hardware - every backend, driver and knob configuration - "
                          "is timed in the same rounds: each round runs every case's launches in short runs "
                          "spread evenly over the round, in an order shuffled every round, so a shared machine's "
                          "drift hits them alike. A group's rounds come in visits spread over the run (one at the "
                          "first test of each of its backends and drivers, at most 3), so they sample the run's "
                          "changing load rather than one moment of it.",
    "interval": metrics.INTERVAL_METHOD,
    "within noise": "two results are ranked only when the interval of their paired per-round ratio lies wholly "
                    "above or below 1 (\"faster\"/\"slower\", \"beyond noise\"); otherwise they are within noise "
                    "of each other and no winner is named. An application efficiency whose interval reaches "
                    "100% is within noise of the best.",
    "indicative run": "a `--quick` run (small sizes, few rounds, short slots): its figures show the shape, and "
                      "its intervals are wide; act on a full run.",
    "device": "hardware plus driver: an OpenCL platform is part of the device, so one CPU under PoCL and under "
              "Intel's runtime is two devices (same hardware, different driver). Backends without a driver layer "
              "(NumPy and torch on the host CPU; CuPy, Numba and torch on an NVIDIA GPU) run on the hardware "
              "itself and are compared on every driver-device of that hardware (listed under 'includes'), so "
              "each driver-device's efficiencies have them beside it; hardware with no driver-device is a "
              "device of its own. The kind (cpu, gpu, accelerator) is what the backend's API reports.",
    "cross-device ratio": "T(k, best backend, d) / T(k, best backend, fastest device) at the largest size every "
                          "device measured (a workload: W with the fastest implementation of each phase on any "
                          "device as its reference, so devices share one unit of work). Paired (per-round ratios, "
                          "as within a device) when both ran in the same interleaved rounds, i.e. on one "
                          "machine; across machines unpaired: [lo_a / hi_b, hi_a / lo_b] of the two throughput "
                          "intervals, wider. Host frameworks (NumPy, torch on the CPU) are one device there, the "
                          "host, listed once.",
    "cost per 1e6 env steps": "price per device-hour (portkern report --price DEVICE=RATE) x 1e6 / (env-steps/s "
                              "of the workload x 3600); its interval from the env-steps/s interval.",
    "functional portability": "share of the kernels in these runs that build, run and pass parity against the "
                              "NumPy reference on that device (the 9 step and buffer kernels, and rollout:<env> "
                              "once per env: it passes only when every data path and policy of that env passes); "
                              "fail, unsupported and not run count 0.",
    "application efficiency": "e(k,b,d) = T(k,b,d) / T(k,best,d), best = the backend with the highest T for k on "
                              "d, at the largest size every passing backend on d measured; 0 when k fails or does "
                              "not run. Interval: per round, T_r(k,b,d) / T_r(k,best,d).",
    "performant portability ratio": "T(k,b,d) / T(k,baseline,d); baseline = the native backend (CUDA via CuPy, "
                                    "else Numba-CUDA, on NVIDIA); on a device with no native backend, the best "
                                    "backend measured on d for that kernel (there ratio = application efficiency).",
    "architectural efficiency": "compulsory bytes/s (each array read or written once) / the device's copy bandwidth "
                                "(read+write bytes/s of a large device-to-device copy measured in the same run), "
                                "clipped to 1 (above 1 the working set stays in cache).",
    "PP": "Pennycook, Sewall & Lee 2016: harmonic mean of application efficiency over every device in the runs; 0 "
          "when the backend fails or does not run on any of them. Interval: the harmonic mean per round.",
    "workload": "phases i with time shares w_i (summing to 1) on the device's reference, the fastest measured "
                "implementation of each phase there. A backend's workload throughput is W(b) = 1 / sum_i(w_i x "
                "T(i,fastest) / T(i,b)) (0 if a phase does not run), the same formula per round for the interval. "
                "ratio = W(b) / W(baseline), baseline as for kernels (native, else the backend with the highest "
                "W); throughput penalty p = 1 - ratio; app. eff. = W(b) / max W, the figure the PP table "
                "averages. Ratio and app. eff. are the same number unless a native baseline is slower than the "
                "best backend. The default mixes train:<task> are measured: the shares of portkern's kernel "
                "phases (step:<task> = env stepping, gae = advantages, normalize and gather = those parts of the "
                "update) in the wall time of `portkern train` runs of one stack (portkern/data/workload_mixes.json "
                "names the file, stack and seeds), renormalised to sum 1; the covered share (their sum before "
                f"renormalising) is given beside each table. Left out: {MIX_EXCLUDED}.",
    "throughput penalty": "p = 1 - ratio, per kernel and per workload (negative when the port is faster).",
    "stack class": "how deep a stack's kernels go (docs/ARCHITECTURE.md): framework eager (NumPy, torch), framework compiled "
                   "(torch.compile), custom kernels (OpenCL, CuPy, Numba; one launch per step), fused custom "
                   "(fused rollouts of custom-kernel backends); classed per backend by the benchmark (portkern.identity.BENCH_CLASSES) "
                   "and recorded per case.",
    "spectrum": "per device and kernel (rollouts: all three data paths of one env and policy together), the best "
                "throughput each stack class reached, and its ratio to the best class, with the per-round interval.",
    "re-tune penalty": "1 - T(config tuned on source, run on target) / T(best config found on target), T the "
                       "throughput at the target's tuning size; in [0, 1) when the source's config runs on the "
                       "target, 1 (marked) when it cannot. Interval: 1 - the per-round ratio of the two "
                       "configurations, timed in the same interleaved rounds on the target; \"within noise\" "
                       "when it reaches 0 (the source's configuration is not slower beyond noise).",
    "data paths": "one rollout of T steps of N envs with a policy choosing actions (VectorEnv.rollout), three ways: "
                  "host = the obs come back to the host every step, the policy runs there (NumPy) and the "
                  "actions go down; device = the env state stays on the device, one kernel launch per step "
                  "with the policy in the kernel; fused = the policy inside the env kernel, up to "
                  "steps_per_launch steps per launch (default all T). Parity: the host path against the NumPy "
                  "reference; the device and fused paths against the host path's buffer on the same device, "
                  "every field bit for bit with the random policy (torch_compile, whose compiled paths round differently: "
                  "floats to the float32 tolerance for the first 3 steps, then within 1e-3, flags exactly). "
                  "The three paths of one (env, policy, N) are "
                  "one interleaved group, so path factors are paired. The table compares the paths at the "
                  "largest N all three passed, each at its best configuration in a tune run. In the efficiency "
                  "and PP tables each rollout:<env>:<path>[:mlp] is its own kernel (backends compared path for "
                  "path); in the functional matrix the paths of one env count as one kernel rollout:<env>; "
                  "rollouts are in no default workload mix (their env stepping would count twice next to the "
                  "step phase).",
    "env-steps/s": "N x T / the median time of one rollout, which ends with a device synchronise.",
    "device-hours per 1e9 steps": "1e9 / env-steps/s / 3600: GPU-hours per billion env steps on a GPU; on a CPU "
                                  "device, hours of the whole processor (every core the backend uses).",
    "path factor": "env-steps/s of the fused (or device) path / the host path's, same backend, device, env, "
                   "policy and N; the stack spread is the fastest (backend, path) / the slowest on one device.",
}  # fmt: skip
