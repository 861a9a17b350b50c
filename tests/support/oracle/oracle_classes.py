"""Written by oracle_scan.py: where the oracle's class copies live, for pickle and for inspect.

Each copy (``oracle_impls.copy_class``) says its ``__module__`` is this one and its ``__qualname__``
its impl name. pickle finds it through ``__getattr__`` (which asks ``oracle_impls``, where it is
built and kept); ``inspect.getsource`` finds the top-level ``class`` statement of that name below,
as it finds a plugin's own class (upstream code reads the source of every class along a config's
``__bases__`` and parses it as it is). The stand-ins those statements make are deleted at the end,
so that every name reaches ``__getattr__``.
"""

import oracle_impls


def __getattr__(name: str) -> object:
    return getattr(oracle_impls, name)


class k_megatron_1core_1config_0logger_1JSONEncoderWithMcoreTypes:
    __slots__ = ()


class k_megatron_1core_1datasets_1bert_0dataset_1BERTMaskedWordPieceDatasetConfig:
    __slots__ = ()


class k_megatron_1core_1datasets_1bert_0dataset_1BERTMaskedWordPieceDataset:
    __slots__ = ()


class k_megatron_1core_1datasets_1blended_0dataset_1BlendedDataset:
    __slots__ = ()


class k_megatron_1core_1datasets_1blended_0megatron_0dataset_0builder_1BlendedMegatronDatasetBuilder:
    __slots__ = ()


class k_megatron_1core_1datasets_1blended_0megatron_0dataset_0config_1BlendedMegatronDatasetConfig:
    __slots__ = ()


class k_megatron_1core_1datasets_1data_0schedule_1HybridCPDataLoaderWrapper:
    __slots__ = ()


class k_megatron_1core_1datasets_1gpt_0dataset_1GPTDatasetConfig:
    __slots__ = ()


class k_megatron_1core_1datasets_1gpt_0dataset_1GPTDataset:
    __slots__ = ()


class k_megatron_1core_1datasets_1gpt_0dataset_1MockGPTLowLevelDataset:
    __slots__ = ()


class k_megatron_1core_1datasets_1gpt_0dataset_1MockGPTDataset:
    __slots__ = ()


class k_megatron_1core_1datasets_1indexed_0dataset_1DType:
    __slots__ = ()


class k_megatron_1core_1datasets_1indexed_0dataset_1_0IndexWriter:
    __slots__ = ()


class k_megatron_1core_1datasets_1indexed_0dataset_1_0IndexReader:
    __slots__ = ()


class k_megatron_1core_1datasets_1indexed_0dataset_1_0BinReader:
    __slots__ = ()


class k_megatron_1core_1datasets_1indexed_0dataset_1_0MMapBinReader:
    __slots__ = ()


class k_megatron_1core_1datasets_1indexed_0dataset_1_0FileBinReader:
    __slots__ = ()


class k_megatron_1core_1datasets_1indexed_0dataset_1_0S3BinReader:
    __slots__ = ()


class k_megatron_1core_1datasets_1indexed_0dataset_1_0MultiStorageClientBinReader:
    __slots__ = ()


class k_megatron_1core_1datasets_1indexed_0dataset_1IndexedDataset:
    __slots__ = ()


class k_megatron_1core_1datasets_1indexed_0dataset_1IndexedDatasetBuilder:
    __slots__ = ()


class k_megatron_1core_1datasets_1masked_0dataset_1MaskedWordPieceDatasetConfig:
    __slots__ = ()


class k_megatron_1core_1datasets_1masked_0dataset_1MaskedWordPieceDataset:
    __slots__ = ()


class k_megatron_1core_1datasets_1megatron_0dataset_1MegatronDataset:
    __slots__ = ()


class k_megatron_1core_1datasets_1multimodal_0dataset_1MultimodalDatasetConfig:
    __slots__ = ()


class k_megatron_1core_1datasets_1multimodal_0dataset_1MockMultimodalDataset:
    __slots__ = ()


class k_megatron_1core_1datasets_1object_0storage_0utils_1ObjectStorageConfig:
    __slots__ = ()


class k_megatron_1core_1datasets_1object_0storage_0utils_1S3Client:
    __slots__ = ()


class k_megatron_1core_1datasets_1t5_0dataset_1T5MaskedWordPieceDatasetConfig:
    __slots__ = ()


class k_megatron_1core_1datasets_1t5_0dataset_1T5MaskedWordPieceDataset:
    __slots__ = ()


class k_megatron_1core_1datasets_1utils_1Split:
    __slots__ = ()


class k_megatron_1core_1dist_0checkpointing_1core_1CheckpointingException:
    __slots__ = ()


class k_megatron_1core_1dist_0checkpointing_1core_1CheckpointingConfig:
    __slots__ = ()


class k_megatron_1core_1dist_0checkpointing_1exchange_0utils_1ShardDistribution:
    __slots__ = ()


class k_megatron_1core_1dist_0checkpointing_1gpt_0checkpoint_0interop_1GPTCompatLayerMaps:
    __slots__ = ()


class k_megatron_1core_1dist_0checkpointing_1mapping_1ShardedBase:
    __slots__ = ()


class k_megatron_1core_1dist_0checkpointing_1mapping_1ShardedTensor:
    __slots__ = ()


class k_megatron_1core_1dist_0checkpointing_1mapping_1LocalNonpersistentObject:
    __slots__ = ()


class k_megatron_1core_1dist_0checkpointing_1mapping_1ShardedObject:
    __slots__ = ()


class k_megatron_1core_1dist_0checkpointing_1mapping_1ShardedTensorFactory:
    __slots__ = ()


class k_megatron_1core_1dist_0checkpointing_1strategies_1async_0utils_1AsyncRequest:
    __slots__ = ()


class k_megatron_1core_1dist_0checkpointing_1strategies_1async_0utils_1AsyncCaller:
    __slots__ = ()


class k_megatron_1core_1dist_0checkpointing_1strategies_1async_0utils_1TemporalAsyncCaller:
    __slots__ = ()


class k_megatron_1core_1dist_0checkpointing_1strategies_1async_0utils_1PersistentAsyncCaller:
    __slots__ = ()


class k_megatron_1core_1dist_0checkpointing_1strategies_1async_0utils_1_0ActiveAsyncRequest:
    __slots__ = ()


class k_megatron_1core_1dist_0checkpointing_1strategies_1async_0utils_1AsyncCallsQueue:
    __slots__ = ()


class k_megatron_1core_1dist_0checkpointing_1strategies_1cached_0metadata_0filesystem_0reader_1CachedMetadataFileSystemReader:
    __slots__ = ()


class k_megatron_1core_1dist_0checkpointing_1strategies_1checkpointable_1CheckpointableShardedTensor:
    __slots__ = ()


class k_megatron_1core_1dist_0checkpointing_1strategies_1checkpointable_1LocalShardsContainer:
    __slots__ = ()


class k_megatron_1core_1dist_0checkpointing_1strategies_1filesystem_0async_1FileSystemWriterAsync:
    __slots__ = ()


class k_megatron_1core_1dist_0checkpointing_1strategies_1fully_0parallel_1FullyParallelSaveStrategyWrapper:
    __slots__ = ()


class k_megatron_1core_1dist_0checkpointing_1strategies_1fully_0parallel_1FullyParallelLoadStrategyWrapper:
    __slots__ = ()


class k_megatron_1core_1dist_0checkpointing_1strategies_1torch_1MCoreMetadata:
    __slots__ = ()


class k_megatron_1core_1dist_0checkpointing_1strategies_1torch_1MCoreSavePlan:
    __slots__ = ()


class k_megatron_1core_1dist_0checkpointing_1strategies_1torch_1MCoreSavePlanner:
    __slots__ = ()


class k_megatron_1core_1dist_0checkpointing_1strategies_1torch_1MCoreLoadPlanner:
    __slots__ = ()


class k_megatron_1core_1dist_0checkpointing_1strategies_1torch_1TorchDistSaveShardedStrategy:
    __slots__ = ()


class k_megatron_1core_1dist_0checkpointing_1strategies_1torch_1TorchDistLoadShardedStrategy:
    __slots__ = ()


class k_megatron_1core_1dist_0checkpointing_1tensor_0aware_0state_0dict_1MCoreTensorAwareStateDict:
    __slots__ = ()


class k_megatron_1core_1dist_0checkpointing_1validation_1StrictHandling:
    __slots__ = ()


class k_megatron_1core_1distributed_1data_0parallel_0base_1_0BaseDataParallel:
    __slots__ = ()


class k_megatron_1core_1distributed_1distributed_0data_0parallel_1DistributedDataParallel:
    __slots__ = ()


class k_megatron_1core_1distributed_1distributed_0data_0parallel_0config_1DistributedDataParallelConfig:
    __slots__ = ()


class k_megatron_1core_1distributed_1fsdp_1mcore_0fsdp_0adapter_1FullyShardedDataParallel:
    __slots__ = ()


class k_megatron_1core_1distributed_1fsdp_1src_1megatron_0fsdp_1distributed_0data_0parallel_0config_1DistributedDataParallelConfig:
    __slots__ = ()


class k_megatron_1core_1distributed_1fsdp_1src_1megatron_0fsdp_1experimental_1dbuffer_1_0OwnedRange:
    __slots__ = ()


class k_megatron_1core_1distributed_1fsdp_1src_1megatron_0fsdp_1experimental_1dbuffer_1DBuffer:
    __slots__ = ()


class k_megatron_1core_1distributed_1fsdp_1src_1megatron_0fsdp_1experimental_1indexed_0order_1IndexedOrder:
    __slots__ = ()


class k_megatron_1core_1distributed_1fsdp_1src_1megatron_0fsdp_1experimental_1layout_1GlobalLayout:
    __slots__ = ()


class k_megatron_1core_1distributed_1fsdp_1src_1megatron_0fsdp_1experimental_1module_1FsdpContext:
    __slots__ = ()


class k_megatron_1core_1distributed_1fsdp_1src_1megatron_0fsdp_1experimental_1module_1FsdpModule:
    __slots__ = ()


class k_megatron_1core_1distributed_1fsdp_1src_1megatron_0fsdp_1experimental_1parameter_0group_1FsdpParameterGroup:
    __slots__ = ()


class k_megatron_1core_1distributed_1fsdp_1src_1megatron_0fsdp_1experimental_1placement_1Placement:
    __slots__ = ()


class k_megatron_1core_1distributed_1fsdp_1src_1megatron_0fsdp_1experimental_1placement_1Replicate:
    __slots__ = ()


class k_megatron_1core_1distributed_1fsdp_1src_1megatron_0fsdp_1experimental_1placement_1Partial:
    __slots__ = ()


class k_megatron_1core_1distributed_1fsdp_1src_1megatron_0fsdp_1experimental_1placement_1Flat:
    __slots__ = ()


class k_megatron_1core_1distributed_1fsdp_1src_1megatron_0fsdp_1experimental_1placement_1Placements:
    __slots__ = ()


class k_megatron_1core_1distributed_1fsdp_1src_1megatron_0fsdp_1fully_0shard_1ShardingStrategy:
    __slots__ = ()


