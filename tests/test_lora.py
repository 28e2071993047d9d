"""Our LoRA merge equals peft's, on a tiny random model in the same on-disk layout."""

import pytest
import torch

from hsedit.engine.lora import merge_lora
from hsedit.errors import ModelError

peft = pytest.importorskip("peft")


def tiny_model():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2,
    )
    return LlamaForCausalLM(config).eval()


def test_merge_matches_peft(tmp_path):
    model = tiny_model()
    config = peft.LoraConfig(
        r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "down_proj"], init_lora_weights=False
    )
    adapted = peft.get_peft_model(model, config)
    adapted.save_pretrained(tmp_path)
    ids = torch.tensor([[1, 5, 9, 13, 2]])
    with torch.no_grad():
        expected = adapted(input_ids=ids).logits
    base = tiny_model()  # same seed: the same base weights
    assert merge_lora(base.state_dict(), tmp_path) == 2 * 3
    with torch.no_grad():
        merged = base(input_ids=ids).logits
    assert torch.allclose(merged, expected, atol=1e-5)
    assert not torch.allclose(tiny_model()(input_ids=ids).logits, expected, atol=1e-3)


def test_missing_adapter_is_a_model_error(tmp_path):
    with pytest.raises(ModelError, match="cannot read the LoRA adapter"):
        merge_lora(tiny_model().state_dict(), tmp_path)
