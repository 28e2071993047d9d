"""DSpark: a block drafter that reads the target's hidden states (plain torch, no engine).

One pass of a small backbone turns the anchor (the token the target just emitted) and
`block_size - 1` mask slots into hidden states h_1..h_L; slot k attends to every earlier
context position (features of several target layers, projected once and cached) and to the
whole block. A low-rank Markov head then makes token k depend on token k-1, and a confidence
head estimates c_k = P(x_k accepted | x_<k accepted). Survival a_k = prod_{i<=k} c_i.

Checkpoints use deepseek-ai/DeepSpec's layout (`Qwen3DSparkModel`: config.json +
safetensors, same field and tensor names), so released drafters load. Ours omit
`embed_tokens`/`lm_head` and take the target's (`shares_target_embeddings`), and carry their
Sequential Temperature Scaling temperatures under `hsedit` in config.json.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

ARCHITECTURE = "Qwen3DSparkModel"
WEIGHTS_FILE = "model.safetensors"
SHARED_WEIGHTS = ("embed_tokens.weight", "lm_head.weight")


@dataclass(frozen=True)
class DSparkConfig:
    hidden_size: int
    intermediate_size: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    vocab_size: int
    num_hidden_layers: int  # draft layers
    num_target_layers: int
    target_layer_ids: tuple[int, ...]  # -1 is the embedding output, i the output of layer i
    block_size: int = 7
    mask_token_id: int = 0
    markov_rank: int = 32
    markov_head_type: str = "vanilla"
    enable_confidence_head: bool = True
    confidence_head_with_markov: bool = True
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    # hsedit's additions, stored under "hsedit" in config.json
    sts_temperatures: tuple[float, ...] = ()
    # Mean survival per block position on the trainer's held-out blocks: what the hybrid expects
    # of a request's DSpark chain before it has seen one (empty: it finds out by drafting).
    expected_survival: tuple[float, ...] = ()
    shares_target_embeddings: bool = True
    target: str = ""
    # EAGLE's input: the anchor row adds the projected target features of the position before
    # it (those that predicted the anchor) to its embedding, so the first drafted token reads
    # the target's last state directly instead of finding it by attention. No new weights:
    # DeepSpec's checkpoints (without the field) load with it off.
    anchor_feature: bool = False
    # FR-Spec's pruned head: draft only among this many tokens (those the target writes most
    # often, stored as the `draft_vocab` tensor); 0 drafts over the whole vocabulary. On a CPU
    # the LM head and the Markov head's output over 49k tokens are most of a pass; a token
    # outside the set is never drafted, which costs acceptance only where it was right.
    draft_vocab_size: int = 0

    def __post_init__(self) -> None:
        if self.markov_head_type != "vanilla" and self.markov_rank > 0:
            raise ValueError(f"markov_head_type {self.markov_head_type!r} is not supported (only 'vanilla')")
        ids = list(self.target_layer_ids)
        if not ids or ids != sorted(set(ids)) or ids[0] < -1 or ids[-1] >= self.num_target_layers:
            raise ValueError(f"target_layer_ids {ids} must be increasing within [-1, {self.num_target_layers})")

    @property
    def feature_size(self) -> int:
        return len(self.target_layer_ids) * self.hidden_size

    @classmethod
    def for_target(cls, target_config: dict, **overrides) -> DSparkConfig:
        """A drafter shaped for a HF target config (as a dict), with DeepSpec's layer spread."""
        target = target_config
        layers = int(target["num_hidden_layers"])
        heads = int(target["num_attention_heads"])
        values = dict(
            hidden_size=int(target["hidden_size"]),
            intermediate_size=int(target["intermediate_size"]),
            num_attention_heads=heads,
            num_key_value_heads=int(target.get("num_key_value_heads", heads)),
            head_dim=int(target.get("head_dim") or target["hidden_size"] // heads),
            vocab_size=int(target["vocab_size"]),
            num_hidden_layers=1,
            num_target_layers=layers,
            target_layer_ids=_spread_layers(layers, 3),
            rms_norm_eps=float(target.get("rms_norm_eps", 1e-6)),
            rope_theta=_rope_theta(target),
        )
        values.update(overrides)
        return cls(**values)

    @classmethod
    def from_dict(cls, raw: dict) -> DSparkConfig:
        extra = raw.get("hsedit", {})
        names = {f for f in cls.__dataclass_fields__}
        values = {k: v for k, v in raw.items() if k in names}
        values.update({k: v for k, v in extra.items() if k in names})
        values["target_layer_ids"] = tuple(int(i) for i in raw["target_layer_ids"])
        values["sts_temperatures"] = tuple(float(t) for t in values.get("sts_temperatures", ()))
        values["expected_survival"] = tuple(float(a) for a in values.get("expected_survival", ()))
        values["rope_theta"] = _rope_theta(raw)
        values.setdefault("num_target_layers", max(values["target_layer_ids"]) + 1)
        if "head_dim" not in values:
            values["head_dim"] = raw["hidden_size"] // raw["num_attention_heads"]
        if not raw.get("enable_confidence_head", True):
            values["confidence_head_with_markov"] = False
        values.setdefault("shares_target_embeddings", False)
        return cls(**values)

    def to_dict(self) -> dict:
        own = asdict(self)
        extra = {k: own.pop(k) for k in ("sts_temperatures", "expected_survival", "shares_target_embeddings", "target",
                                    "anchor_feature", "draft_vocab_size")}
        own["target_layer_ids"] = list(self.target_layer_ids)
        return {
            "architectures": [ARCHITECTURE],
            "model_type": "qwen3",
            "hidden_act": "silu",
            "attention_bias": False,
            "tie_word_embeddings": False,
            "layer_types": ["full_attention"] * self.num_hidden_layers,
            "rope_parameters": {"rope_type": "default", "rope_theta": self.rope_theta},
            **own,
            "hsedit": extra,
        }


def _spread_layers(num_layers: int, count: int) -> tuple[int, ...]:
    """Target layers spread from low to high, as DeepSpec's configs do (e.g. 1, 9, 17, 25, 33)."""
    last = num_layers - 3  # the final layers are too close to the output to add much
    step = max(1, (last - 1) // max(1, count - 1))
    return tuple(sorted({min(1 + i * step, last) for i in range(count)}))


def _rope_theta(raw: dict) -> float:
    if "rope_theta" in raw and raw["rope_theta"] is not None and not isinstance(raw["rope_theta"], dict):
        return float(raw["rope_theta"])
    params = raw.get("rope_parameters") or raw.get("rope_scaling") or {}
    if params.get("rope_type", "default") not in ("default", None):
        raise ValueError(f"rope type {params.get('rope_type')!r} is not supported by the DSpark drafter")
    return float(params.get("rope_theta", 10000.0))


class RMSNorm(nn.Module):
    def __init__(self, size: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        variance = x.float().pow(2).mean(-1, keepdim=True)
        return (x.float() * torch.rsqrt(variance + self.eps)).to(x.dtype) * self.weight


class Rotary(nn.Module):
    def __init__(self, head_dim: int, theta: float) -> None:
        super().__init__()
        inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def forward(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        angles = positions.float().unsqueeze(-1) * self.inv_freq  # [n, head_dim / 2]
        angles = torch.cat([angles, angles], dim=-1)
        return angles.cos(), angles.sin()


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    # x: [n, heads, head_dim]; cos, sin: [n, head_dim]
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos.unsqueeze(1) + rotated * sin.unsqueeze(1)


class DSparkLayer(nn.Module):
    """A Qwen3 decoder layer whose keys and values also come from the projected context."""

    def __init__(self, cfg: DSparkConfig) -> None:
        super().__init__()
        h, d = cfg.hidden_size, cfg.head_dim
        self.heads, self.kv_heads, self.head_dim = cfg.num_attention_heads, cfg.num_key_value_heads, d
        self.self_attn = nn.Module()
        self.self_attn.q_proj = nn.Linear(h, self.heads * d, bias=False)
        self.self_attn.k_proj = nn.Linear(h, self.kv_heads * d, bias=False)
        self.self_attn.v_proj = nn.Linear(h, self.kv_heads * d, bias=False)
        self.self_attn.o_proj = nn.Linear(self.heads * d, h, bias=False)
        self.self_attn.q_norm = RMSNorm(d, cfg.rms_norm_eps)
        self.self_attn.k_norm = RMSNorm(d, cfg.rms_norm_eps)
        self.mlp = nn.Module()
        self.mlp.gate_proj = nn.Linear(h, cfg.intermediate_size, bias=False)
        self.mlp.up_proj = nn.Linear(h, cfg.intermediate_size, bias=False)
        self.mlp.down_proj = nn.Linear(cfg.intermediate_size, h, bias=False)
        self.input_layernorm = RMSNorm(h, cfg.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(h, cfg.rms_norm_eps)

    def keys_values(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor):
        """Rotated keys and values of rows x: [n, hidden] -> 2 x [n, kv_heads, head_dim]."""
        attn = self.self_attn
        k = attn.k_norm(attn.k_proj(x).view(len(x), self.kv_heads, self.head_dim))
        v = attn.v_proj(x).view(len(x), self.kv_heads, self.head_dim)
        return _rotate(k, cos, sin), v

    def queries(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        """Rotated queries of rows x: [n, hidden] -> [n, heads, head_dim]."""
        attn = self.self_attn
        return _rotate(attn.q_norm(attn.q_proj(x).view(len(x), self.heads, self.head_dim)), cos, sin)

    def attend(self, q, k, v, mask: torch.Tensor | None) -> torch.Tensor:
        """q [n_query, heads, d], k/v [n_kv, kv_heads, d] -> [n_query, heads * d]."""
        out = F.scaled_dot_product_attention(
            q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1),
            attn_mask=mask, enable_gqa=self.heads != self.kv_heads,
        )  # [heads, n_query, head_dim]
        return out.transpose(0, 1).reshape(len(q), -1)

    def finish(self, x: torch.Tensor, attended: torch.Tensor) -> torch.Tensor:
        """Output projection, residual and MLP for rows x [n, hidden]."""
        x = x + self.self_attn.o_proj(attended)
        mlp = self.mlp
        normed = self.post_attention_layernorm(x)
        return x + mlp.down_proj(F.silu(mlp.gate_proj(normed)) * mlp.up_proj(normed))

    def forward(
        self,
        x: torch.Tensor,  # [n_query, hidden] block slots
        context_kv: tuple[torch.Tensor, torch.Tensor],  # 2 x [n_ctx, kv_heads, head_dim]
        cos: torch.Tensor,  # [n_query, head_dim]
        sin: torch.Tensor,
        mask: torch.Tensor | None,  # [n_query, n_ctx + n_query] True where attention is allowed
    ) -> torch.Tensor:
        normed = self.input_layernorm(x)
        q = self.queries(normed, cos, sin)
        k_block, v_block = self.keys_values(normed, cos, sin)
        k, v = torch.cat([context_kv[0], k_block]), torch.cat([context_kv[1], v_block])
        return self.finish(x, self.attend(q, k, v, mask))

    def forward_blocks(
        self,
        x: torch.Tensor,  # [batch * block_size, hidden] every request's block, request-major
        contexts: Sequence[tuple[torch.Tensor, torch.Tensor]],  # per request 2 x [n_ctx_i, kv_heads, d]
        cos: torch.Tensor,  # [batch * block_size, head_dim]
        sin: torch.Tensor,
    ) -> torch.Tensor:
        """`forward` for many requests at once: the projections and the MLP run on all rows
        together; only attention, whose context differs per request, runs request by request."""
        normed = self.input_layernorm(x)
        q = self.queries(normed, cos, sin)
        k_block, v_block = self.keys_values(normed, cos, sin)
        length = len(x) // len(contexts)
        attended = []
        for i, (k_ctx, v_ctx) in enumerate(contexts):
            rows = slice(i * length, (i + 1) * length)
            k = torch.cat([k_ctx, k_block[rows]])
            v = torch.cat([v_ctx, v_block[rows]])
            attended.append(self.attend(q[rows], k, v, None))
        return self.finish(x, torch.cat(attended))


class ContextCache:
    """One request's projected context: per draft layer, rotated keys and values (and, for a
    drafter whose anchor row reads the last context row, the projected rows), in buffers that
    grow by doubling (one copy per doubling instead of a `torch.cat` of the whole context every
    step)."""

    def __init__(self) -> None:
        # per draft layer keys [capacity, kv_heads, head_dim], then values, then optionally rows [capacity, hidden]
        self._buffers: list[torch.Tensor] = []
        self._layers = 0
        self._length = 0

    def __len__(self) -> int:
        return self._length

    @property
    def keys(self) -> list[torch.Tensor]:  # per layer [n_ctx, kv_heads, head_dim]
        return [k[: self._length] for k in self._buffers[: self._layers]]

    @property
    def values(self) -> list[torch.Tensor]:
        return [v[: self._length] for v in self._buffers[self._layers : 2 * self._layers]]

    @property
    def rows(self) -> torch.Tensor | None:
        """The projected context rows [n_ctx, hidden], if they were kept."""
        return self._buffers[-1][: self._length] if len(self._buffers) > 2 * self._layers else None

    def append(self, new: Sequence[tuple[torch.Tensor, torch.Tensor]], rows: torch.Tensor | None = None) -> None:
        """Per layer (keys, values) of the next positions, each [n, kv_heads, head_dim], and
        optionally their projected rows [n, hidden]."""
        tensors = [k for k, _ in new] + [v for _, v in new] + ([rows] if rows is not None else [])
        end = self._length + len(tensors[0])
        if not self._buffers:
            self._layers = len(new)
            self._buffers = [t.new_empty((max(end, 64), *t.shape[1:])) for t in tensors]
        elif end > len(self._buffers[0]):
            capacity = max(end, 2 * len(self._buffers[0]))
            self._buffers = [_grown(b, capacity, self._length) for b in self._buffers]
        for buffer, t in zip(self._buffers, tensors):
            buffer[self._length : end] = t
        self._length = end

    def truncate(self, length: int) -> None:
        self._length = min(self._length, length)


def _grown(buffer: torch.Tensor, capacity: int, used: int) -> torch.Tensor:
    out = buffer.new_empty((capacity, *buffer.shape[1:]))
    out[:used] = buffer[:used]
    return out


@dataclass(frozen=True)
class BlockDraft:
    tokens: torch.Tensor  # [batch, block_size] greedy draft tokens
    confidences: torch.Tensor  # [batch, block_size] calibrated c_k
    survival: torch.Tensor  # [batch, block_size] prod_{i<=k} c_i, non-increasing


class DSparkDrafter(nn.Module):
    def __init__(self, cfg: DSparkConfig) -> None:
        super().__init__()
        self.config = cfg
        h = cfg.hidden_size
        self.embed_tokens = nn.Embedding(cfg.vocab_size, h)
        self.lm_head = nn.Linear(h, cfg.vocab_size, bias=False)
        self.layers = nn.ModuleList(DSparkLayer(cfg) for _ in range(cfg.num_hidden_layers))
        self.norm = RMSNorm(h, cfg.rms_norm_eps)
        self.fc = nn.Linear(cfg.feature_size, h, bias=False)
        self.hidden_norm = RMSNorm(h, cfg.rms_norm_eps)
        self.rotary = Rotary(cfg.head_dim, cfg.rope_theta)
        self.markov_head = None
        if cfg.markov_rank > 0:
            self.markov_head = nn.Module()
            self.markov_head.markov_w1 = nn.Embedding(cfg.vocab_size, cfg.markov_rank)
            self.markov_head.markov_w2 = nn.Linear(cfg.markov_rank, cfg.vocab_size, bias=False)
            nn.init.zeros_(self.markov_head.markov_w2.weight)  # starts as "no Markov bias"
        self.confidence_head = None
        if cfg.enable_confidence_head:
            width = h + (cfg.markov_rank if cfg.confidence_head_with_markov else 0)
            self.confidence_head = nn.Module()
            self.confidence_head.proj = nn.Linear(width, 1)
        temperatures = list(cfg.sts_temperatures) or [1.0] * cfg.block_size
        self.register_buffer("sts_temperatures", torch.tensor(temperatures), persistent=False)
        if cfg.draft_vocab_size:  # [draft_vocab_size] token ids, most frequent first
            self.register_buffer("draft_vocab", torch.arange(cfg.draft_vocab_size))
        # Inference's copies of the heads' rows for the draft vocabulary (see use_fast_head);
        # without them (training, calibration) drafting reads the live weights.
        self._fast_head: torch.Tensor | None = None
        self._fast_markov: torch.Tensor | None = None
        self.register_load_state_dict_post_hook(_refresh_fast_heads)

    # -- weights --------------------------------------------------------------------------
    def share_target_embeddings(self, embed_weight: torch.Tensor, lm_head_weight: torch.Tensor) -> None:
        """Use the target's input embeddings and LM head (frozen, not stored in checkpoints)."""
        vocab = self.config.vocab_size
        self.embed_tokens.weight = nn.Parameter(embed_weight[:vocab], requires_grad=False)
        self.lm_head.weight = nn.Parameter(lm_head_weight[:vocab], requires_grad=False)

    def own_state_dict(self) -> dict[str, torch.Tensor]:
        state = self.state_dict()
        if self.config.shares_target_embeddings:
            for name in SHARED_WEIGHTS:
                state.pop(name, None)
        return state

    # -- the backbone ---------------------------------------------------------------------
    def project_context(self, features: torch.Tensor) -> torch.Tensor:
        """Target features [n, len(target_layer_ids) * hidden] -> context rows [n, hidden]."""
        return self.hidden_norm(self.fc(features))

    def context_keys_values(self, context: torch.Tensor, positions: torch.Tensor):
        cos, sin = self.rotary(positions)
        return [layer.keys_values(context, cos, sin) for layer in self.layers]

    def block_inputs(self, anchors: torch.Tensor) -> torch.Tensor:
        """Anchor tokens [n] -> block token ids [n, block_size] (anchor, then mask slots)."""
        block = anchors.new_full((len(anchors), self.config.block_size), self.config.mask_token_id)
        block[:, 0] = anchors
        return block

    def block_embeddings(self, block_ids: torch.Tensor, anchor_rows: torch.Tensor | None) -> torch.Tensor:
        """Block token ids [n, L] -> input rows [n, L, hidden]; with `anchor_feature`, each
        anchor row also gets the projected context row before it (anchor_rows [n, hidden])."""
        x = self.embed_tokens(block_ids)
        if self.config.anchor_feature:
            x = torch.cat([(x[:, 0] + anchor_rows.to(x.dtype))[:, None], x[:, 1:]], dim=1)
        return x

    def run_backbone(self, block_ids, block_positions, context_kv, mask, anchor_rows=None) -> torch.Tensor:
        """block_ids [n, L] -> hidden [n * L, hidden]."""
        x = self.block_embeddings(block_ids, anchor_rows).reshape(-1, self.config.hidden_size)
        cos, sin = self.rotary(block_positions)
        for layer, kv in zip(self.layers, context_kv):
            x = layer(x, kv, cos, sin, mask)
        return self.norm(x)

    # -- heads ------------------------------------------------------------------------------
    def markov_bias(self, prev_tokens: torch.Tensor) -> torch.Tensor:
        if self.markov_head is None:
            return torch.zeros((), device=prev_tokens.device)
        return self.markov_head.markov_w2(self.markov_head.markov_w1(prev_tokens))

    def confidence_logits(self, hidden: torch.Tensor, prev_tokens: torch.Tensor) -> torch.Tensor:
        features = hidden
        if self.config.confidence_head_with_markov and self.markov_head is not None:
            # (with markov_rank 0 there is no Markov row: the head was built `hidden` wide)
            features = torch.cat([hidden, self.markov_head.markov_w1(prev_tokens)], dim=-1)
        return self.confidence_head.proj(features).squeeze(-1)

    # -- inference --------------------------------------------------------------------------
    def extend_context(self, cache: ContextCache, features: torch.Tensor) -> None:
        """Append target features of the next context positions to a request's cache."""
        self.extend_contexts([cache], [features])

    def extend_contexts(self, caches: Sequence[ContextCache], features: Sequence[torch.Tensor]) -> None:
        """`extend_context` for several requests in one pass (one projection for all rows)."""
        pairs = [(cache, rows) for cache, rows in zip(caches, features) if len(rows)]
        if not pairs:
            return
        device = pairs[0][1].device
        positions = torch.cat([torch.arange(len(c), len(c) + len(f), device=device) for c, f in pairs])
        rows = self.project_context(torch.cat([f for _, f in pairs]).to(self.fc.weight.dtype))
        new = self.context_keys_values(rows, positions)  # per layer (keys, values) of every row
        keep_rows = self.config.anchor_feature
        start = 0
        for cache, f in pairs:
            part = slice(start, start + len(f))
            cache.append([(k[part], v[part]) for k, v in new], rows[part] if keep_rows else None)
            start += len(f)

    def set_draft_vocab(self, token_ids: torch.Tensor) -> None:
        """Draft only among these token ids [draft_vocab_size] (FR-Spec); the config must say
        their number."""
        assert len(token_ids) == self.config.draft_vocab_size > 0
        self.draft_vocab.copy_(token_ids)
        self.refresh_fast_heads()

    def _draft_rows(self) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The LM head's and the Markov head's output rows of the draft vocabulary (all rows
        without one): [draft vocabulary, hidden], [draft vocabulary, markov_rank]."""
        head = self.lm_head.weight.detach()
        markov = None if self.markov_head is None else self.markov_head.markov_w2.weight.detach()
        if self.config.draft_vocab_size:
            head = head[self.draft_vocab]
            markov = None if markov is None else markov[self.draft_vocab]
        return head, markov

    def use_fast_head(self, dtype: torch.dtype | None) -> None:
        """For inference: draft with copies of the heads' rows of the draft vocabulary, the LM
        head's in `dtype` (None: its own). On CPUs with bf16 matrix units the LM head is most of
        a draft pass and bf16 reads half the bytes; a draft only has to be good, not exact (the
        target verifies it). Switching the model to training mode drops them (`train`), so a
        drafter trained further never drafts with its old heads."""
        head, markov = self._draft_rows()
        self._fast_head = head if dtype is None else head.to(dtype)
        self._fast_markov = markov

    def train(self, mode: bool = True):
        if mode:
            self._fast_head = self._fast_markov = None
        return super().train(mode)

    def refresh_fast_heads(self) -> None:
        """New weights loaded under copies made from the old ones: copy again."""
        if self._fast_head is not None:
            self.use_fast_head(self._fast_head.dtype)

    def draft_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """LM head logits for drafting: [..., hidden] -> [..., draft vocabulary] float32."""
        head = self._fast_head if self._fast_head is not None else self._draft_rows()[0]
        return F.linear(hidden.to(head.dtype), head).float()

    def greedy_chain(self, base_logits: torch.Tensor, anchors: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The Markov head fed its own tokens: base logits [n, L, draft vocabulary] (from
        `draft_logits`) and anchor tokens [n] -> (draft tokens [n, L], each slot's previous
        token [n, L]). Inference and the training-time calibration both draft through here."""
        markov = self._fast_markov if self._fast_head is not None else self._draft_rows()[1]
        tokens, prevs, prev = [], [], anchors
        for k in range(self.config.block_size):
            prevs.append(prev)
            logits = base_logits[:, k]
            if markov is not None:  # markov_bias, for the draft vocabulary's tokens only
                logits = logits + F.linear(self.markov_head.markov_w1(prev), markov).float()
            choice = logits.argmax(-1)
            prev = self.draft_vocab[choice] if self.config.draft_vocab_size else choice
            tokens.append(prev)
        return torch.stack(tokens, dim=1), torch.stack(prevs, dim=1)

    def block_hidden(self, caches: Sequence[ContextCache], anchor_ids: torch.Tensor) -> torch.Tensor:
        """The backbone for one block per request: anchors [batch] right after their contexts
        -> hidden [batch, L, hidden]."""
        device = self.fc.weight.device
        length = self.config.block_size
        # The anchor's position is its context's length; each block attends to all of it.
        offsets = torch.arange(length, device=device)
        positions = (torch.tensor([len(c) for c in caches], device=device)[:, None] + offsets).reshape(-1)
        anchor_rows = None
        if self.config.anchor_feature:  # the last context row; none before the first token
            zero = self.fc.weight.new_zeros(self.config.hidden_size)
            anchor_rows = torch.stack([c.rows[-1] if len(c) else zero for c in caches])  # [batch, hidden]
        x = self.block_embeddings(self.block_inputs(anchor_ids), anchor_rows).reshape(len(caches) * length, -1)
        cos, sin = self.rotary(positions)
        for i, layer in enumerate(self.layers):
            x = layer.forward_blocks(x, [(c.keys[i], c.values[i]) for c in caches], cos, sin)
        return self.norm(x).view(len(caches), length, -1)

    @torch.inference_mode()
    def draft(self, caches: Sequence[ContextCache], anchors: Sequence[int]) -> BlockDraft:
        """Greedy block drafts for several requests; each anchor sits right after its context."""
        anchor_ids = torch.tensor(list(anchors), dtype=torch.long, device=self.fc.weight.device)  # [batch]
        hidden = self.block_hidden(caches, anchor_ids)  # [batch, L, hidden]
        tokens, prevs = self.greedy_chain(self.draft_logits(hidden), anchor_ids)
        if self.confidence_head is None:
            ones = torch.ones_like(tokens, dtype=torch.float32)
            return BlockDraft(tokens, ones, ones)
        logits = self.confidence_logits(hidden, prevs).float()
        confidences = torch.sigmoid(logits / self.sts_temperatures.to(logits.device))
        return BlockDraft(tokens, confidences, confidences.cumprod(dim=1))

    # -- training ----------------------------------------------------------------------------
    def training_blocks(
        self,
        input_ids: torch.Tensor,  # [seq]
        features: torch.Tensor,  # [seq, feature_size] target features at every position
        anchors: torch.Tensor,  # [blocks] anchor positions
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Teacher-forced blocks: (draft logits [blocks, L, vocab], hidden [blocks, L, h],
        previous tokens [blocks, L]); block at anchor p sees context positions < p."""
        seq, length = len(input_ids), self.config.block_size
        device = input_ids.device
        context = self.project_context(features)
        context_kv = self.context_keys_values(context, torch.arange(seq, device=device))
        block_ids = self.block_inputs(input_ids[anchors])  # [blocks, L]
        # The context row before each anchor (zeros for an anchor at position 0).
        anchor_rows = torch.cat([context.new_zeros(1, context.shape[1]), context])[anchors]
        offsets = torch.arange(length, device=device)
        block_positions = (anchors[:, None] + offsets).reshape(-1)
        block_of = torch.arange(len(anchors), device=device).repeat_interleave(length)
        sees_context = torch.arange(seq, device=device)[None, :] < anchors[block_of][:, None]
        same_block = block_of[:, None] == block_of[None, :]
        mask = torch.cat([sees_context, same_block], dim=1)
        hidden = self.run_backbone(block_ids, block_positions, context_kv, mask, anchor_rows).view(len(anchors), length, -1)
        targets = input_ids[(anchors[:, None] + 1 + offsets).clamp(max=seq - 1)]
        prev = torch.cat([input_ids[anchors][:, None], targets[:, :-1]], dim=1)
        logits = self.lm_head(hidden) + self.markov_bias(prev)
        return logits, hidden, prev


def save_drafter(model: DSparkDrafter, directory: Path, dtype: torch.dtype = torch.bfloat16) -> None:
    from safetensors.torch import save_file

    directory.mkdir(parents=True, exist_ok=True)
    state = {k: (v.detach().to(dtype) if v.is_floating_point() else v.detach()).contiguous()
             for k, v in model.own_state_dict().items()}
    save_file(state, str(directory / WEIGHTS_FILE), metadata={"format": "pt"})
    (directory / "config.json").write_text(json.dumps(model.config.to_dict(), indent=2) + "\n")


def load_drafter(directory: str | Path, dtype: torch.dtype = torch.float32) -> DSparkDrafter:
    """Load a DeepSpec-layout drafter; shared embeddings must then come from the target."""
    from safetensors.torch import load_file

    directory = Path(directory)
    raw = json.loads((directory / "config.json").read_text())
    if ARCHITECTURE not in raw.get("architectures", []):
        raise ValueError(f"{directory} is not a DSpark drafter (architectures: {raw.get('architectures')})")
    cfg = DSparkConfig.from_dict(raw)
    state = {}
    for path in sorted(directory.glob("*.safetensors")):
        state.update({_strip_prefix(k): v for k, v in load_file(str(path)).items()})
    model = DSparkDrafter(cfg)
    missing, unexpected = model.load_state_dict(state, strict=False)
    allowed_missing = set(SHARED_WEIGHTS) if cfg.shares_target_embeddings else set()
    if set(missing) - allowed_missing or unexpected:
        raise ValueError(
            f"{directory}: weights do not match the config (missing {sorted(set(missing) - allowed_missing)[:5]}, "
            f"unexpected {sorted(unexpected)[:5]})"
        )
    return model.to(dtype).eval()


def _strip_prefix(name: str) -> str:
    return name.removeprefix("model.")


def draft_position_weights(block_size: int, gamma: float = 4.0) -> torch.Tensor:
    """DeepSpec's per-position loss weights exp(-(k-1)/gamma)."""
    return torch.tensor([math.exp(-k / gamma) for k in range(block_size)])


def _refresh_fast_heads(module: DSparkDrafter, incompatible_keys) -> None:
    """`load_state_dict`'s post-hook: the fast heads follow the weights just loaded."""
    module.refresh_fast_heads()