class k_megatron_1core_1distributed_1fsdp_1src_1megatron_0fsdp_1megatron_0fsdp_1TrainingState:
    __slots__ = ()


class k_megatron_1core_1distributed_1fsdp_1src_1megatron_0fsdp_1megatron_0fsdp_1MegatronFSDP:
    __slots__ = ()


class k_megatron_1core_1distributed_1fsdp_1src_1megatron_0fsdp_1megatron_0fsdp_1RegisterFSDPBackwardFunction:
    __slots__ = ()


class k_megatron_1core_1distributed_1fsdp_1src_1megatron_0fsdp_1mixed_0precision_1MixedPrecisionPolicy:
    __slots__ = ()


class k_megatron_1core_1distributed_1fsdp_1src_1megatron_0fsdp_1param_0and_0grad_0buffer_1TensorItemIndex:
    __slots__ = ()


class k_megatron_1core_1distributed_1fsdp_1src_1megatron_0fsdp_1param_0and_0grad_0buffer_1BucketIndex:
    __slots__ = ()


class k_megatron_1core_1distributed_1fsdp_1src_1megatron_0fsdp_1param_0and_0grad_0buffer_1ShardBucketIndex:
    __slots__ = ()


class k_megatron_1core_1distributed_1fsdp_1src_1megatron_0fsdp_1param_0and_0grad_0buffer_1MultiGroupUBRAllocator:
    __slots__ = ()


class k_megatron_1core_1distributed_1fsdp_1src_1megatron_0fsdp_1param_0and_0grad_0buffer_1BucketingPolicy:
    __slots__ = ()


class k_megatron_1core_1distributed_1fsdp_1src_1megatron_0fsdp_1param_0and_0grad_0buffer_1Bucket:
    __slots__ = ()


class k_megatron_1core_1distributed_1fsdp_1src_1megatron_0fsdp_1param_0and_0grad_0buffer_1TemporaryBucketAllocator:
    __slots__ = ()


class k_megatron_1core_1distributed_1fsdp_1src_1megatron_0fsdp_1param_0and_0grad_0buffer_1StorageResizeBasedBucketAllocator:
    __slots__ = ()


class k_megatron_1core_1distributed_1fsdp_1src_1megatron_0fsdp_1param_0and_0grad_0buffer_1RotaryBucketAllocator:
    __slots__ = ()


class k_megatron_1core_1distributed_1fsdp_1src_1megatron_0fsdp_1param_0and_0grad_0buffer_1FixedPoolAllocator:
    __slots__ = ()


class k_megatron_1core_1distributed_1fsdp_1src_1megatron_0fsdp_1param_0and_0grad_0buffer_1MaxPoolAllocator:
    __slots__ = ()


class k_megatron_1core_1distributed_1fsdp_1src_1megatron_0fsdp_1param_0and_0grad_0buffer_1DataParallelBuffer:
    __slots__ = ()


class k_megatron_1core_1distributed_1fsdp_1src_1megatron_0fsdp_1param_0and_0grad_0buffer_1ParameterGroup:
    __slots__ = ()


class k_megatron_1core_1distributed_1fsdp_1src_1megatron_0fsdp_1param_0and_0grad_0buffer_1ParamAndGradBuffer:
    __slots__ = ()


class k_megatron_1core_1distributed_1fsdp_1src_1megatron_0fsdp_1param_0and_0grad_0buffer_1BucketStatus:
    __slots__ = ()


class k_megatron_1core_1distributed_1fsdp_1src_1megatron_0fsdp_1param_0and_0grad_0buffer_1GradReducePipeline:
    __slots__ = ()


class k_megatron_1core_1distributed_1fsdp_1src_1megatron_0fsdp_1param_0and_0grad_0buffer_1PrefetchOrder:
    __slots__ = ()


class k_megatron_1core_1distributed_1fsdp_1src_1megatron_0fsdp_1param_0and_0grad_0buffer_1AllGatherPipeline:
    __slots__ = ()


class k_megatron_1core_1distributed_1fsdp_1src_1megatron_0fsdp_1param_0and_0grad_0buffer_1ResetParametersContext:
    __slots__ = ()


class k_megatron_1core_1distributed_1fsdp_1src_1megatron_0fsdp_1utils_1FSDPDistributedIndex:
    __slots__ = ()


class k_megatron_1core_1distributed_1fsdp_1src_1megatron_0fsdp_1utils_1GlobalMemoryBuffer:
    __slots__ = ()


class k_megatron_1core_1distributed_1param_0and_0grad_0buffer_1BufferType:
    __slots__ = ()


class k_megatron_1core_1distributed_1param_0and_0grad_0buffer_1_0ParamAndGradBucket:
    __slots__ = ()


class k_megatron_1core_1distributed_1param_0and_0grad_0buffer_1_0LayerwiseAllGatherHandle:
    __slots__ = ()


class k_megatron_1core_1distributed_1param_0and_0grad_0buffer_1_0ParamAndGradBucketGroup:
    __slots__ = ()


class k_megatron_1core_1distributed_1param_0and_0grad_0buffer_1_0ParamAndGradBuffer:
    __slots__ = ()


class k_megatron_1core_1distributed_1reduce_0scatter_0with_0fp32_0accumulation_1_0ReduceScatterWithFP32AccumulationWorkHandle:
    __slots__ = ()


class k_megatron_1core_1distributed_1torch_0fully_0sharded_0data_0parallel_1TorchFullyShardedDataParallel:
    __slots__ = ()


class k_megatron_1core_1distributed_1torch_0fully_0sharded_0data_0parallel_0config_1TorchFullyShardedDataParallelConfig:
    __slots__ = ()


class k_megatron_1core_1energy_0monitor_1EnergyMonitor:
    __slots__ = ()


class k_megatron_1core_1enums_1ModelType:
    __slots__ = ()


class k_megatron_1core_1enums_1Fp8Recipe:
    __slots__ = ()


class k_megatron_1core_1enums_1Fp4Recipe:
    __slots__ = ()


class k_megatron_1core_1export_1data_0type_1DataType:
    __slots__ = ()


class k_megatron_1core_1export_1export_0config_1ExportConfig:
    __slots__ = ()


class k_megatron_1core_1export_1model_0type_1ModelType:
    __slots__ = ()


class k_megatron_1core_1export_1trtllm_1engine_0builder_1trtllm_0engine_0builder_1TRTLLMEngineBuilder:
    __slots__ = ()


class k_megatron_1core_1export_1trtllm_1trtllm_0helper_1TRTLLMHelper:
    __slots__ = ()


class k_megatron_1core_1export_1trtllm_1trtllm_0layers_1TRTLLMLayers:
    __slots__ = ()


class k_megatron_1core_1export_1trtllm_1trtllm_0weights_0converter_1distributed_0trtllm_0model_0weights_0converter_1DistributedTRTLLMModelWeightsConverter:
    __slots__ = ()


class k_megatron_1core_1export_1trtllm_1trtllm_0weights_0converter_1single_0device_0trtllm_0model_0weights_0converter_1SingleDeviceTRTLLMModelWeightsConverter:
    __slots__ = ()


class k_megatron_1core_1extensions_1transformer_0engine_1TransformerEngineConfigType:
    __slots__ = ()


class k_megatron_1core_1extensions_1transformer_0engine_1TEQuantizationRecipe:
    __slots__ = ()


class k_megatron_1core_1extensions_1transformer_0engine_1TEQuantizationParams:
    __slots__ = ()


class k_megatron_1core_1extensions_1transformer_0engine_1TENorm:
    __slots__ = ()


class k_megatron_1core_1extensions_1transformer_0engine_0spec_0provider_1_0TENormWithResidual:
    __slots__ = ()


class k_megatron_1core_1extensions_1transformer_0engine_0spec_0provider_1TESpecProvider:
    __slots__ = ()


class k_megatron_1core_1fault_0injector_1FaultInjectorConfig:
    __slots__ = ()


class k_megatron_1core_1fault_0injector_1_0FaultInjectorRNG:
    __slots__ = ()


class k_megatron_1core_1full_0cuda_0graph_1StaticBufferLoader:
    __slots__ = ()


class k_megatron_1core_1full_0cuda_0graph_1FullCudaGraphWrapper:
    __slots__ = ()


class k_megatron_1core_1fusions_1fused_0bias_0geglu_1BiasGeGLUFunction:
    __slots__ = ()


class k_megatron_1core_1fusions_1fused_0bias_0geglu_1GeGLUFunction:
    __slots__ = ()


class k_megatron_1core_1fusions_1fused_0bias_0geglu_1WeightedQuickGeGLUFunction:
    __slots__ = ()


class k_megatron_1core_1fusions_1fused_0bias_0geglu_1WeightedBiasQuickGeGLUFunction:
    __slots__ = ()


class k_megatron_1core_1fusions_1fused_0bias_0gelu_1GeLUFunction:
    __slots__ = ()


class k_megatron_1core_1fusions_1fused_0bias_0swiglu_1BiasSwiGLUFunction:
    __slots__ = ()


class k_megatron_1core_1fusions_1fused_0bias_0swiglu_1SwiGLUFunction:
    __slots__ = ()


class k_megatron_1core_1fusions_1fused_0bias_0swiglu_1WeightedSwiGLUFunction:
    __slots__ = ()


class k_megatron_1core_1fusions_1fused_0cross_0entropy_1_0VocabParallelCrossEntropy:
    __slots__ = ()


class k_megatron_1core_1fusions_1fused_0indices_0converter_1IndicesToMultihot:
    __slots__ = ()


class k_megatron_1core_1fusions_1fused_0layer_0norm_1FusedLayerNorm:
    __slots__ = ()


class k_megatron_1core_1fusions_1fused_0mla_0yarn_0rope_0apply_1ApplyMLARotaryEmbQ:
    __slots__ = ()


class k_megatron_1core_1fusions_1fused_0mla_0yarn_0rope_0apply_1ApplyMLARotaryEmbKV:
    __slots__ = ()


class k_megatron_1core_1fusions_1fused_0softmax_1ScaledUpperTriangMaskedSoftmax:
    __slots__ = ()


class k_megatron_1core_1fusions_1fused_0softmax_1ScaledMaskedSoftmax:
    __slots__ = ()


class k_megatron_1core_1fusions_1fused_0softmax_1ScaledSoftmax:
    __slots__ = ()


class k_megatron_1core_1fusions_1fused_0softmax_1SoftmaxOne:
    __slots__ = ()


class k_megatron_1core_1fusions_1fused_0softmax_1FusedScaleMaskSoftmax:
    __slots__ = ()


class k_megatron_1core_1fusions_1fused_0weighted_0squared_0relu_1WeightedSquaredReLUFunction:
    __slots__ = ()


class k_megatron_1core_1hyper_0comm_0grid_1_0RankViewSpec:
    __slots__ = ()


class k_megatron_1core_1hyper_0comm_0grid_1HyperCommGrid:
    __slots__ = ()


class k_megatron_1core_1inference_1apis_1_0llm_0base_1_0EventLoopManager:
    __slots__ = ()


class k_megatron_1core_1inference_1apis_1_0llm_0base_1_0CoordinatorRuntime:
    __slots__ = ()


