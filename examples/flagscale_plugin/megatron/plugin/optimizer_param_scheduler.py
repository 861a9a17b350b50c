"""Plugin replacement of megatron.core.optimizer_param_scheduler.OptimizerParamScheduler.

A Warmup-Stable-Decay schedule (the seed's WSDScheduler) as a subclass of the
original, so ``isinstance(scheduler, OptimizerParamScheduler)`` still holds and
every caller that builds an ``OptimizerParamScheduler`` gets this one. Relative to
``max_lr``: linear warmup over ``lr_warmup_steps``, constant until 90% of
``lr_decay_steps``, then halving every 10% of ``lr_decay_steps``, floored at ``min_lr``.
"""

from megatron.core.optimizer_param_scheduler import OptimizerParamScheduler


class WSDScheduler(OptimizerParamScheduler):
    """Warmup-Stable-Decay learning rate; weight decay as upstream."""

    def get_lr(self, param_group):
        max_lr = param_group.get("max_lr", self.max_lr)
        min_lr = param_group.get("min_lr", self.min_lr)
        step = self.num_steps
        warmup_steps = self.lr_warmup_steps
        max_steps = self.lr_decay_steps
        if step < warmup_steps:
            # Warmup phase
            return max_lr * (step / warmup_steps)
        if step < max_steps * 0.9:
            # Stable phase
            return max_lr
        # Decay phase
        decay_progress = (step - max_steps * 0.9) / (max_steps * 0.1)
        return max(min_lr, max_lr * (0.5**decay_progress))
