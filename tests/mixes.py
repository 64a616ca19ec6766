"""The hand-written workload mixes that were the defaults before the measured ones
(portkern/data/workload_mixes.json), fixed here so the tests of the workload arithmetic do not move when the
shipped mixes are re-derived."""

HAND_MIXES = {
    "physics-heavy": {"step:Acrobot-v1": 0.80, "gae": 0.10, "normalize": 0.05, "gather": 0.05},
    "update-heavy": {"step:CartPole-v1": 0.20, "gae": 0.25, "discounted_returns": 0.05, "normalize": 0.20,
                     "gather": 0.30},
}  # fmt: skip