class k_megatron_1core_1inference_1apis_1_0llm_0base_1_0MegatronLLMBase:
    __slots__ = ()


class k_megatron_1core_1inference_1apis_1async_0llm_1MegatronAsyncLLM:
    __slots__ = ()


class k_megatron_1core_1inference_1apis_1llm_1MegatronLLM:
    __slots__ = ()


class k_megatron_1core_1inference_1apis_1serve_0config_1ServeConfig:
    __slots__ = ()


class k_megatron_1core_1inference_1async_0stream_1AsyncStream:
    __slots__ = ()


class k_megatron_1core_1inference_1batch_0dimensions_0utils_1InferenceBatchDimensions:
    __slots__ = ()


class k_megatron_1core_1inference_1batch_0dimensions_0utils_1CUDAGraphBatchDimensionBuilder:
    __slots__ = ()


class k_megatron_1core_1inference_1config_1MambaInferenceStateConfig:
    __slots__ = ()


class k_megatron_1core_1inference_1config_1PrefixCachingEvictionPolicy:
    __slots__ = ()


class k_megatron_1core_1inference_1config_1PrefixCachingCoordinatorPolicy:
    __slots__ = ()


class k_megatron_1core_1inference_1config_1KVCacheManagementMode:
    __slots__ = ()


class k_megatron_1core_1inference_1config_1CudaGraphSizingDistribution:
    __slots__ = ()


class k_megatron_1core_1inference_1config_1AsyncScheduleMode:
    __slots__ = ()


class k_megatron_1core_1inference_1config_1InferenceConfig:
    __slots__ = ()


class k_megatron_1core_1inference_1contexts_1base_0context_1BaseInferenceContext:
    __slots__ = ()


class k_megatron_1core_1inference_1contexts_1dynamic_0context_1ContextOverflowError:
    __slots__ = ()


class k_megatron_1core_1inference_1contexts_1dynamic_0context_1RequestOverflowError:
    __slots__ = ()


class k_megatron_1core_1inference_1contexts_1dynamic_0context_1TokenOverflowError:
    __slots__ = ()


class k_megatron_1core_1inference_1contexts_1dynamic_0context_1MaxSequenceLengthOverflowError:
    __slots__ = ()


class k_megatron_1core_1inference_1contexts_1dynamic_0context_1BlockOverflowError:
    __slots__ = ()


class k_megatron_1core_1inference_1contexts_1dynamic_0context_1ActiveRequestCountOverflowError:
    __slots__ = ()


class k_megatron_1core_1inference_1contexts_1dynamic_0context_1TensorStateDeallocatedError:
    __slots__ = ()


class k_megatron_1core_1inference_1contexts_1dynamic_0context_1ContextErrorFactory:
    __slots__ = ()


class k_megatron_1core_1inference_1contexts_1dynamic_0context_1DynamicInferenceContext:
    __slots__ = ()


class k_megatron_1core_1inference_1contexts_1gpu_0view_1ContextGPUView:
    __slots__ = ()


class k_megatron_1core_1inference_1contexts_1kv_0block_0allocator_1KVBlockAllocator:
    __slots__ = ()


class k_megatron_1core_1inference_1contexts_1mamba_0slot_0allocator_1MambaSlotAllocator:
    __slots__ = ()


class k_megatron_1core_1inference_1contexts_1routing_0metadata_1RoutingMetadata:
    __slots__ = ()


class k_megatron_1core_1inference_1contexts_1static_0context_1StaticInferenceContext:
    __slots__ = ()


class k_megatron_1core_1inference_1data_0parallel_0inference_0coordinator_1coordinator_1DataParallelInferenceCoordinator:
    __slots__ = ()


class k_megatron_1core_1inference_1data_0parallel_0inference_0coordinator_1state_1CoordinatorState:
    __slots__ = ()


class k_megatron_1core_1inference_1data_0parallel_0inference_0coordinator_1state_1ControlTransition:
    __slots__ = ()


class k_megatron_1core_1inference_1disaggregation_1kv_0reshard_1KVShardLayout:
    __slots__ = ()


class k_megatron_1core_1inference_1disaggregation_1kv_0reshard_1KVReshardTransfer:
    __slots__ = ()


class k_megatron_1core_1inference_1disaggregation_1mamba_0reshard_1MambaStateDims:
    __slots__ = ()


class k_megatron_1core_1inference_1disaggregation_1mamba_0reshard_1MambaShardLayout:
    __slots__ = ()


class k_megatron_1core_1inference_1disaggregation_1mamba_0reshard_1MambaReshardTransfer:
    __slots__ = ()


class k_megatron_1core_1inference_1engines_1abstract_0engine_1AbstractEngine:
    __slots__ = ()


class k_megatron_1core_1inference_1engines_1async_0zmq_0communicator_1AsyncZMQCommunicator:
    __slots__ = ()


class k_megatron_1core_1inference_1engines_1dynamic_0engine_1EngineState:
    __slots__ = ()


class k_megatron_1core_1inference_1engines_1dynamic_0engine_1EngineSuspendedError:
    __slots__ = ()


class k_megatron_1core_1inference_1engines_1dynamic_0engine_1RequestEntry:
    __slots__ = ()


class k_megatron_1core_1inference_1engines_1dynamic_0engine_1DynamicInferenceEngine:
    __slots__ = ()


class k_megatron_1core_1inference_1engines_1static_0engine_1StaticInferenceEngine:
    __slots__ = ()


class k_megatron_1core_1inference_1headers_1Connection:
    __slots__ = ()


class k_megatron_1core_1inference_1headers_1Request:
    __slots__ = ()


class k_megatron_1core_1inference_1headers_1Control:
    __slots__ = ()


class k_megatron_1core_1inference_1headers_1Lifecycle:
    __slots__ = ()


class k_megatron_1core_1inference_1headers_1Transport:
    __slots__ = ()


class k_megatron_1core_1inference_1headers_1UnknownHeaderError:
    __slots__ = ()


class k_megatron_1core_1inference_1headers_1_0Headers:
    __slots__ = ()


class k_megatron_1core_1inference_1inference_0client_1InferenceClient:
    __slots__ = ()


class k_megatron_1core_1inference_1inference_0request_1Status:
    __slots__ = ()


class k_megatron_1core_1inference_1inference_0request_1InferenceRequest:
    __slots__ = ()


class k_megatron_1core_1inference_1inference_0request_1DynamicInferenceEventType:
    __slots__ = ()


class k_megatron_1core_1inference_1inference_0request_1DynamicInferenceEvent:
    __slots__ = ()


class k_megatron_1core_1inference_1inference_0request_1DynamicInferenceRequest:
    __slots__ = ()


class k_megatron_1core_1inference_1inference_0request_1DynamicInferenceRequestRecord:
    __slots__ = ()


class k_megatron_1core_1inference_1inference_0request_1VLMInferenceRequest:
    __slots__ = ()


class k_megatron_1core_1inference_1model_0inference_0wrappers_1abstract_0model_0inference_0wrapper_1AbstractModelInferenceWrapper:
    __slots__ = ()


class k_megatron_1core_1inference_1model_0inference_0wrappers_1gpt_1gpt_0inference_0wrapper_1GPTInferenceWrapper:
    __slots__ = ()


class k_megatron_1core_1inference_1model_0inference_0wrappers_1t5_1t5_0inference_0wrapper_1T5InferenceWrapper:
    __slots__ = ()


class k_megatron_1core_1inference_1moe_1InferenceGroupedGemmBackend:
    __slots__ = ()


class k_megatron_1core_1inference_1moe_1fused_0moe_1ActivationType:
    __slots__ = ()


class k_megatron_1core_1inference_1quantization_1mxfp8_0tensor_1MXFP8Tensor:
    __slots__ = ()


class k_megatron_1core_1inference_1sampling_1base_1Sampling:
    __slots__ = ()


class k_megatron_1core_1inference_1sampling_1flashinfer_0sampling_1FlashInferSampling:
    __slots__ = ()


class k_megatron_1core_1inference_1sampling_1torch_0sampling_1TorchSampling:
    __slots__ = ()


class k_megatron_1core_1inference_1sampling_0params_1SamplingParams:
    __slots__ = ()


class k_megatron_1core_1inference_1scheduler_1Scheduler:
    __slots__ = ()


class k_megatron_1core_1inference_1shards_1InferenceShard:
    __slots__ = ()


class k_megatron_1core_1inference_1shards_0spec_1InferenceShardSpec:
    __slots__ = ()


class k_megatron_1core_1inference_1symmetric_0memory_1SymmetricMemoryBuffer:
    __slots__ = ()


class k_megatron_1core_1inference_1symmetric_0memory_1SymmetricMemoryManager:
    __slots__ = ()


class k_megatron_1core_1inference_1text_0generation_0controllers_1encoder_0decoder_0text_0generation_0controller_1EncoderDecoderTextGenerationController:
    __slots__ = ()


class k_megatron_1core_1inference_1text_0generation_0controllers_1text_0generation_0controller_1AsyncScheduleLogitsState:
    __slots__ = ()


class k_megatron_1core_1inference_1text_0generation_0controllers_1text_0generation_0controller_1_0AsyncScheduleSampleResult:
    __slots__ = ()


class k_megatron_1core_1inference_1text_0generation_0controllers_1text_0generation_0controller_1DecodeOnly:
    __slots__ = ()


class k_megatron_1core_1inference_1text_0generation_0controllers_1text_0generation_0controller_1DynamicBatchControllerStepResult:
    __slots__ = ()


class k_megatron_1core_1inference_1text_0generation_0controllers_1text_0generation_0controller_1_0AsyncScheduleRequestResult:
    __slots__ = ()


class k_megatron_1core_1inference_1text_0generation_0controllers_1text_0generation_0controller_1_0AsyncScheduleLogProbsGPUResult:
    __slots__ = ()


class k_megatron_1core_1inference_1text_0generation_0controllers_1text_0generation_0controller_1_0AsyncScheduleLogProbsTransfer:
    __slots__ = ()


class k_megatron_1core_1inference_1text_0generation_0controllers_1text_0generation_0controller_1TextGenerationController:
    __slots__ = ()


class k_megatron_1core_1inference_1text_0generation_0controllers_1vlm_0text_0generation_0controller_1VLMTextGenerationController:
    __slots__ = ()


class k_megatron_1core_1inference_1text_0generation_0server_1text_0generation_0server_1MegatronGenerate:
    __slots__ = ()


class k_megatron_1core_1inference_1text_0generation_0server_1text_0generation_0server_1MegatronServer:
    __slots__ = ()


class k_megatron_1core_1inference_1unified_0memory_1CompilationState:
    __slots__ = ()


class k_megatron_1core_1inference_1unified_0memory_1UnifiedMemoryUnsupportedError:
    __slots__ = ()


class k_megatron_1core_1inference_1unified_0memory_1UnifiedMemoryCompileTimeoutError:
    __slots__ = ()


class k_megatron_1core_1inference_1utils_1InferenceMode:
    __slots__ = ()


class k_megatron_1core_1inference_1utils_1Counter:
    __slots__ = ()


