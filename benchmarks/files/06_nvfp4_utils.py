def nvfp4_weight_padding_bytes(layer: torch.nn.Module) -> int:
    """Compute K-dim padding (packed bytes) of an NVFP4 weight,
    Aligned with `pad_nvfp4_weight_for_cutlass` above.
    """
    return layer.weight.shape[1] - layer.input_size_per_partition // 2


def pad_nvfp4_activation_for_cutlass(
    x_fp4: torch.Tensor,
    weights_padding_bytes: int,
) -> torch.Tensor:
    """Pad packed FP4 activations to match the K-dimension padding applied to weights.
    The padding is in bytes (tensor dimension), not FP4 elements.
    """
    if weights_padding_bytes > 0:
        return torch.nn.functional.pad(x_fp4, (0, weights_padding_bytes)).contiguous()
    return x_fp4


def slice_nvfp4_output(
    out: torch.Tensor,
    output_size: int,
) -> torch.Tensor:
    """Slice the output tensor to remove padding in N dimension if weight was padded."""
    if out.shape[-1] != output_size:
        return out[..., :output_size].contiguous()
    return out
