"""Tiny Hugging Face classifiers whose outputs a test can predict: a token classifier that tags
fixed words as entities, and a seeded random sentence classifier (for `task-model`)."""

from __future__ import annotations

ENTITIES = {"kidney", "liver", "tumour"}     # the words the tiny tagger tags as entities


def _tokenizer(path, texts):
    from transformers import BertTokenizerFast

    from tiny_model import tiny_vocab

    vocab = tiny_vocab(texts)
    (path / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
    tokenizer = BertTokenizerFast(vocab={w: i for i, w in enumerate(vocab)}, do_lower_case=True)
    tokenizer.model_max_length = 64
    tokenizer.save_pretrained(path)
    return vocab


def write_tagger(path, texts) -> None:
    """A BERT token classifier without transformer layers whose labels depend on each word
    alone: its embedding's first coordinate is +1 for an entity word, -1 for any other, and
    the head reads that coordinate (labels O, I-ENT, so neighbouring entity words make one
    span)."""
    import torch
    from transformers import BertConfig, BertForTokenClassification

    path.mkdir(parents=True)
    vocab = _tokenizer(path, texts)
    config = BertConfig(vocab_size=len(vocab), hidden_size=8, num_hidden_layers=0,
                        num_attention_heads=2, intermediate_size=16,
                        max_position_embeddings=64, num_labels=2,
                        id2label={0: "O", 1: "I-ENT"}, label2id={"O": 0, "I-ENT": 1})
    model = BertForTokenClassification(config)
    with torch.no_grad():
        emb = model.bert.embeddings
        sign = torch.tensor([1.0 if w in ENTITIES else -1.0 for w in vocab])
        emb.word_embeddings.weight.zero_()
        emb.word_embeddings.weight[:, 0] = sign
        emb.word_embeddings.weight[:, 1] = -sign
        emb.position_embeddings.weight.zero_()
        emb.token_type_embeddings.weight.zero_()
        model.classifier.weight.zero_()
        model.classifier.bias.zero_()
        model.classifier.weight[1, 0] = 1.0
        model.classifier.weight[0, 0] = -1.0
    model.save_pretrained(path)


def write_sentence_classifier(path, texts) -> None:
    """A random one-layer BERT sequence classifier with two classes (seeded)."""
    import torch
    from transformers import BertConfig, BertForSequenceClassification

    path.mkdir(parents=True)
    vocab = _tokenizer(path, texts)
    torch.manual_seed(3)
    config = BertConfig(vocab_size=len(vocab), hidden_size=16, num_hidden_layers=1,
                        num_attention_heads=2, intermediate_size=32,
                        max_position_embeddings=64, num_labels=2,
                        id2label={0: "other", 1: "relevant"},
                        label2id={"other": 0, "relevant": 1})
    BertForSequenceClassification(config).save_pretrained(path)