class k_megatron_1core_1inference_1utils_1asyncio_0QueueShutDown:
    __slots__ = ()


class k_megatron_1core_1inference_1utils_1asyncio_0Queue:
    __slots__ = ()


class k_megatron_1core_1model_0parallel_0config_1ModelParallelConfig:
    __slots__ = ()


class k_megatron_1core_1models_1T5_1t5_0model_1T5LMHead:
    __slots__ = ()


class k_megatron_1core_1models_1T5_1t5_0model_1T5Model:
    __slots__ = ()


class k_megatron_1core_1models_1audio_1audio_0feature_0config_1NemoAudioFeatureConfig:
    __slots__ = ()


class k_megatron_1core_1models_1audio_1audio_0feature_0config_1NemoTransformerAudioTokenEstimator:
    __slots__ = ()


class k_megatron_1core_1models_1audio_1audio_0processor_1NemoAudioProcessor:
    __slots__ = ()


class k_megatron_1core_1models_1audio_1audio_0projector_1AudioProjection:
    __slots__ = ()


class k_megatron_1core_1models_1audio_1nemo_0audio_0preprocessing_1AudioToMelSpectrogramPreprocessor:
    __slots__ = ()


class k_megatron_1core_1models_1audio_1nemo_0transformer_0audio_0model_1NemoTransformerAudioConfig:
    __slots__ = ()


class k_megatron_1core_1models_1audio_1nemo_0transformer_0audio_0model_1NemoTransformerAudioModel:
    __slots__ = ()


class k_megatron_1core_1models_1audio_1nemo_0transformer_0encoder_1GPTConfig:
    __slots__ = ()


class k_megatron_1core_1models_1audio_1nemo_0transformer_0encoder_1TransformerEncoderConfig:
    __slots__ = ()


class k_megatron_1core_1models_1audio_1nemo_0transformer_0encoder_1FeedForward:
    __slots__ = ()


class k_megatron_1core_1models_1audio_1nemo_0transformer_0encoder_1GELU:
    __slots__ = ()


class k_megatron_1core_1models_1audio_1nemo_0transformer_0encoder_1LayerNorm:
    __slots__ = ()


class k_megatron_1core_1models_1audio_1nemo_0transformer_0encoder_1MultiHeadAttentionWithFA:
    __slots__ = ()


class k_megatron_1core_1models_1audio_1nemo_0transformer_0encoder_1MultiHeadAttentionWithTE:
    __slots__ = ()


class k_megatron_1core_1models_1audio_1nemo_0transformer_0encoder_1MultiHeadAttentionWithSDPA:
    __slots__ = ()


class k_megatron_1core_1models_1audio_1nemo_0transformer_0encoder_1MultiHeadAttention:
    __slots__ = ()


class k_megatron_1core_1models_1audio_1nemo_0transformer_0encoder_1TransformerBlock:
    __slots__ = ()


class k_megatron_1core_1models_1audio_1nemo_0transformer_0encoder_1ConvSubsampling:
    __slots__ = ()


class k_megatron_1core_1models_1audio_1nemo_0transformer_0encoder_1DepthwiseConvSubsampling:
    __slots__ = ()


class k_megatron_1core_1models_1audio_1nemo_0transformer_0encoder_1NGPTStackingSubsampling:
    __slots__ = ()


class k_megatron_1core_1models_1audio_1nemo_0transformer_0encoder_1TransformerEncoder:
    __slots__ = ()


class k_megatron_1core_1models_1audio_1packed_0audio_1PackedAudioEmbeddings:
    __slots__ = ()


class k_megatron_1core_1models_1backends_1BackendSpecProvider:
    __slots__ = ()


class k_megatron_1core_1models_1backends_1LocalSpecProvider:
    __slots__ = ()


class k_megatron_1core_1models_1backends_1InferenceSpecProvider:
    __slots__ = ()


class k_megatron_1core_1models_1bert_1bert_0lm_0head_1BertLMHead:
    __slots__ = ()


class k_megatron_1core_1models_1bert_1bert_0model_1BertModel:
    __slots__ = ()


class k_megatron_1core_1models_1bert_1pooler_1Pooler:
    __slots__ = ()


class k_megatron_1core_1models_1common_1embeddings_1language_0model_0embedding_1LanguageModelEmbedding:
    __slots__ = ()


class k_megatron_1core_1models_1common_1embeddings_1relative_0pos_0embedding_1RelativePositionEmbedding:
    __slots__ = ()


class k_megatron_1core_1models_1common_1embeddings_1rotary_0pos_0embedding_1RotaryEmbedding:
    __slots__ = ()


class k_megatron_1core_1models_1common_1embeddings_1rotary_0pos_0embedding_1MultimodalRotaryEmbedding:
    __slots__ = ()


class k_megatron_1core_1models_1common_1embeddings_1yarn_0rotary_0pos_0embedding_1YarnRotaryEmbedding:
    __slots__ = ()


class k_megatron_1core_1models_1common_1language_0module_1language_0module_1LanguageModule:
    __slots__ = ()


class k_megatron_1core_1models_1common_1model_0chunk_0schedule_0plan_1ModelChunkState:
    __slots__ = ()


class k_megatron_1core_1models_1common_1model_0chunk_0schedule_0plan_1TransformerLayerSchedulePlan:
    __slots__ = ()


class k_megatron_1core_1models_1common_1model_0chunk_0schedule_0plan_1TransformerModelChunkSchedulePlan:
    __slots__ = ()


class k_megatron_1core_1models_1common_1utils_1LayerState:
    __slots__ = ()


class k_megatron_1core_1models_1common_1utils_1PreProcessNode:
    __slots__ = ()


class k_megatron_1core_1models_1common_1utils_1PostProcessNode:
    __slots__ = ()


class k_megatron_1core_1models_1common_1utils_1TransformerLayerNode:
    __slots__ = ()


class k_megatron_1core_1models_1common_1utils_1_0BackwardDWWrapper:
    __slots__ = ()


class k_megatron_1core_1models_1common_1vision_0module_1vision_0module_1VisionModule:
    __slots__ = ()


class k_megatron_1core_1models_1gpt_1gpt_0model_1GPTModel:
    __slots__ = ()


class k_megatron_1core_1models_1huggingface_1clip_0model_1SiglipHuggingFaceModel:
    __slots__ = ()


class k_megatron_1core_1models_1huggingface_1fastconformer_0model_1ParakeetHuggingFaceModel:
    __slots__ = ()


class k_megatron_1core_1models_1huggingface_1module_1HuggingFaceModule:
    __slots__ = ()


class k_megatron_1core_1models_1huggingface_1module_1AutoHuggingFaceModel:
    __slots__ = ()


class k_megatron_1core_1models_1huggingface_1qwen_0model_1QwenHuggingFaceModel:
    __slots__ = ()


class k_megatron_1core_1models_1hybrid_1hybrid_0block_1TENorm:
    __slots__ = ()


class k_megatron_1core_1models_1hybrid_1hybrid_0block_1HybridStackSubmodules:
    __slots__ = ()


class k_megatron_1core_1models_1hybrid_1hybrid_0block_1HybridStack:
    __slots__ = ()


class k_megatron_1core_1models_1hybrid_1hybrid_0layer_0allocation_1Symbols:
    __slots__ = ()


class k_megatron_1core_1models_1hybrid_1hybrid_0layer_0allocation_1ParsedHybridPattern:
    __slots__ = ()


class k_megatron_1core_1models_1hybrid_1hybrid_0layer_0specs_1TENorm:
    __slots__ = ()


class k_megatron_1core_1models_1hybrid_1hybrid_0model_1HybridModel:
    __slots__ = ()


class k_megatron_1core_1models_1mamba_1mamba_0model_1MambaModel:
    __slots__ = ()


class k_megatron_1core_1models_1mimo_1comm_1colocated_0communicator_1SliceInfo:
    __slots__ = ()


class k_megatron_1core_1models_1mimo_1comm_1colocated_0communicator_1BridgeDirection:
    __slots__ = ()


class k_megatron_1core_1models_1mimo_1comm_1colocated_0communicator_1ColocatedBridgeCommunicator:
    __slots__ = ()


class k_megatron_1core_1models_1mimo_1comm_1colocated_0communicator_1_0ColocatedCommunicate:
    __slots__ = ()


class k_megatron_1core_1models_1mimo_1config_1base_0configs_1MimoModelConfig:
    __slots__ = ()


class k_megatron_1core_1models_1mimo_1config_1role_1ModuleLayout:
    __slots__ = ()


class k_megatron_1core_1models_1mimo_1config_1role_1ModuleStageInfo:
    __slots__ = ()


class k_megatron_1core_1models_1mimo_1config_1role_1RankRole:
    __slots__ = ()


class k_megatron_1core_1models_1mimo_1model_1base_1MimoModel:
    __slots__ = ()


class k_megatron_1core_1models_1mimo_1optimizer_1ModuleOptimizerInfo:
    __slots__ = ()


class k_megatron_1core_1models_1mimo_1optimizer_1MimoOptimizer:
    __slots__ = ()


class k_megatron_1core_1models_1multimodal_1context_0parallel_1GatherFromContextParallelRanks:
    __slots__ = ()


class k_megatron_1core_1models_1multimodal_1llava_0model_1LLaVAModel:
    __slots__ = ()


class k_megatron_1core_1models_1multimodal_1llava_0spec_1TENorm:
    __slots__ = ()


class k_megatron_1core_1models_1vision_1clip_0vit_0model_1CLIPViTModel:
    __slots__ = ()


class k_megatron_1core_1models_1vision_1multimodal_0projector_1MultimodalProjector:
    __slots__ = ()


class k_megatron_1core_1models_1vision_1radio_1RADIOViTModel:
    __slots__ = ()


class k_megatron_1core_1msc_0utils_1_0FeatureFlag:
    __slots__ = ()


class k_megatron_1core_1msc_0utils_1MaybeMultiStorageClient:
    __slots__ = ()


class k_megatron_1core_1nccl_0allocator_1nccl_0mem:
    __slots__ = ()


class k_megatron_1core_1nccl_0allocator_1MultiGroupMemPoolAllocator:
    __slots__ = ()


class k_megatron_1core_1nccl_0allocator_1MemPoolAllocatorWithoutRegistration:
    __slots__ = ()


class k_megatron_1core_1num_0microbatches_0calculator_1NumMicroBatchesCalculator:
    __slots__ = ()


class k_megatron_1core_1num_0microbatches_0calculator_1ConstantNumMicroBatchesCalculator:
    __slots__ = ()


class k_megatron_1core_1num_0microbatches_0calculator_1StepBatchsizeNumMicroBatchesCalculator:
    __slots__ = ()


class k_megatron_1core_1optimizer_1SGD:
    __slots__ = ()


class k_megatron_1core_1optimizer_1cpu_0offloading_1hybrid_0optimizer_1HybridDeviceOptimizer:
    __slots__ = ()


class k_megatron_1core_1optimizer_1distrib_0optimizer_1Range:
    __slots__ = ()


class k_megatron_1core_1optimizer_1distrib_0optimizer_1DistributedOptimizer:
    __slots__ = ()


