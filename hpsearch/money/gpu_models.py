"""NVML model names -> catalogue GPU models (pure).

What ``pricing.instance: auto`` and ``plan`` need to price the GPU this machine has:
``NVIDIA GeForce RTX 4090`` is the catalogue's ``RTX 4090``, ``Tesla V100-SXM2-32GB`` a
``V100``, and an ``A10G`` is never an ``A100``. The name itself comes from NVML
(:mod:`hpsearch.adapters.nvml`), passed in.
"""

from __future__ import annotations

import re
from typing import Iterable

from hpsearch.money.catalog import Catalog, Offer

#: Tokens that, right after a model, make it another card (RTX 3090 Ti, RTX 4090 D).
_VARIANT = {"TI", "SUPER", "D", "S", "LAPTOP", "MOBILE"}
_MEMORY = re.compile(r"^(\d+)GB$")


def _tokens(text: str) -> list[str]:
    return [t for t in re.split(r"[\s\-_/]+", text.upper()) if t]


def _split_catalogue_model(model: str) -> tuple[list[str], int | None]:
    """``"A100-80GB"`` -> ``(["A100"], 80)``; ``"RTX 4090"`` -> ``(["RTX", "4090"], None)``."""
    tokens = _tokens(model)
    memory = None
    if tokens and _MEMORY.match(tokens[-1]):
        memory = int(_MEMORY.match(tokens[-1]).group(1))
        tokens = tokens[:-1]
    return tokens, memory


def _contains(tokens: list[str], part: list[str]) -> bool:
    for start in range(len(tokens) - len(part) + 1):
        if tokens[start:start + len(part)] == part:
            after = tokens[start + len(part)] if start + len(part) < len(tokens) else ""
            if after not in _VARIANT:
                return True
    return False


def catalogue_model(name: str, models: Iterable[str],
                    memory_mib: float | None = None) -> str | None:
    """The catalogue GPU model an NVML name is, or None.

    A catalogue model matches when its tokens appear whole and in order in the NVML
    name (``V100`` in ``Tesla V100-SXM2-16GB``; ``A10G`` never matches ``A100``), not
    followed by a variant (``RTX 3090`` does not match ``RTX 3090 Ti``). A model with a
    memory suffix (``A100-80GB``) also needs the card's memory: a ``NNGB`` token in the
    name, else ``memory_mib`` rounded to whole GiB (within 10%).

    Args:
        name: The NVML name, e.g. ``NVIDIA GeForce RTX 4090``.
        models: Catalogue GPU models (``Offer.gpu_model`` values).
        memory_mib: The card's memory, to tell models that differ only by memory apart.
    """
    tokens = _tokens(name)
    name_memory = next((int(m.group(1)) for m in map(_MEMORY.match, tokens) if m), None)
    card_gb = name_memory if name_memory is not None else (
        None if memory_mib is None else memory_mib / 1024.0)
    best: tuple[int, str] | None = None
    for model in sorted({m for m in models if m}):
        part, memory = _split_catalogue_model(model)
        if not part or not _contains(tokens, part):
            continue
        if memory is not None:
            if card_gb is None or abs(card_gb - memory) > 0.1 * memory:
                continue
        score = len(part) * 10 + (1 if memory is not None else 0)
        if best is None or score > best[0]:
            best = (score, model)
    return None if best is None else best[1]


def match_catalog_gpu(name: str, catalog: Catalog, memory_mib: float | None = None,
                      provider: str | None = None) -> Offer | None:
    """The catalogue offer for an NVML GPU name, or None if the catalogue lacks the model.

    Among the offers of the matching model (see :func:`catalogue_model`) it prefers, in
    order: ``provider`` (e.g. ``local``) when given, an offer whose ``gpu_memory_gb``
    matches the card's memory (``NNGB`` in the name or ``memory_mib``), one GPU per
    instance, then catalogue order.

    Examples: ``NVIDIA H100 80GB HBM3`` -> an H100 row; ``Tesla V100-SXM2-16GB`` -> a V100
    row (the 16 GB one first); ``NVIDIA GeForce RTX 4090`` -> an RTX 4090 row;
    ``NVIDIA A100-SXM4-80GB`` -> an A100-80GB row; ``NVIDIA H200`` -> None (no H200 row).
    """
    # Filter by provider first: the best model overall may have no row there while a
    # less specific one does (a local "A100" row next to a rented "A100-80GB").
    offers = [o for o in catalog.offers.values()
              if o.gpu_model and (provider is None or o.provider == provider)]
    model = catalogue_model(name, [o.gpu_model for o in offers], memory_mib)
    if model is None:
        return None
    tokens = _tokens(name)
    name_memory = next((int(m.group(1)) for m in map(_MEMORY.match, tokens) if m), None)
    card_gb = name_memory if name_memory is not None else (
        None if memory_mib is None else memory_mib / 1024.0)
    candidates = [o for o in offers if o.gpu_model == model]

    def rank(item: tuple[int, Offer]) -> tuple:
        position, offer = item
        memory_ok = (card_gb is not None and offer.gpu_memory_gb is not None
                     and abs(offer.gpu_memory_gb - card_gb) <= 0.1 * offer.gpu_memory_gb)
        return (not memory_ok, offer.gpu_count != 1, position)

    return min(enumerate(candidates), key=rank)[1]
