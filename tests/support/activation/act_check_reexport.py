"""Targets that name megatron functions and classes where they are re-exported, not defined (``--check``)."""

from fl_patch import register

_ROPE = "megatron.core.models.common.embeddings"
# a re-export alone: rope_utils defines it, attention.py imports it from there
register(f"{_ROPE}.rotary_pos_embedding.apply_rotary_pos_emb", "act_check_reexport_impls.apply_rotary_pos_emb")
# a re-export registered with its home: deliberate, nothing said
register("megatron.core.tensor_parallel.vocab_parallel_cross_entropy", "act_check_reexport_impls.cross_entropy")
register(
    "megatron.core.tensor_parallel.cross_entropy.vocab_parallel_cross_entropy", "act_check_reexport_impls.cross_entropy"
)
# a method of a class named where it is re-exported: the class is shared, the method reaches every caller
register("megatron.core.models.gpt.GPTModel.set_input_tensor", "act_check_reexport_impls.set_input_tensor")