class k_megatron_1core_1optimizer_1emerging_0optimizers_1EmergingOptimizerEntry:
    __slots__ = ()


class k_megatron_1core_1optimizer_1emerging_0optimizers_1TensorParallelMuon:
    __slots__ = ()


class k_megatron_1core_1optimizer_1emerging_0optimizers_1TensorParallelAdaptiveMuon:
    __slots__ = ()


class k_megatron_1core_1optimizer_1grad_0scaler_1MegatronGradScaler:
    __slots__ = ()


class k_megatron_1core_1optimizer_1grad_0scaler_1ConstantGradScaler:
    __slots__ = ()


class k_megatron_1core_1optimizer_1grad_0scaler_1DynamicGradScaler:
    __slots__ = ()


class k_megatron_1core_1optimizer_1layer_0wise_0optimizer_1LayerWiseDistributedOptimizer:
    __slots__ = ()


class k_megatron_1core_1optimizer_1optimizer_1MegatronOptimizer:
    __slots__ = ()


class k_megatron_1core_1optimizer_1optimizer_1MixedPrecisionOptimizer:
    __slots__ = ()


class k_megatron_1core_1optimizer_1optimizer_1Float16OptimizerWithFloat16Params:
    __slots__ = ()


class k_megatron_1core_1optimizer_1optimizer_1FP32Optimizer:
    __slots__ = ()


class k_megatron_1core_1optimizer_1optimizer_1ProxyDict:
    __slots__ = ()


class k_megatron_1core_1optimizer_1optimizer_1ChainedOptimizer:
    __slots__ = ()


class k_megatron_1core_1optimizer_1optimizer_0config_1ParamPredicate:
    __slots__ = ()


class k_megatron_1core_1optimizer_1optimizer_0config_1ParamWithNamePredicate:
    __slots__ = ()


class k_megatron_1core_1optimizer_1optimizer_0config_1ParamKey:
    __slots__ = ()


class k_megatron_1core_1optimizer_1optimizer_0config_1OptimizerConfig:
    __slots__ = ()


class k_megatron_1core_1optimizer_1optimizer_0cuda_0graph_1OptimizerCudaGraphWrapper:
    __slots__ = ()


class k_megatron_1core_1optimizer_1param_0layout_1BufferKey:
    __slots__ = ()


class k_megatron_1core_1optimizer_1param_0layout_1PerBufferParamLayout:
    __slots__ = ()


class k_megatron_1core_1optimizer_1param_0layout_1FullParamLayout:
    __slots__ = ()


class k_megatron_1core_1optimizer_0param_0scheduler_1ParamGroupOverride:
    __slots__ = ()


class k_megatron_1core_1optimizer_0param_0scheduler_1OptimizerParamScheduler:
    __slots__ = ()


class k_megatron_1core_1packed_0seq_0params_1PackedSeqParams:
    __slots__ = ()


class k_megatron_1core_1parallel_0state_1RankGenerator:
    __slots__ = ()


class k_megatron_1core_1pipeline_0parallel_1bridge_0communicator_1CommRole:
    __slots__ = ()


class k_megatron_1core_1pipeline_0parallel_1bridge_0communicator_1RankCommInfo:
    __slots__ = ()


class k_megatron_1core_1pipeline_0parallel_1bridge_0communicator_1BridgeCommunicator:
    __slots__ = ()


class k_megatron_1core_1pipeline_0parallel_1fine_0grained_0activation_0offload_1OffloadTensorPool:
    __slots__ = ()


class k_megatron_1core_1pipeline_0parallel_1fine_0grained_0activation_0offload_1OffloadTensorGroup:
    __slots__ = ()


class k_megatron_1core_1pipeline_0parallel_1fine_0grained_0activation_0offload_1PipelineOffloadManager:
    __slots__ = ()


class k_megatron_1core_1pipeline_0parallel_1fine_0grained_0activation_0offload_1ChunkOffloadHandler:
    __slots__ = ()


class k_megatron_1core_1pipeline_0parallel_1fine_0grained_0activation_0offload_1FineGrainedOffloadingGroupCommitFunction:
    __slots__ = ()


class k_megatron_1core_1pipeline_0parallel_1fine_0grained_0activation_0offload_1FineGrainedOffloadingGroupStartFunction:
    __slots__ = ()


class k_megatron_1core_1pipeline_0parallel_1fine_0grained_0activation_0offload_1FineGrainedOffloadingBackwardRecordFunction:
    __slots__ = ()


class k_megatron_1core_1pipeline_0parallel_1fine_0grained_0activation_0offload_1FineGrainedActivationOffloadingInterface:
    __slots__ = ()


class k_megatron_1core_1pipeline_0parallel_1hybrid_0cp_0schedule_1BalancedCPScheduler:
    __slots__ = ()


class k_megatron_1core_1pipeline_0parallel_1multimodule_0communicator_1RankModuleInfo:
    __slots__ = ()


class k_megatron_1core_1pipeline_0parallel_1multimodule_0communicator_1MultiModulePipelineCommunicator:
    __slots__ = ()


class k_megatron_1core_1pipeline_0parallel_1p2p_0communication_1P2PCommunicator:
    __slots__ = ()


class k_megatron_1core_1pipeline_0parallel_1utils_1StageDispatchBwdGrad:
    __slots__ = ()


class k_megatron_1core_1pipeline_0parallel_1utils_1NoopScheduleNode:
    __slots__ = ()


class k_megatron_1core_1pipeline_0parallel_1utils_1ScheduleNode:
    __slots__ = ()


class k_megatron_1core_1pipeline_0parallel_1utils_1AbstractSchedulePlan:
    __slots__ = ()


class k_megatron_1core_1post_0training_1modelopt_1hybrid_1model_0specs_1TENorm:
    __slots__ = ()


class k_megatron_1core_1post_0training_1modelopt_1layers_1Norm:
    __slots__ = ()


class k_megatron_1core_1post_0training_1modelopt_1layers_1Linear:
    __slots__ = ()


class k_megatron_1core_1post_0training_1modelopt_1layers_1RealQuantTransformerLayer:
    __slots__ = ()


class k_megatron_1core_1post_0training_1modelopt_1layers_1FP8WeightTransformerLayer:
    __slots__ = ()


class k_megatron_1core_1post_0training_1modelopt_1layers_1BlockwiseFP8WeightTransformerLayer:
    __slots__ = ()


class k_megatron_1core_1process_0groups_0config_1ProcessGroupHelperMeta:
    __slots__ = ()


class k_megatron_1core_1process_0groups_0config_1ProcessGroupCollection:
    __slots__ = ()


class k_megatron_1core_1process_0groups_0config_1MultiModuleProcessGroupCollection:
    __slots__ = ()


class k_megatron_1core_1quantization_1quant_0config_1MatchContext:
    __slots__ = ()


class k_megatron_1core_1quantization_1quant_0config_1QuantizationConfig:
    __slots__ = ()


class k_megatron_1core_1quantization_1quant_0config_1Matcher:
    __slots__ = ()


class k_megatron_1core_1quantization_1quant_0config_1GlobMatcher:
    __slots__ = ()


class k_megatron_1core_1quantization_1quant_0config_1RecipeConfig:
    __slots__ = ()


class k_megatron_1core_1rerun_0state_0machine_1Caller:
    __slots__ = ()


class k_megatron_1core_1rerun_0state_0machine_1Call:
    __slots__ = ()


class k_megatron_1core_1rerun_0state_0machine_1RerunDiagnostic:
    __slots__ = ()


class k_megatron_1core_1rerun_0state_0machine_1RerunMode:
    __slots__ = ()


class k_megatron_1core_1rerun_0state_0machine_1RerunState:
    __slots__ = ()


class k_megatron_1core_1rerun_0state_0machine_1RerunValidationStatus:
    __slots__ = ()


class k_megatron_1core_1rerun_0state_0machine_1RerunStateMachine:
    __slots__ = ()


class k_megatron_1core_1rerun_0state_0machine_1RerunDataIterator:
    __slots__ = ()


class k_megatron_1core_1rerun_0state_0machine_1QuickStats:
    __slots__ = ()


class k_megatron_1core_1rerun_0state_0machine_1RerunErrorInjector:
    __slots__ = ()


class k_megatron_1core_1resharding_1copy_0services_1base_1SendOp:
    __slots__ = ()


class k_megatron_1core_1resharding_1copy_0services_1base_1RecvOp:
    __slots__ = ()


class k_megatron_1core_1resharding_1copy_0services_1base_1CopyService:
    __slots__ = ()


class k_megatron_1core_1resharding_1copy_0services_1gloo_0copy_0service_1GlooCopyService:
    __slots__ = ()


class k_megatron_1core_1resharding_1copy_0services_1nccl_0copy_0service_1NCCLCopyService:
    __slots__ = ()


class k_megatron_1core_1resharding_1copy_0services_1nixl_0copy_0service_1NixlCopyService:
    __slots__ = ()


class k_megatron_1core_1resharding_1copy_0services_1nvshmem_0copy_0service_1NVSHMEMCopyService:
    __slots__ = ()


class k_megatron_1core_1resharding_1execution_1_0Writeback:
    __slots__ = ()


class k_megatron_1core_1resharding_1nvshmem_0copy_0service_1core_1gpu_0resource_0manager_1GPUResourceManager:
    __slots__ = ()


class k_megatron_1core_1resharding_1nvshmem_0copy_0service_1core_1kernel_0launcher_1KernelLauncher:
    __slots__ = ()


class k_megatron_1core_1resharding_1nvshmem_0copy_0service_1core_1pipeline_0executor_1PipelineExecutor:
    __slots__ = ()


class k_megatron_1core_1resharding_1nvshmem_0copy_0service_1logger_1ColoredFormatter:
    __slots__ = ()


class k_megatron_1core_1resharding_1nvshmem_0copy_0service_1logger_1PELogger:
    __slots__ = ()


class k_megatron_1core_1resharding_1nvshmem_0copy_0service_1memory_1double_0buffer_0manager_1DoubleBufferManager:
    __slots__ = ()


class k_megatron_1core_1resharding_1nvshmem_0copy_0service_1memory_1tensor_0pointer_0utils_1TensorPointerExtractor:
    __slots__ = ()


class k_megatron_1core_1resharding_1nvshmem_0copy_0service_1nvshmem_0types_1SendRequest:
    __slots__ = ()


class k_megatron_1core_1resharding_1nvshmem_0copy_0service_1nvshmem_0types_1ReceiveRequest:
    __slots__ = ()


class k_megatron_1core_1resharding_1nvshmem_0copy_0service_1nvshmem_0types_1WorkloadGroup:
    __slots__ = ()


class k_megatron_1core_1resharding_1nvshmem_0copy_0service_1nvshmem_0types_1ScheduledBatch:
    __slots__ = ()


class k_megatron_1core_1resharding_1nvshmem_0copy_0service_1nvshmem_0types_1WorkloadSummary:
    __slots__ = ()


class k_megatron_1core_1resharding_1nvshmem_0copy_0service_1nvshmem_0types_1TransferMetadata:
    __slots__ = ()


