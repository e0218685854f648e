"""Preloaded by the ranks' fork server where vLLM is installed (``forked.py``).

An engine's ranked case on vLLM (its paged KV cache, ``ar_paging``, vLLM's collectives) imports it in
every rank; a case that never touches vLLM pays this ~5.5 s once, in the server, for nothing.

``prepare_process_for_vllm`` first: ``VLLM_TARGET_DEVICE=cpu`` before vLLM resolves its platform,
as a rank started as a fresh interpreter does before its factory imports vLLM.
"""

from __future__ import annotations

import importlib

from compile_checks.pipelines.vllm_env import prepare_process_for_vllm

prepare_process_for_vllm()
importlib.import_module("vllm.config")  # ~5.5 s of a rank's ~7 s start on the 2-core box
