"""hf_tokenizer_json.py — a small Llama-2-style (SentencePiece BPE) tokenizer.json for the tests that need a
Hugging Face tokenizer both the engine and Hugging Face's own library load: <unk> <s> </s>, then every printable
ASCII character, "\\n" and the metaspace "\u2581", a few merges, no byte fallback (unknown characters are <unk>),
the Prepend / Replace normalizer and the decoder Sequence of Llama-2's file. `size` ids: filled with "<tN>"
tokens past the characters when larger, the later characters and the merges left out when smaller."""
import json

SP = "\u2581"


def llama2_tokenizer(size=None):
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    for ch in [SP, "\n"] + [chr(c) for c in range(32, 127)]:
        if size is None or len(vocab) < size:
            vocab.setdefault(ch, len(vocab))
    merges = []
    for a, b in ((SP, "t"), (SP + "t", "h"), ("h", "e"), (SP, "a"), ("i", "n"), (SP, "w")):
        if a + b not in vocab and a in vocab and b in vocab and (size is None or len(vocab) < size):
            vocab[a + b] = len(vocab)
            merges.append(f"{a} {b}")
    if size is not None:
        assert size >= len(vocab), f"a tokenizer of {size} ids is smaller than its {len(vocab)} characters"
        while len(vocab) < size:
            vocab[f"<t{len(vocab)}>"] = len(vocab)

    def special(i, c):
        return {"id": i, "content": c, "single_word": False, "lstrip": False, "rstrip": False, "normalized": False,
                "special": True}

    return {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [special(0, "<unk>"), special(1, "<s>"), special(2, "</s>")],
        "normalizer": {"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": SP},
                                                           {"type": "Replace", "pattern": {"String": " "}, "content": SP}]},
        "pre_tokenizer": None,
        "post_processor": None,
        "decoder": {"type": "Sequence", "decoders": [{"type": "Replace", "pattern": {"String": SP}, "content": " "},
                                                     {"type": "ByteFallback"}, {"type": "Fuse"},
                                                     {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
        "model": {"type": "BPE", "dropout": None, "unk_token": "<unk>", "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": True, "byte_fallback": False, "ignore_merges": False,
                  "vocab": vocab, "merges": merges},
    }


def write(path, tok):
    with open(path, "w") as f:
        json.dump(tok, f, indent=1)