class k_megatron_1core_1resharding_1nvshmem_0copy_0service_1planning_1communication_0scheduler_1CommunicationScheduler:
    __slots__ = ()


class k_megatron_1core_1resharding_1nvshmem_0copy_0service_1planning_1gpu_0execution_0planner_1GPUExecutionPlanner:
    __slots__ = ()


class k_megatron_1core_1resharding_1nvshmem_0copy_0service_1planning_1task_0segmenter_1TaskSegmenter:
    __slots__ = ()


class k_megatron_1core_1resharding_1nvshmem_0copy_0service_1planning_1workload_0packer_1WorkloadPacker:
    __slots__ = ()


class k_megatron_1core_1resharding_1nvshmem_0copy_0service_1service_1RemoteCopyService:
    __slots__ = ()


class k_megatron_1core_1resharding_1nvshmem_0copy_0service_1validation_1ValidationResult:
    __slots__ = ()


class k_megatron_1core_1resharding_1nvshmem_0copy_0service_1validation_1ValidationSummary:
    __slots__ = ()


class k_megatron_1core_1resharding_1refit_1_0PlanCacheKey:
    __slots__ = ()


class k_megatron_1core_1resharding_1transforms_1ReshardTransform:
    __slots__ = ()


class k_megatron_1core_1resharding_1transforms_1MXFP8ReshardTransform:
    __slots__ = ()


class k_megatron_1core_1resharding_1utils_1TransferOp:
    __slots__ = ()


class k_megatron_1core_1resharding_1utils_1ParameterMetadata:
    __slots__ = ()


class k_megatron_1core_1resharding_1utils_1ShardingDescriptor:
    __slots__ = ()


class k_megatron_1core_1resharding_1utils_1ReshardPlan:
    __slots__ = ()


class k_megatron_1core_1safe_0globals_1SafeUnpickler:
    __slots__ = ()


class k_megatron_1core_1ssm_1gated_0delta_0net_1common_1GatedDeltaNetSubmodules:
    __slots__ = ()


class k_megatron_1core_1ssm_1gated_0delta_0net_1common_1GatedDeltaRuleInterface:
    __slots__ = ()


class k_megatron_1core_1ssm_1gated_0delta_0net_1common_1_0GDNBase:
    __slots__ = ()


class k_megatron_1core_1ssm_1gated_0delta_0net_1gdn_1GatedDeltaNet:
    __slots__ = ()


class k_megatron_1core_1ssm_1mamba_0context_0parallel_1MambaContextParallel:
    __slots__ = ()


class k_megatron_1core_1ssm_1mamba_0layer_1MambaLayerSubmodules:
    __slots__ = ()


class k_megatron_1core_1ssm_1mamba_0layer_1MambaLayer:
    __slots__ = ()


class k_megatron_1core_1ssm_1mamba_0mixer_1MambaMixerSubmodules:
    __slots__ = ()


class k_megatron_1core_1ssm_1mamba_0mixer_1MambaMixer:
    __slots__ = ()


class k_megatron_1core_1ssm_1mlp_0layer_1MLPLayer:
    __slots__ = ()


class k_megatron_1core_1tensor_0parallel_1cross_0entropy_1VocabParallelCrossEntropy:
    __slots__ = ()


class k_megatron_1core_1tensor_0parallel_1cross_0entropy_1_0VocabParallelCrossEntropy:
    __slots__ = ()


class k_megatron_1core_1tensor_0parallel_1generalized_0tensor_0parallelism_1GTPChain:
    __slots__ = ()


class k_megatron_1core_1tensor_0parallel_1generalized_0tensor_0parallelism_1GTPWeightState:
    __slots__ = ()


class k_megatron_1core_1tensor_0parallel_1generalized_0tensor_0parallelism_1GTPRematConfig:
    __slots__ = ()


class k_megatron_1core_1tensor_0parallel_1generalized_0tensor_0parallelism_1GTPShardHandle:
    __slots__ = ()


class k_megatron_1core_1tensor_0parallel_1generalized_0tensor_0parallelism_1GTPShardedParam:
    __slots__ = ()


class k_megatron_1core_1tensor_0parallel_1generalized_0tensor_0parallelism_1_0TicketSlot:
    __slots__ = ()


class k_megatron_1core_1tensor_0parallel_1generalized_0tensor_0parallelism_1GTPWeightCache:
    __slots__ = ()


class k_megatron_1core_1tensor_0parallel_1generalized_0tensor_0parallelism_1BatchedNVFP4AllGatherAsyncHandle:
    __slots__ = ()


class k_megatron_1core_1tensor_0parallel_1generalized_0tensor_0parallelism_1GTPEmbeddingWeight:
    __slots__ = ()


class k_megatron_1core_1tensor_0parallel_1layers_1VocabParallelEmbedding:
    __slots__ = ()


class k_megatron_1core_1tensor_0parallel_1layers_1LinearWithFrozenWeight:
    __slots__ = ()


class k_megatron_1core_1tensor_0parallel_1layers_1LinearWithGradAccumulationAndAsyncCommunication:
    __slots__ = ()


class k_megatron_1core_1tensor_0parallel_1layers_1ColumnParallelLinear:
    __slots__ = ()


class k_megatron_1core_1tensor_0parallel_1layers_1RowParallelLinear:
    __slots__ = ()


class k_megatron_1core_1tensor_0parallel_1mappings_1_0CopyToModelParallelRegion:
    __slots__ = ()


class k_megatron_1core_1tensor_0parallel_1mappings_1_0ReduceFromModelParallelRegion:
    __slots__ = ()


class k_megatron_1core_1tensor_0parallel_1mappings_1_0ScatterToModelParallelRegion:
    __slots__ = ()


class k_megatron_1core_1tensor_0parallel_1mappings_1_0GatherFromModelParallelRegion:
    __slots__ = ()


class k_megatron_1core_1tensor_0parallel_1mappings_1_0ScatterToSequenceParallelRegion:
    __slots__ = ()


class k_megatron_1core_1tensor_0parallel_1mappings_1_0GatherFromSequenceParallelRegion:
    __slots__ = ()


class k_megatron_1core_1tensor_0parallel_1mappings_1_0ReduceScatterToSequenceParallelRegion:
    __slots__ = ()


class k_megatron_1core_1tensor_0parallel_1mappings_1_0AllGatherFromTensorParallelRegion:
    __slots__ = ()


class k_megatron_1core_1tensor_0parallel_1mappings_1_0ReduceScatterToTensorParallelRegion:
    __slots__ = ()


class k_megatron_1core_1tensor_0parallel_1mappings_1_0AllToAll:
    __slots__ = ()


class k_megatron_1core_1tensor_0parallel_1random_1CudaRNGStatesTracker:
    __slots__ = ()


class k_megatron_1core_1tensor_0parallel_1random_1CheckpointFunction:
    __slots__ = ()


class k_megatron_1core_1tensor_0parallel_1random_1CheckpointWithoutOutputFunction:
    __slots__ = ()


class k_megatron_1core_1tensor_0parallel_1random_1CheckpointWithoutOutput:
    __slots__ = ()


class k_megatron_1core_1tensor_0parallel_1utils_1VocabUtility:
    __slots__ = ()


class k_megatron_1core_1timers_1TimerBase:
    __slots__ = ()


class k_megatron_1core_1timers_1DummyTimer:
    __slots__ = ()


class k_megatron_1core_1timers_1Timer:
    __slots__ = ()


class k_megatron_1core_1timers_1Timers:
    __slots__ = ()


class k_megatron_1core_1tokenizers_1base_0tokenizer_1MegatronTokenizerBase:
    __slots__ = ()


class k_megatron_1core_1tokenizers_1megatron_0tokenizer_1MegatronTokenizer:
    __slots__ = ()


class k_megatron_1core_1tokenizers_1text_1libraries_1abstract_0tokenizer_1MegatronTokenizerTextAbstract:
    __slots__ = ()


class k_megatron_1core_1tokenizers_1text_1libraries_1bytelevel_0tokenizer_1ByteLevelTokenizer:
    __slots__ = ()


class k_megatron_1core_1tokenizers_1text_1libraries_1chat_0template_1MegatronTokenizerChatTemplate:
    __slots__ = ()


class k_megatron_1core_1tokenizers_1text_1libraries_1huggingface_0tokenizer_1HuggingFaceTokenizer:
    __slots__ = ()


class k_megatron_1core_1tokenizers_1text_1libraries_1megatron_0hf_0tokenizer_1MegatronHFTokenizer:
    __slots__ = ()


class k_megatron_1core_1tokenizers_1text_1libraries_1null_0tokenizer_1NullTokenizer:
    __slots__ = ()


class k_megatron_1core_1tokenizers_1text_1libraries_1sentencepiece_0tokenizer_1SentencePieceTokenizer:
    __slots__ = ()


class k_megatron_1core_1tokenizers_1text_1libraries_1sft_0tokenizer_1PromptConfig:
    __slots__ = ()


class k_megatron_1core_1tokenizers_1text_1libraries_1sft_0tokenizer_1SFTTokenizer:
    __slots__ = ()


class k_megatron_1core_1tokenizers_1text_1libraries_1tiktoken_0tokenizer_1TikTokenTokenizer:
    __slots__ = ()


class k_megatron_1core_1tokenizers_1text_1models_1bert_0tokenizer_1BertTokenizer:
    __slots__ = ()


class k_megatron_1core_1tokenizers_1text_1models_1default_0tokenizer_1DefaultTokenizerText:
    __slots__ = ()


class k_megatron_1core_1tokenizers_1text_1models_1gpt_0tokenizer_1GPTTokenizer:
    __slots__ = ()


class k_megatron_1core_1tokenizers_1text_1models_1mamba_0tokenizer_1MambaTokenizer:
    __slots__ = ()


class k_megatron_1core_1tokenizers_1text_1models_1t5_0tokenizer_1T5Tokenizer:
    __slots__ = ()


class k_megatron_1core_1tokenizers_1text_1parsers_1base_0parser_1BaseParser:
    __slots__ = ()


class k_megatron_1core_1tokenizers_1text_1parsers_1deepseek_0r1_0reasoning_0parser_1DeepSeekR1ReasoningParser:
    __slots__ = ()


class k_megatron_1core_1tokenizers_1text_1parsers_1nemotron_0v3_0reasoning_0parser_1NemotronV3ReasoningParser:
    __slots__ = ()


class k_megatron_1core_1tokenizers_1text_1parsers_1qwen3_0coder_0tool_0parser_1_0Qwen3CoderToolParser:
    __slots__ = ()


class k_megatron_1core_1tokenizers_1text_1parsers_1qwen3_0coder_0tool_0parser_1Qwen3CoderToolParser:
    __slots__ = ()


class k_megatron_1core_1tokenizers_1text_1text_0tokenizer_1MegatronTokenizerText:
    __slots__ = ()


class k_megatron_1core_1tokenizers_1vision_1libraries_1multimodal_0tokenizer_1MegatronMultimodalTokenizer:
    __slots__ = ()


class k_megatron_1core_1tokenizers_1vision_1libraries_1null_0multimodal_0tokenizer_1MegatronNullMultimodalTokenizer:
    __slots__ = ()


