"""Pretrain a GPT through ``megatron.training.pretrain``, the way Megatron-LM's ``pretrain_gpt.py`` does.

This is fl_patch's own script (nothing in it is fl_patch-specific, and it is not a copy
of Megatron-LM's file): it drives ``megatron.training`` exactly as ``pretrain_gpt.py`` of
the matching Megatron-LM release (tag ``core_v0.19.0``) does, so that the CPU pack's
``megatron.training`` patches are tested without shipping Megatron-LM's code:

- arguments: ``megatron.training.arguments.parse_and_validate_args`` (Megatron-LM's whole
  command line: ``--num-layers``, ``--tensor-model-parallel-size``, ``--save``, ...);
- the model: ``gpt_config_from_args`` + ``pretrain_cfg_container_from_args``, i.e. the
  ``megatron.training.models`` GPT builder (``pretrain_gpt.py``'s path); with
  ``--fl-model-provider``, a model provider function (``GPTModel``, local layer spec) handed
  to ``pretrain`` instead, the older path through ``training.get_model``;
- the batch: built on tensor-parallel rank 0, moved with ``tensor.cuda(non_blocking=True)``
  as ``pretrain_gpt.py`` does, broadcast with ``megatron.core.utils.get_batch_on_this_tp_rank``;
- the data: ``MockGPTDataset`` through ``BlendedMegatronDatasetBuilder`` (``--mock-data``);
- the loss: masked token sum, token count and ``{'lm loss': ...}`` report;
- ``inprocess_restart.maybe_wrap_for_inprocess_restart(pretrain)``, ``set_startup_timestamps``.

Checkpoints (``--save``) go through ``dist_checkpointing``, which starts a multiprocessing
``spawn`` child (it re-imports this script): fl_patch reaches it as it reaches every child.

On a machine without a GPU::

    MASTER_ADDR=localhost MASTER_PORT=6000 python -m fl_patch examples/pretrain_gpt_cpu.py \\
        --mock-data --transformer-impl local --tokenizer-type NullTokenizer --vocab-size 128 \\
        --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 64 \\
        --max-position-embeddings 64 --micro-batch-size 2 --global-batch-size 4 \\
        --train-iters 20 --lr 1e-3 --eval-interval 10 --eval-iters 2
    python -m fl_patch -m torch.distributed.run --standalone --nproc-per-node 2 \\
        examples/pretrain_gpt_cpu.py ... --tensor-model-parallel-size 2

``--fl-log-file FILE`` (this script's only own option besides ``--fl-model-provider``)
appends one JSON line per micro-batch loss this rank computes: iteration, train or eval,
loss per token; and, with ``--fl-model-provider``, one line saying whether the CPU random
generator was, when the model was built, in exactly the state the seed put it in.
"""

from __future__ import annotations

import argparse
import json
import time

_PROGRAM_START_TIME = time.time()

from functools import partial  # noqa: E402
from importlib.metadata import version as _version  # noqa: E402
from typing import Any  # noqa: E402

import torch  # noqa: E402
from packaging.version import Version  # noqa: E402

if Version(_version("megatron-core")).release < (0, 19):  # 0.19's megatron.training API: say so, not ImportError
    import sys

    sys.exit(
        f"pretrain_gpt_cpu.py follows Megatron-LM core_v0.19.0's pretrain_gpt.py and needs megatron-core >= 0.19 "
        f"(installed: {_version('megatron-core')}); on this release run that release's own pretrain_gpt.py "
        "(docs/versions.md)"
    )
from megatron.core import mpu  # noqa: E402
from megatron.core.datasets.blended_megatron_dataset_builder import BlendedMegatronDatasetBuilder  # noqa: E402
from megatron.core.datasets.gpt_dataset import GPTDatasetConfig, MockGPTDataset  # noqa: E402
from megatron.core.enums import ModelType  # noqa: E402
from megatron.core.models.gpt import GPTModel  # noqa: E402
from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec  # noqa: E402
from megatron.core.tokenizers.utils.build_tokenizer import build_tokenizer  # noqa: E402
from megatron.core.utils import get_batch_on_this_tp_rank  # noqa: E402
from megatron.training import (  # noqa: E402
    get_args,
    inprocess_restart,
    pretrain,
    print_rank_0,
    set_startup_timestamps,
)
from megatron.training.argument_utils import gpt_config_from_args, pretrain_cfg_container_from_args  # noqa: E402
from megatron.training.arguments import core_transformer_config_from_args, parse_and_validate_args  # noqa: E402

BATCH_KEYS = ("tokens", "labels", "loss_mask", "attention_mask", "position_ids")


