"""Impls for act_check_reexport: each calls upstream's."""

import fl_patch


def apply_rotary_pos_emb(*args, **kwargs):
    return fl_patch.original("megatron.core.models.common.embeddings.rope_utils.apply_rotary_pos_emb")(*args, **kwargs)


def cross_entropy(*args, **kwargs):
    return fl_patch.original("megatron.core.tensor_parallel.cross_entropy.vocab_parallel_cross_entropy")(
        *args, **kwargs
    )


def set_input_tensor(self, input_tensor):
    return fl_patch.original("megatron.core.models.gpt.gpt_model.GPTModel.set_input_tensor")(self, input_tensor)
