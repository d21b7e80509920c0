"""Skip the padding of causal text towers: the same embeddings for a fraction of the work.

A CLIP text tower with a causal attention mask pools the end-of-text token, and no position
attends to a later one, so the padding after a text's last real token cannot change its
embedding. open_clip still runs every text at the full context (77 tokens), while captions
are usually 15-30 tokens long. `PaddingTrimmedTextEncoder` runs each text at its own length
rounded up to a fixed bucket (so a text always takes the same path, whatever its batch), and
falls back to the model's own `encode_text` for anything that is not such a tower.
Results equal the full-context ones up to float rounding (tested against `encode_text`).
"""

from __future__ import annotations

import torch

BUCKET_TOKENS = 8
POOLS_AT_END_OF_TEXT = ("argmax", "eos")


def is_causal_clip_text_tower(model: torch.nn.Module) -> bool:
    """Whether `model` is open_clip's built-in CLIP text tower, causal and pooled at the end.

    Excludes towers with bidirectional attention (SigLIP), appended class tokens (CoCa),
    Hugging Face text models and any subclass that overrides `encode_text`.
    """
    import open_clip

    if not isinstance(model, open_clip.CLIP):
        return False
    if type(model).encode_text is not open_clip.CLIP.encode_text:
        return False
    mask = getattr(model, "attn_mask", None)
    if mask is None or getattr(model, "text_pool_type", None) not in POOLS_AT_END_OF_TEXT:
        return False
    size = model.positional_embedding.shape[0]
    causal = torch.full((size, size), float("-inf"), device=mask.device).triu_(1)
    return tuple(mask.shape) == (size, size) and torch.equal(mask.float(), causal)


def padding_trimmed_text_encoder(model: torch.nn.Module) -> PaddingTrimmedTextEncoder | None:
    """The trimmed encoder for a causal CLIP text tower; None for any other model."""
    return PaddingTrimmedTextEncoder(model) if is_causal_clip_text_tower(model) else None


def bucketed_lengths(tokens: torch.Tensor, pad_id: int = 0) -> torch.Tensor:
    """Per text, its length up to the last non-padding token, rounded up to the bucket."""
    positions = torch.arange(1, tokens.shape[1] + 1, device=tokens.device)
    used = ((tokens != pad_id) * positions).amax(dim=1).clamp(min=1)
    buckets = (used + BUCKET_TOKENS - 1) // BUCKET_TOKENS * BUCKET_TOKENS
    return buckets.clamp(max=tokens.shape[1])


class PaddingTrimmedTextEncoder:
    """`encode_text` for a causal CLIP tower that runs texts of one bucket at that length."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.model = model

    def __call__(self, tokens: torch.Tensor) -> torch.Tensor:
        """Text features in the order of `tokens`, as `model.encode_text(tokens)` returns."""
        lengths = bucketed_lengths(tokens)
        parts: list[tuple[torch.Tensor, torch.Tensor]] = []
        for length in torch.unique(lengths).tolist():
            rows = torch.nonzero(lengths == length).squeeze(1)
            group = tokens[rows]
            if length == tokens.shape[1]:
                parts.append((rows, self.model.encode_text(group)))
            else:
                parts.append((rows, self._encode_prefix(group[:, :length])))
        first = parts[0][1]
        features = first.new_empty((tokens.shape[0], first.shape[1]))
        for rows, values in parts:
            features[rows] = values
        return features

    def _encode_prefix(self, tokens: torch.Tensor) -> torch.Tensor:
        """open_clip's `CLIP.encode_text` on the first `tokens.shape[1]` positions only."""
        from open_clip.transformer import text_global_pool

        model = self.model
        length = tokens.shape[1]
        cast_dtype = model.transformer.get_cast_dtype()
        x = model.token_embedding(tokens).to(cast_dtype)
        x = x + model.positional_embedding[:length].to(cast_dtype)
        x = model.transformer(x, attn_mask=model.attn_mask[:length, :length])
        x = model.ln_final(x)
        x = text_global_pool(
            x, tokens, model.text_pool_type, eos_token_id=getattr(model, "text_eos_id", None)
        )
        projection = model.text_projection
        if projection is None:
            return x
        if isinstance(projection, torch.nn.Linear):
            return projection(x)
        return x @ projection
