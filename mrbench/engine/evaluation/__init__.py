"""Evaluation: a model evaluated on a task as every cell evaluates it (greedy generation, lm-eval
or the episode runner), the pre-training evaluation cached per (model, task, split), extra
evaluation datasets of a sweep, and ``mrbench score`` of completions given as a file."""