class k_megatron_1core_1tokenizers_1vision_1models_1default_0tokenizer_1DefaultTokenizerVision:
    __slots__ = ()


class k_megatron_1core_1tokenizers_1vision_1vision_0tokenizer_1MegatronTokenizerVision:
    __slots__ = ()


class k_megatron_1core_1transformer_1attention_1LinearQkvInterface:
    __slots__ = ()


class k_megatron_1core_1transformer_1attention_1LinearQkvBuilder:
    __slots__ = ()


class k_megatron_1core_1transformer_1attention_1LinearInterface:
    __slots__ = ()


class k_megatron_1core_1transformer_1attention_1LinearLayerBuilder:
    __slots__ = ()


class k_megatron_1core_1transformer_1attention_1CoreAttentionInterface:
    __slots__ = ()


class k_megatron_1core_1transformer_1attention_1CoreAttentionBuilder:
    __slots__ = ()


class k_megatron_1core_1transformer_1attention_1LinearProjInterface:
    __slots__ = ()


class k_megatron_1core_1transformer_1attention_1LinearProjBuilder:
    __slots__ = ()


class k_megatron_1core_1transformer_1attention_1SelfAttentionSubmodules:
    __slots__ = ()


class k_megatron_1core_1transformer_1attention_1CrossAttentionSubmodules:
    __slots__ = ()


class k_megatron_1core_1transformer_1attention_1Attention:
    __slots__ = ()


class k_megatron_1core_1transformer_1attention_1SelfAttention:
    __slots__ = ()


class k_megatron_1core_1transformer_1attention_1CrossAttention:
    __slots__ = ()


class k_megatron_1core_1transformer_1cuda_0graphs_1CudagraphBufferMetadata:
    __slots__ = ()


class k_megatron_1core_1transformer_1cuda_0graphs_1ArgMetadata:
    __slots__ = ()


class k_megatron_1core_1transformer_1cuda_0graphs_1_0CudagraphGlobalRecord:
    __slots__ = ()


class k_megatron_1core_1transformer_1cuda_0graphs_1_0GraphStatus:
    __slots__ = ()


class k_megatron_1core_1transformer_1cuda_0graphs_1_0CudagraphRecordNode:
    __slots__ = ()


class k_megatron_1core_1transformer_1cuda_0graphs_1_0CudagraphReplayNode:
    __slots__ = ()


class k_megatron_1core_1transformer_1cuda_0graphs_1_0CudaGraphRunner:
    __slots__ = ()


class k_megatron_1core_1transformer_1cuda_0graphs_1CudaGraphManager:
    __slots__ = ()


class k_megatron_1core_1transformer_1cuda_0graphs_1TECudaGraphHelper:
    __slots__ = ()


class k_megatron_1core_1transformer_1cuda_0graphs_1VisionTECudaGraphHelper:
    __slots__ = ()


class k_megatron_1core_1transformer_1custom_0layers_1batch_0invariant_0kernels_1AttentionBlockSize:
    __slots__ = ()


class k_megatron_1core_1transformer_1custom_0layers_1batch_0invariant_0kernels_1BatchInvariantTEGemmFn:
    __slots__ = ()


class k_megatron_1core_1transformer_1custom_0layers_1batch_0invariant_0kernels_1BatchInvariantRMSNormFn:
    __slots__ = ()


class k_megatron_1core_1transformer_1dot_0product_0attention_1DotProductAttention:
    __slots__ = ()


class k_megatron_1core_1transformer_1enums_1ModelType:
    __slots__ = ()


class k_megatron_1core_1transformer_1enums_1LayerType:
    __slots__ = ()


class k_megatron_1core_1transformer_1enums_1AttnType:
    __slots__ = ()


class k_megatron_1core_1transformer_1enums_1AttnMaskType:
    __slots__ = ()


class k_megatron_1core_1transformer_1enums_1AttnBackend:
    __slots__ = ()


class k_megatron_1core_1transformer_1enums_1CudaGraphModule:
    __slots__ = ()


class k_megatron_1core_1transformer_1enums_1CudaGraphScope:
    __slots__ = ()


class k_megatron_1core_1transformer_1enums_1InferenceCudaGraphScope:
    __slots__ = ()


class k_megatron_1core_1transformer_1identity_0op_1IdentityOp:
    __slots__ = ()


class k_megatron_1core_1transformer_1identity_0op_1IdentityFuncOp:
    __slots__ = ()


class k_megatron_1core_1transformer_1mla_0qk_0norm_0config_1QKNormConfigResolver:
    __slots__ = ()


class k_megatron_1core_1transformer_1mlp_1LinearFc1Interface:
    __slots__ = ()


class k_megatron_1core_1transformer_1mlp_1LinearFc1Builder:
    __slots__ = ()


class k_megatron_1core_1transformer_1mlp_1TEActivationFunctionInterface:
    __slots__ = ()


class k_megatron_1core_1transformer_1mlp_1TEActivationFunctionBuilder:
    __slots__ = ()


class k_megatron_1core_1transformer_1mlp_1LinearFc2Interface:
    __slots__ = ()


class k_megatron_1core_1transformer_1mlp_1LinearFc2Builder:
    __slots__ = ()


class k_megatron_1core_1transformer_1mlp_1MLPSubmodules:
    __slots__ = ()


class k_megatron_1core_1transformer_1mlp_1MLP:
    __slots__ = ()


class k_megatron_1core_1transformer_1module_1MegatronModule:
    __slots__ = ()


class k_megatron_1core_1transformer_1module_1GraphableMegatronModule:
    __slots__ = ()


class k_megatron_1core_1transformer_1module_1Float16Module:
    __slots__ = ()


class k_megatron_1core_1transformer_1moe_1experts_1GroupedLinearFc1Interface:
    __slots__ = ()


class k_megatron_1core_1transformer_1moe_1experts_1GroupedLinearFc1Builder:
    __slots__ = ()


class k_megatron_1core_1transformer_1moe_1experts_1GroupedLinearFc2Interface:
    __slots__ = ()


class k_megatron_1core_1transformer_1moe_1experts_1GroupedLinearFc2Builder:
    __slots__ = ()


class k_megatron_1core_1transformer_1moe_1experts_1GroupedMLPSubmodules:
    __slots__ = ()


class k_megatron_1core_1transformer_1moe_1experts_1TEGroupedMLP:
    __slots__ = ()


class k_megatron_1core_1transformer_1moe_1experts_1InferenceGroupedMLP:
    __slots__ = ()


class k_megatron_1core_1transformer_1moe_1experts_1SequentialMLP:
    __slots__ = ()


class k_megatron_1core_1transformer_1moe_1fused_0a2a_1FusedDispatch:
    __slots__ = ()


class k_megatron_1core_1transformer_1moe_1fused_0a2a_1FusedCombine:
    __slots__ = ()


class k_megatron_1core_1transformer_1moe_1fused_0a2a_1HybridEPDispatch:
    __slots__ = ()


class k_megatron_1core_1transformer_1moe_1fused_0a2a_1HybridEPCombine:
    __slots__ = ()


class k_megatron_1core_1transformer_1moe_1moe_0layer_1ExpertsInterface:
    __slots__ = ()


class k_megatron_1core_1transformer_1moe_1moe_0layer_1ExpertsBuilder:
    __slots__ = ()


class k_megatron_1core_1transformer_1moe_1moe_0layer_1SharedExpertsInterface:
    __slots__ = ()


class k_megatron_1core_1transformer_1moe_1moe_0layer_1SharedExpertsBuilder:
    __slots__ = ()


class k_megatron_1core_1transformer_1moe_1moe_0layer_1RouterInterface:
    __slots__ = ()


class k_megatron_1core_1transformer_1moe_1moe_0layer_1RouterBuilder:
    __slots__ = ()


class k_megatron_1core_1transformer_1moe_1moe_0layer_1MoESubmodules:
    __slots__ = ()


class k_megatron_1core_1transformer_1moe_1moe_0layer_1BaseMoELayer:
    __slots__ = ()


class k_megatron_1core_1transformer_1moe_1moe_0layer_1MoELayer:
    __slots__ = ()


class k_megatron_1core_1transformer_1moe_1moe_0layer_1_0RecordExpertDgradCompletion:
    __slots__ = ()


class k_megatron_1core_1transformer_1moe_1moe_0layer_1_0RegisterDelayedWgradForExperts:
    __slots__ = ()


class k_megatron_1core_1transformer_1moe_1moe_0logging_1MetricEntry:
    __slots__ = ()


class k_megatron_1core_1transformer_1moe_1moe_0logging_1MoEMetricsTracker:
    __slots__ = ()


class k_megatron_1core_1transformer_1moe_1moe_0utils_1MoEAuxLossAutoScaler:
    __slots__ = ()


class k_megatron_1core_1transformer_1moe_1moe_0utils_1RandomSTE:
    __slots__ = ()


class k_megatron_1core_1transformer_1moe_1moe_0utils_1RandomSTEShared:
    __slots__ = ()


class k_megatron_1core_1transformer_1moe_1moe_0utils_1RouterGatingLinearFunction:
    __slots__ = ()


class k_megatron_1core_1transformer_1moe_1moe_0utils_1MoECudaGraphPartialCaptureSignal:
    __slots__ = ()


class k_megatron_1core_1transformer_1moe_1moe_0utils_1MoECudaGraphTensorStore:
    __slots__ = ()


class k_megatron_1core_1transformer_1moe_1paged_0stash_1PagedStashBuffer:
    __slots__ = ()


class k_megatron_1core_1transformer_1moe_1paged_0stash_1PagedTensor:
    __slots__ = ()


class k_megatron_1core_1transformer_1moe_1paged_0stash_1PipelinePreScheduleFunction:
    __slots__ = ()


class k_megatron_1core_1transformer_1moe_1paged_0stash_1PipelinePostScheduleFunction:
    __slots__ = ()


class k_megatron_1core_1transformer_1moe_1paged_0stash_1PagedStashManager:
    __slots__ = ()


class k_megatron_1core_1transformer_1moe_1paged_0stash_1PagedStashContext:
    __slots__ = ()


class k_megatron_1core_1transformer_1moe_1paged_0stash_1PagedStashRunner:
    __slots__ = ()


class k_megatron_1core_1transformer_1moe_1router_1Router:
    __slots__ = ()


class k_megatron_1core_1transformer_1moe_1router_1TopKRouter:
    __slots__ = ()


class k_megatron_1core_1transformer_1moe_1router_1InferenceTopKRouter:
    __slots__ = ()


class k_megatron_1core_1transformer_1moe_1router_0replay_1RouterReplayAction:
    __slots__ = ()


class k_megatron_1core_1transformer_1moe_1router_0replay_1RouterReplay:
    __slots__ = ()


class k_megatron_1core_1transformer_1moe_1router_0trace_1RouterTracer:
    __slots__ = ()


class k_megatron_1core_1transformer_1moe_1shared_0experts_1SharedExpertState:
    __slots__ = ()


class k_megatron_1core_1transformer_1moe_1shared_0experts_1_0BackwardStreamWait:
    __slots__ = ()


