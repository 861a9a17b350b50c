"""The CPU pack: upstream megatron-core trains on a machine with no accelerator.

Registered for ``vendor="cpu"``: chosen where no accelerator is detected, or with
``MG_FL_PREFER=cpu``. ``registry.py`` lists every patch; each impl's docstring says
why it is needed (the upstream line that assumes CUDA), how it works, and when it
can be dropped.
"""
