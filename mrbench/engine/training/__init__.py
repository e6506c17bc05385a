"""Training: TRL's ``GRPOTrainer`` with mrbench's advantage hook, the ``GRPOConfig`` of a RunSpec,
multi-turn rollouts as TRL's ``rollout_func``, the shared-prefix and CPU log-probability kernels,
and what a training run records per step (rewards, completions, advantage diagnostics)."""
