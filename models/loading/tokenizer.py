"""Tokenizers for pretrained models: from a GGUF file's own metadata or a checkpoint's tokenizer.json.

Built with the `tokenizers` library. A GGUF stores one of two kinds (`tokenizer.ggml.model`):
- "gpt2", a byte-level BPE: its vocabulary, already spelled in GPT-2's byte-to-unicode alphabet, plus
  its merges; how text is split before the merges apply (the pre-tokenizer) is only named, by
  `tokenizer.ggml.pre`, after llama.cpp's table of split rules, which PRE_TOKENIZERS mirrors.
- "llama", a SentencePiece BPE (Gemma, Llama 2): pieces with "▁" for a space and a score each, no
  merges. llama.cpp joins, again and again, the adjacent pair whose joined piece is in the vocabulary
  with the highest score; a BPE whose merges are every such pair, ranked by that score, does the
  same. Characters outside the vocabulary fall back to the pieces <0x00>..<0xFF> of their bytes.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors

from crasplab.models.loading.errors import UnsupportedModelError
from crasplab.models.loading.text_files import read_json_object, read_text

NORMAL_TOKEN_TYPE = 1
CONTROL_TOKEN_TYPE = 3  # llama.cpp's token type for special tokens such as <|im_start|>
USER_DEFINED_TOKEN_TYPE = 4  # added tokens matched whole but not special
SPACE_PIECE = "\u2581"  # SentencePiece's spelling of a space

_LLAMA3_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_QWEN2_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)


def _regex_then_bytes(split: str) -> pre_tokenizers.PreTokenizer:
    return pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(split), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )


def _gpt2_bytes() -> pre_tokenizers.PreTokenizer:
    return pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)


def _digits_then_gpt2_bytes() -> pre_tokenizers.PreTokenizer:
    return pre_tokenizers.Sequence(
        [
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
        ]
    )


# tokenizer.ggml.pre -> pre-tokenizer. "smollm" isolates every digit, then GPT-2's split
# (llama.cpp's LLAMA_VOCAB_PRE_TYPE_SMOLLM; the same as SmolLM2's own tokenizer.json).
PRE_TOKENIZERS = {
    "default": _gpt2_bytes,
    "gpt-2": _gpt2_bytes,
    "smollm": _digits_then_gpt2_bytes,
    "starcoder": _digits_then_gpt2_bytes,
    "llama-bpe": lambda: _regex_then_bytes(_LLAMA3_SPLIT),
    "llama3": lambda: _regex_then_bytes(_LLAMA3_SPLIT),
    "qwen2": lambda: _regex_then_bytes(_QWEN2_SPLIT),
}


@dataclass(frozen=True)
class PretrainedTokenizer:
    """Text <-> token ids, with the special tokens and chat template the model came with."""

    backend: Tokenizer
    bos_id: int | None
    eos_id: int | None
    pad_id: int | None
    add_bos: bool
    chat_template: str | None

    def encode(self, text: str) -> list[int]:
        """Token ids of `text`, with BOS first when the model expects it."""
        return self.encode_batch([text])[0]

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        encodings = self.backend.encode_batch(texts, add_special_tokens=False)
        prefix = [self.bos_id] if self.add_bos and self.bos_id is not None else []
        return [prefix + encoding.ids for encoding in encodings]

    def decode(self, ids: list[int], skip_special_tokens: bool = False) -> str:
        return self.backend.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def token(self, token_id: int) -> str:
        return self.backend.id_to_token(token_id)

    @property
    def special_ids(self) -> frozenset[int]:
        """Ids of the special tokens (BOS, EOS, <|im_start|>, ...): where generated text ends."""
        return frozenset(i for i, token in self.backend.get_added_tokens_decoder().items() if token.special)


def tokenizer_from_gguf_metadata(metadata: dict[str, Any], where: str) -> PretrainedTokenizer:
    kind = metadata.get("tokenizer.ggml.model")
    if kind not in _GGUF_TOKENIZERS:
        raise UnsupportedModelError(
            where,
            f"tokenizer.ggml.model is {kind!r}; supported: 'gpt2' (byte-level BPE) and 'llama' (SentencePiece BPE)",
        )
    tokens = metadata.get("tokenizer.ggml.tokens")
    if not (isinstance(tokens, list) and all(isinstance(token, str) for token in tokens)):
        raise UnsupportedModelError(
            where, f"a {kind!r} tokenizer without its vocabulary (the string array tokenizer.ggml.tokens)"
        )
    token_types = _per_token(metadata, "tokenizer.ggml.token_type", int, "integers", where)
    backend = _GGUF_TOKENIZERS[kind](metadata, tokens, token_types, where)
    backend.add_special_tokens(
        [
            AddedToken(t, special=True, normalized=False)
            for t, kind in zip(tokens, token_types)
            if kind == CONTROL_TOKEN_TYPE
        ]
    )
    backend.add_tokens(
        [
            AddedToken(t, special=False, normalized=False)
            for t, kind in zip(tokens, token_types)
            if kind == USER_DEFINED_TOKEN_TYPE
        ]
    )
    return PretrainedTokenizer(
        backend=backend,
        bos_id=metadata.get("tokenizer.ggml.bos_token_id"),
        eos_id=metadata.get("tokenizer.ggml.eos_token_id"),
        pad_id=metadata.get("tokenizer.ggml.padding_token_id"),
        # llama.cpp's default for byte-level vocabularies that do not say: no BOS.
        add_bos=bool(metadata.get("tokenizer.ggml.add_bos_token", False)),
        chat_template=metadata.get("tokenizer.chat_template"),
    )


def _per_token(metadata: dict[str, Any], key: str, kind: type, kinds: str, where: str) -> list:
    """An optional array of one value per token ([] where absent)."""
    values = metadata.get(key, [])
    if not (isinstance(values, list) and all(isinstance(value, kind) for value in values)):
        raise UnsupportedModelError(
            where,
            f"{key} is {type(values).__name__} {str(values)[:40]!r}; expected an array of {kinds}, one per token",
        )
    return values


def _gpt2_tokenizer(metadata: dict[str, Any], tokens: list[str], token_types: list[int], where: str) -> Tokenizer:
    pre = metadata.get("tokenizer.ggml.pre", "default")
    if pre not in PRE_TOKENIZERS:
        raise UnsupportedModelError(
            where, f"tokenizer.ggml.pre is {pre!r}; supported pre-tokenizers: {sorted(PRE_TOKENIZERS)}"
        )
    backend = Tokenizer(_byte_level_bpe(tokens, metadata.get("tokenizer.ggml.merges", []), where))
    backend.pre_tokenizer = PRE_TOKENIZERS[pre]()
    backend.decoder = decoders.ByteLevel()
    backend.post_processor = processors.ByteLevel(trim_offsets=False)
    return backend


def _sentencepiece_tokenizer(
    metadata: dict[str, Any], tokens: list[str], token_types: list[int], where: str
) -> Tokenizer:
    scores = _per_token(metadata, "tokenizer.ggml.scores", (int, float), "numbers", where)
    if len(scores) != len(tokens) or len(token_types) != len(tokens):
        raise UnsupportedModelError(
            where,
            f"a 'llama' tokenizer has {len(tokens)} tokens, {len(scores)} scores and {len(token_types)} token "
            "types; expected one score and one type per token",
        )
    unknown_id = metadata.get("tokenizer.ggml.unknown_token_id")
    backend = Tokenizer(
        models.BPE(
            vocab={token: i for i, token in enumerate(tokens)},
            merges=_merges_by_score(tokens, scores, token_types),
            unk_token=tokens[unknown_id] if isinstance(unknown_id, int) and 0 <= unknown_id < len(tokens) else None,
            fuse_unk=True,
            byte_fallback=True,
        )
    )
    space = [normalizers.Replace(" ", SPACE_PIECE)]
    if metadata.get("tokenizer.ggml.add_space_prefix", True):  # llama.cpp's default for SentencePiece
        space.insert(0, normalizers.Prepend(SPACE_PIECE))
    backend.normalizer = normalizers.Sequence(space)
    decoding = [decoders.Replace(SPACE_PIECE, " "), decoders.ByteFallback(), decoders.Fuse()]
    if metadata.get("tokenizer.ggml.add_space_prefix", True):
        decoding.append(decoders.Strip(" ", 1, 0))
    backend.decoder = decoders.Sequence(decoding)
    return backend


def _merges_by_score(tokens: list[str], scores: list[float], token_types: list[int]) -> list[tuple[str, str]]:
    """Every split of a normal piece into two normal pieces, the splits of higher-scored pieces first."""
    normal = {token: i for i, (token, kind) in enumerate(zip(tokens, token_types)) if kind == NORMAL_TOKEN_TYPE}
    merges = [
        (-scores[i], i, normal[token[:cut]], token[:cut], token[cut:])
        for token, i in normal.items()
        for cut in range(1, len(token))
        if token[:cut] in normal and token[cut:] in normal
    ]
    return [(left, right) for *_, left, right in sorted(merges)]


_GGUF_TOKENIZERS = {"gpt2": _gpt2_tokenizer, "llama": _sentencepiece_tokenizer}


def _byte_level_bpe(tokens: list[str], merges: object, where: str) -> models.BPE:
    """The BPE model of a vocabulary and its merges ("first second", both tokens of the vocabulary)."""
    malformed = (
        next((merge for merge in merges if not (isinstance(merge, str) and " " in merge)), None)
        if isinstance(merges, list)
        else merges
    )
    if not isinstance(merges, list) or malformed is not None:
        raise UnsupportedModelError(
            where,
            f"tokenizer.ggml.merges holds {str(malformed)[:40]!r}; expected an array of "
            "strings, each two tokens separated by a space",
        )
    vocabulary = {token: i for i, token in enumerate(tokens)}
    pairs = [tuple(merge.split(" ", 1)) for merge in merges]
    unknown = next((pair for pair in pairs if pair[0] not in vocabulary or pair[1] not in vocabulary), None)
    if unknown is not None:
        raise UnsupportedModelError(
            where,
            f"tokenizer.ggml.merges merges {' '.join(unknown)!r}, a token of which is not "
            "in tokenizer.ggml.tokens; expected merges of vocabulary tokens",
        )
    return models.BPE(vocab=vocabulary, merges=pairs)


def tokenizer_from_folder(folder: Path) -> PretrainedTokenizer | None:
    """The tokenizer of a Hugging Face checkpoint folder; None when it has no tokenizer.json."""
    path = folder / "tokenizer.json"
    if not path.is_file():
        return None
    backend = _read_tokenizer_json(path)
    settings = _read_json(folder / "tokenizer_config.json", "the tokenizer's settings (special tokens, chat template)")
    model_config = _read_json(folder / "config.json", "the model's hyperparameters")

    def special_id(name: str) -> int | None:
        token = settings.get(name)
        if isinstance(token, dict):  # AddedToken written out as {"content": ...}
            token = token.get("content")
        if token is not None:
            return backend.token_to_id(token)
        token_id = model_config.get(f"{name}_id")
        return token_id[0] if isinstance(token_id, list) else token_id

    bos_id = special_id("bos_token")
    # tokenizer.json's post-processor adds BOS itself where the model wants one (Llama 3).
    adds_bos = bos_id is not None and bos_id in backend.encode("a", add_special_tokens=True).ids
    return PretrainedTokenizer(
        backend=backend,
        bos_id=bos_id,
        eos_id=special_id("eos_token"),
        pad_id=special_id("pad_token"),
        add_bos=adds_bos,
        chat_template=_chat_template(folder, settings),
    )


def _chat_template(folder: Path, settings: dict) -> str | None:
    # transformers 5 saves the template beside tokenizer_config.json; 4.x inside it.
    path = folder / "chat_template.jinja"
    return read_text(path) if path.is_file() else settings.get("chat_template")


def _read_tokenizer_json(path: Path) -> Tokenizer:
    try:
        return Tokenizer.from_file(str(path))
    except Exception as error:  # the tokenizers library raises a bare Exception for every problem
        raise UnsupportedModelError(
            str(path),
            f"not a tokenizer the tokenizers library can read ({error}); expected the tokenizer.json "
            "that transformers' save_pretrained writes",
        ) from error


def _read_json(path: Path, expected: str) -> dict:
    """An optional JSON file of the folder: {} where it is absent."""
    return read_json_object(path, expected) if path.is_file() else {}