def add_script_args(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    group = parser.add_argument_group("pretrain_gpt_cpu.py")
    group.add_argument("--fl-log-file", default=None, help="append one JSON line per micro-batch loss (this rank)")
    group.add_argument(
        "--fl-model-provider",
        action="store_true",
        help="hand pretrain() a model provider function instead of a GPT model config",
    )
    return parser


def _log(record: dict[str, Any]) -> None:
    path = get_args().fl_log_file
    if path:
        record = {"rank": torch.distributed.get_rank(), **record}
        with open(path, "a") as out:
            out.write(json.dumps(record) + "\n")


def model_provider(
    pre_process: bool = True,
    post_process: bool = True,
    vp_stage: int | None = None,
    config: Any = None,
    pg_collection: Any = None,
) -> GPTModel:
    """A GPT with megatron-core's local layer spec (``--fl-model-provider``)."""
    args = get_args()
    seeded = torch.Generator().manual_seed(args.seed + 100 * mpu.get_pipeline_model_parallel_rank())
    _log({"event": "model_build", "rng_as_seeded": bool(torch.equal(torch.get_rng_state(), seeded.get_state()))})
    config = config if config is not None else core_transformer_config_from_args(args)
    return GPTModel(
        config=config,
        transformer_layer_spec=get_gpt_layer_local_spec(normalization=config.normalization),
        vocab_size=args.padded_vocab_size,
        max_sequence_length=args.max_position_embeddings,
        pre_process=pre_process,
        post_process=post_process,
        parallel_output=True,
        share_embeddings_and_output_weights=not args.untie_embeddings_and_output_weights,
        position_embedding_type=args.position_embedding_type,
        vp_stage=vp_stage,
        pg_collection=pg_collection,
    )


def get_batch(data_iterator: Any) -> dict[str, torch.Tensor | None]:
    """Tensor-parallel rank 0 reads and moves the batch to "the GPU"; the others receive it."""
    args = get_args()
    batch: dict[str, Any] = {}
    if mpu.get_tensor_model_parallel_rank() == 0:
        batch = next(data_iterator)
        batch = {key: batch[key].cuda(non_blocking=True) if batch.get(key) is not None else None for key in BATCH_KEYS}
    return get_batch_on_this_tp_rank(
        batch,
        has_cu_seqlens=False,
        is_hybrid_cp=False,
        create_attention_mask_in_dataloader=args.create_attention_mask_in_dataloader,
        broadcast_src_rank=mpu.get_tensor_model_parallel_src_rank(),
        broadcast_group=mpu.get_tensor_model_parallel_group(),
        cp_size=args.context_parallel_size,
        tp_rank=mpu.get_tensor_model_parallel_rank(),
        micro_batch_size=args.micro_batch_size,
        seq_length=args.seq_length,
        mtp_on_this_rank=False,
        pipeline_model_parallel_size=args.pipeline_model_parallel_size,
        is_pipeline_first_stage=mpu.is_pipeline_first_stage(),
        is_pipeline_last_stage=mpu.is_pipeline_last_stage(),
    )


def loss_func(
    loss_mask: torch.Tensor, training: bool, output_tensor: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
    """Masked token-loss sum, the number of tokens, and the report ``pretrain`` averages."""
    losses = output_tensor.view(-1).float()
    mask = loss_mask.view(-1).float()
    loss = torch.sum(losses * mask)
    num_tokens = mask.sum().clone().detach().to(torch.int)
    _log(
        {
            "event": "loss",
            "iteration": get_args().curr_iteration,
            "train": training,
            "loss": loss.item() / max(1, num_tokens.item()),
        }
    )
    return loss, num_tokens, {"lm loss": torch.cat([loss.clone().detach().view(1), num_tokens.view(1)])}


def forward_step(data_iterator: Any, model: torch.nn.Module) -> tuple[torch.Tensor, Any]:
    batch = get_batch(data_iterator)
    output = model(
        batch["tokens"],
        batch["position_ids"],
        batch["attention_mask"],
        labels=batch["labels"],
        loss_mask=batch["loss_mask"],
    )
    return output, partial(loss_func, batch["loss_mask"], model.training)


def train_valid_test_datasets_provider(num_samples: list[int], vp_stage: int | None = None) -> tuple[Any, Any, Any]:
    """Mock GPT data (``--mock-data``), built on tensor-parallel rank 0 only."""
    args = get_args()
    config = GPTDatasetConfig(
        random_seed=args.seed,
        sequence_length=args.seq_length,
        blend=None,
        split=args.split,
        tokenizer=build_tokenizer(args),
        reset_position_ids=args.reset_position_ids,
        reset_attention_mask=args.reset_attention_mask,
        eod_mask_loss=args.eod_mask_loss,
        create_attention_mask=args.create_attention_mask_in_dataloader,
    )
    print_rank_0("> building mock GPT datasets ...")
    return BlendedMegatronDatasetBuilder(
        MockGPTDataset, num_samples, lambda: mpu.get_tensor_model_parallel_rank() == 0, config
    ).build()


def main() -> None:
    set_startup_timestamps(program_start=_PROGRAM_START_TIME, main_entry=time.time())
    train_valid_test_datasets_provider.is_distributed = True  # type: ignore[attr-defined]
    run, store = inprocess_restart.maybe_wrap_for_inprocess_restart(pretrain)
    args = parse_and_validate_args(extra_args_provider=add_script_args)
    if args.fl_model_provider:
        container, provider = pretrain_cfg_container_from_args(args, None), model_provider
    else:
        container, provider = pretrain_cfg_container_from_args(args, gpt_config_from_args(args)), None
    run(
        container,
        train_valid_test_datasets_provider,
        ModelType.encoder_or_decoder,
        forward_step,
        model_provider=provider,
        store=store,
    )


if __name__ == "__main__":
    main()