class k_megatron_1core_1transformer_1moe_1shared_0experts_1SharedExpertMLP:
    __slots__ = ()


class k_megatron_1core_1transformer_1moe_1shared_0experts_1FusedSharedExpertMLP:
    __slots__ = ()


class k_megatron_1core_1transformer_1moe_1token_0dispatcher_1MoETokenDispatcher:
    __slots__ = ()


class k_megatron_1core_1transformer_1moe_1token_0dispatcher_1MoEAllGatherTokenDispatcher:
    __slots__ = ()


class k_megatron_1core_1transformer_1moe_1token_0dispatcher_1MoEAlltoAllTokenDispatcher:
    __slots__ = ()


class k_megatron_1core_1transformer_1moe_1token_0dispatcher_1_0DispatchManager:
    __slots__ = ()


class k_megatron_1core_1transformer_1moe_1token_0dispatcher_1_0HybridEPManager:
    __slots__ = ()


class k_megatron_1core_1transformer_1moe_1token_0dispatcher_1_0DeepepManager:
    __slots__ = ()


class k_megatron_1core_1transformer_1moe_1token_0dispatcher_1_0NCCLEPManager:
    __slots__ = ()


class k_megatron_1core_1transformer_1moe_1token_0dispatcher_1MoEFlexTokenDispatcher:
    __slots__ = ()


class k_megatron_1core_1transformer_1moe_1token_0dispatcher_0inference_1InferenceAllGatherDispatcherBase:
    __slots__ = ()


class k_megatron_1core_1transformer_1moe_1token_0dispatcher_0inference_1NCCLAllGatherDispatcher:
    __slots__ = ()


class k_megatron_1core_1transformer_1moe_1token_0dispatcher_0inference_1NVLSAllGatherVDispatcher:
    __slots__ = ()


class k_megatron_1core_1transformer_1moe_1upcycling_0utils_1ExpertsType:
    __slots__ = ()


class k_megatron_1core_1transformer_1moe_1upcycling_0utils_1ActivationFuncName:
    __slots__ = ()


class k_megatron_1core_1transformer_1multi_0latent_0attention_1MLASelfAttentionSubmodules:
    __slots__ = ()


class k_megatron_1core_1transformer_1multi_0latent_0attention_1MultiLatentAttention:
    __slots__ = ()


class k_megatron_1core_1transformer_1multi_0latent_0attention_1MLASelfAttention:
    __slots__ = ()


class k_megatron_1core_1transformer_1multi_0latent_0attention_1FusedMLASelfAttention:
    __slots__ = ()


class k_megatron_1core_1transformer_1multi_0token_0prediction_1MTPLossLoggingHelper:
    __slots__ = ()


class k_megatron_1core_1transformer_1multi_0token_0prediction_1MultiTokenPredictionLayerSubmodules:
    __slots__ = ()


class k_megatron_1core_1transformer_1multi_0token_0prediction_1MTPLossAutoScaler:
    __slots__ = ()


class k_megatron_1core_1transformer_1multi_0token_0prediction_1MultiTokenPredictionLayer:
    __slots__ = ()


class k_megatron_1core_1transformer_1multi_0token_0prediction_1MultiTokenPredictionBlockSubmodules:
    __slots__ = ()


class k_megatron_1core_1transformer_1multi_0token_0prediction_1MultiTokenPredictionBlock:
    __slots__ = ()


class k_megatron_1core_1transformer_1pipeline_0parallel_0layer_0layout_1PipelineParallelLayerLayout:
    __slots__ = ()


class k_megatron_1core_1transformer_1spec_0utils_1ModuleSpec:
    __slots__ = ()


class k_megatron_1core_1transformer_1torch_0norm_1LayerNormInterface:
    __slots__ = ()


class k_megatron_1core_1transformer_1torch_0norm_1LayerNormBuilder:
    __slots__ = ()


class k_megatron_1core_1transformer_1torch_0norm_1WrappedTorchNorm:
    __slots__ = ()


class k_megatron_1core_1transformer_1torch_0norm_1L2Norm:
    __slots__ = ()


class k_megatron_1core_1transformer_1transformer_0block_1LayerNormImpl:
    __slots__ = ()


class k_megatron_1core_1transformer_1transformer_0block_1TransformerBlockSubmodules:
    __slots__ = ()


class k_megatron_1core_1transformer_1transformer_0block_1TransformerBlock:
    __slots__ = ()


class k_megatron_1core_1transformer_1transformer_0config_1TransformerConfig:
    __slots__ = ()


class k_megatron_1core_1transformer_1transformer_0config_1MLATransformerConfig:
    __slots__ = ()


class k_megatron_1core_1transformer_1transformer_0layer_1MlpInterface:
    __slots__ = ()


class k_megatron_1core_1transformer_1transformer_0layer_1MlpBuilder:
    __slots__ = ()


class k_megatron_1core_1transformer_1transformer_0layer_1TransformerLayerSubmodules:
    __slots__ = ()


class k_megatron_1core_1transformer_1transformer_0layer_1BaseTransformerLayer:
    __slots__ = ()


class k_megatron_1core_1transformer_1transformer_0layer_1TransformerLayer:
    __slots__ = ()


class k_megatron_1core_1transformer_1transformer_0layer_1MoETransformerLayer:
    __slots__ = ()


class k_megatron_1core_1typed_0torch_1_0Module:
    __slots__ = ()


class k_megatron_1core_1utils_1ExperimentalNotEnabledError:
    __slots__ = ()


class k_megatron_1core_1utils_1GlobalMemoryBuffer:
    __slots__ = ()


class k_megatron_1core_1utils_1WrappedTensor:
    __slots__ = ()


class k_megatron_1core_1utils_1MakeViewlessTensor:
    __slots__ = ()


class k_megatron_1core_1utils_1_0ValueWithRank:
    __slots__ = ()


class k_megatron_1core_1utils_1_0StragglerData:
    __slots__ = ()


class k_megatron_1core_1utils_1StragglerDetector:
    __slots__ = ()


class k_megatron_1training_1activation_0logging_1ActivationLogger:
    __slots__ = ()


class k_megatron_1training_1argument_0utils_1TypeInferenceError:
    __slots__ = ()


class k_megatron_1training_1argument_0utils_1ArgumentGroupFactory:
    __slots__ = ()


class k_megatron_1training_1checkpointing_1CheckpointType:
    __slots__ = ()


class k_megatron_1training_1config_1common_0config_1RNGConfig:
    __slots__ = ()


class k_megatron_1training_1config_1common_0config_1ProfilingConfig:
    __slots__ = ()


class k_megatron_1training_1config_1common_0config_1DistributedInitConfig:
    __slots__ = ()


class k_megatron_1training_1config_1container_1ConfigContainerBase:
    __slots__ = ()


class k_megatron_1training_1config_1container_1PretrainConfigContainer:
    __slots__ = ()


class k_megatron_1training_1config_1container_1InferenceConfigContainer:
    __slots__ = ()


class k_megatron_1training_1config_1inference_0config_1InferenceSetupConfig:
    __slots__ = ()


class k_megatron_1training_1config_1instantiate_0utils_1InstantiationException:
    __slots__ = ()


class k_megatron_1training_1config_1instantiate_0utils_1InstantiationMode:
    __slots__ = ()


class k_megatron_1training_1config_1instantiate_0utils_1_0Keys:
    __slots__ = ()


class k_megatron_1training_1config_1instantiate_0utils_1TargetAllowlist:
    __slots__ = ()


class k_megatron_1training_1config_1resilience_0config_1RerunStateMachineConfig:
    __slots__ = ()


class k_megatron_1training_1config_1resilience_0config_1StragglerDetectionConfig:
    __slots__ = ()


class k_megatron_1training_1config_1training_0config_1TrainingConfig:
    __slots__ = ()


class k_megatron_1training_1config_1training_0config_1ValidationConfig:
    __slots__ = ()


class k_megatron_1training_1config_1training_0config_1SchedulerConfig:
    __slots__ = ()


class k_megatron_1training_1config_1training_0config_1LoggerConfig:
    __slots__ = ()


class k_megatron_1training_1config_1training_0config_1CheckpointConfig:
    __slots__ = ()


class k_megatron_1training_1config_1training_0config_1TokenizerConfig:
    __slots__ = ()


class k_megatron_1training_1datasets_1data_0samplers_1MegatronPretrainingSampler:
    __slots__ = ()


class k_megatron_1training_1datasets_1data_0samplers_1HybridCPMegatronPretrainingSampler:
    __slots__ = ()


class k_megatron_1training_1datasets_1data_0samplers_1MegatronFullValidationSampler:
    __slots__ = ()


class k_megatron_1training_1datasets_1data_0samplers_1RandomSeedDataset:
    __slots__ = ()


class k_megatron_1training_1datasets_1data_0samplers_1MegatronPretrainingRandomSampler:
    __slots__ = ()


class k_megatron_1training_1datasets_1fim_0dataset_1GPTFIMDatasetConfig:
    __slots__ = ()


class k_megatron_1training_1datasets_1fim_0dataset_1GPTFIMDataset:
    __slots__ = ()


class k_megatron_1training_1datasets_1sft_0dataset_1SFTLowLevelDataset:
    __slots__ = ()


class k_megatron_1training_1datasets_1sft_0dataset_1SFTDataset:
    __slots__ = ()


class k_megatron_1training_1dgrad_0logging_1DataGradLogger:
    __slots__ = ()


class k_megatron_1training_1dist_0signal_0handler_1DistributedSignalHandler:
    __slots__ = ()


class k_megatron_1training_1distillation_1cached_0logits_0loss_1StudentLogitsCapture:
    __slots__ = ()


class k_megatron_1training_1distillation_1cached_0logits_0loss_1TeacherTarDataset:
    __slots__ = ()


class k_megatron_1training_1distillation_1cached_0logits_0loss_1CachedLogitsKDLoss:
    __slots__ = ()


class k_megatron_1training_1distillation_1cached_0logits_0loss_1LossFuncCallable:
    __slots__ = ()


class k_megatron_1training_1distillation_1logits_0saver_1LogitsSaverHooks:
    __slots__ = ()


class k_megatron_1training_1distillation_1utils_0logits_1LogprobsTarEntry:
    __slots__ = ()


class k_megatron_1training_1distillation_1utils_0logits_1TarShardPrefetcher:
    __slots__ = ()


class k_megatron_1training_1log_0handler_1CustomHandler:
    __slots__ = ()


class k_megatron_1training_1models_1base_1Serializable:
    __slots__ = ()


class k_megatron_1training_1models_1base_1ModelConfig:
    __slots__ = ()


class k_megatron_1training_1models_1base_1ModelBuilder:
    __slots__ = ()


class k_megatron_1training_1models_1gpt_1GPTModelConfig:
    __slots__ = ()


class k_megatron_1training_1models_1gpt_1GPTModelBuilder:
    __slots__ = ()


class k_megatron_1training_1models_1hybrid_1HybridModelConfig:
    __slots__ = ()


class k_megatron_1training_1models_1hybrid_1HybridModelBuilder:
    __slots__ = ()


for _name in [n for n in globals() if n.startswith("k_")]:
    del globals()[_name]
