"""A masked LM made from nothing: a WordPiece vocabulary learnt from sample text (the
`tokenizers` library) and a randomly initialised BERT of a named size.

The sizes are presets (`PRESETS`): `tiny` (seconds; tests and smoke runs), `cpu` (what a
two-core machine pretrains in tens of minutes) and `gpu` (minutes on one GPU). Each is a set of
`tapt pretrain` settings, any of which a call may override.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Iterable

from tapt.errors import InputError

SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")

# Every preset names every setting it fixes; `tapt pretrain`'s own defaults are `cpu`'s.
PRESETS: dict[str, dict[str, Any]] = {
    "tiny": {"vocab_size": 2000, "hidden_size": 64, "layers": 2, "heads": 2,
             "intermediate_size": 256, "max_length": 64, "sample": 20_000, "steps": 200,
             "batch_size": 32, "lr": 1e-3},
    "cpu": {"vocab_size": 8192, "hidden_size": 128, "layers": 4, "heads": 2,
            "intermediate_size": 512, "max_length": 64, "sample": 100_000, "steps": 4000,
            "batch_size": 64, "lr": 5e-4},
    "gpu": {"vocab_size": 16384, "hidden_size": 512, "layers": 8, "heads": 8,
            "intermediate_size": 2048, "max_length": 128, "sample": 1_000_000, "steps": 20_000,
            "batch_size": 256, "lr": 5e-4},
}


@dataclass(frozen=True)
class Architecture:
    """The shape of a BERT masked LM.

    Attributes:
        vocab_size: Tokens of the vocabulary.
        hidden_size: Width of the hidden states.
        layers: Transformer layers.
        heads: Attention heads (must divide `hidden_size`).
        intermediate_size: Width of the feed-forward layers.
        max_length: Positions (the longest input).
    """

    vocab_size: int
    hidden_size: int
    layers: int
    heads: int
    intermediate_size: int
    max_length: int

    def __post_init__(self) -> None:
        if self.hidden_size % self.heads:
            raise InputError(f"{self.heads} heads do not divide a hidden size of "
                             f"{self.hidden_size}", param="heads")

    def to_json(self) -> dict[str, int]:
        """The shape as a JSON object."""
        return asdict(self)


def train_wordpiece(texts: Iterable[str], vocab_size: int, max_length: int,
                    lowercase: bool = True) -> Any:
    """A WordPiece tokenizer learnt from `texts` with BERT's normalisation and special tokens;
    the same text and settings give the same vocabulary, token for token and id for id.

    Args:
        texts: The sample text.
        vocab_size: The most tokens of the vocabulary (special tokens included).
        max_length: The tokenizer's `model_max_length`.
        lowercase: Lower-case and strip accents first (BERT uncased).

    Returns:
        A `transformers.BertTokenizerFast`.
    """
    from tokenizers import (
        Tokenizer,
        decoders,
        models,
        normalizers,
        pre_tokenizers,
        processors,
        trainers,
    )
    from transformers import BertTokenizerFast

    def fresh(model: Any) -> Any:
        tokenizer = Tokenizer(model)
        tokenizer.normalizer = normalizers.BertNormalizer(lowercase=lowercase,
                                                          strip_accents=lowercase)
        tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        return tokenizer

    texts = list(texts)
    learner = fresh(models.WordPiece(unk_token="[UNK]"))
    # The trainer numbers a character's word-inner form ("##e") when it first meets it, in
    # hash order, and breaks ties between equally frequent merges by those numbers: the same
    # text gave other vocabularies from run to run. Every "##c" named up front, in order, has
    # its number before training starts.
    alphabet = sorted({c for text in texts for c in learner.normalizer.normalize_str(text)
                       if not c.isspace()})
    inner = [f"##{c}" for c in alphabet]
    trainer = trainers.WordPieceTrainer(vocab_size=int(vocab_size),
                                        min_frequency=2,
                                        special_tokens=[*SPECIAL_TOKENS, *inner],
                                        show_progress=False)
    learner.train_from_iterator(texts, trainer=trainer)
    learnt = sorted(set(learner.get_vocab()) - set(SPECIAL_TOKENS))
    tokenizer = fresh(models.WordPiece(
        {token: i for i, token in enumerate([*SPECIAL_TOKENS, *learnt])}, unk_token="[UNK]"))
    tokenizer.add_special_tokens(list(SPECIAL_TOKENS))
    cls, sep = tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]")
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", cls), ("[SEP]", sep)])
    tokenizer.decoder = decoders.WordPiece(prefix="##")
    return BertTokenizerFast(tokenizer_object=tokenizer, unk_token="[UNK]", sep_token="[SEP]",
                             pad_token="[PAD]", cls_token="[CLS]", mask_token="[MASK]",
                             do_lower_case=lowercase, model_max_length=int(max_length))


def new_masked_lm(architecture: Architecture, tokenizer: Any, seed: int) -> Any:
    """A randomly initialised `BertForMaskedLM` of `architecture` for `tokenizer`'s vocabulary
    (its output decoder tied to the word embeddings, as BERT's).

    Args:
        architecture: The shape (`vocab_size` is taken from the tokenizer).
        tokenizer: The tokenizer it will read.
        seed: Seed of the initialisation.

    Returns:
        The model, in training mode.
    """
    import torch
    from transformers import BertConfig, BertForMaskedLM

    config = BertConfig(vocab_size=len(tokenizer), hidden_size=architecture.hidden_size,
                        num_hidden_layers=architecture.layers,
                        num_attention_heads=architecture.heads,
                        intermediate_size=architecture.intermediate_size,
                        max_position_embeddings=architecture.max_length,
                        pad_token_id=int(tokenizer.pad_token_id))
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = BertForMaskedLM(config)
    return model.train()
