"""vLLM variables a model's `vllm_env` may not set, each with why (checked by warmstart/checks/workload_rules.py)."""

from __future__ import annotations

# VLLM_* variables the config refuses in `vllm_env`, with why (vllm/envs.py compile_factors and its ignore list,
# 0.21.0 and 0.34.0: warmstart/vllm_releases/; docs/upstream-facts.md).
_PER_POD = "it differs per pod or is set by warmstart; in vLLM's compile hash it would make every pod miss"
RESERVED_VLLM_ENV: dict[str, str] = {
    **{
        name: _PER_POD
        for name in (
            "VLLM_HOST_IP",
            "VLLM_PORT",
            "VLLM_INSTANCE_ID",
            "VLLM_RPC_BASE_PATH",
            "VLLM_DP_RANK",
            "VLLM_DP_RANK_LOCAL",
            "VLLM_DP_MASTER_IP",
            "VLLM_DP_MASTER_PORT",
            "VLLM_CACHE_ROOT",
            "VLLM_CONFIG_ROOT",
            "VLLM_LOGGING_PREFIX",
        )
    },
    "VLLM_ASSETS_CACHE": "warmstart sets it: it is part of the model path vLLM hashes for an s3:// model",
    "VLLM_FLASHINFER_AUTOTUNE_CACHE_DIR": "warmstart keeps FlashInfer's autotune results on the node's NVMe (under "
    "VLLM_CACHE_ROOT, or FlashInfer's managed store in its workspace), where the agent archives them for new nodes; "
    "elsewhere every pod would tune again (contracts/engine_caches.py)",
    "VLLM_MODEL_REDIRECT_PATH": "it rewrites the model path vLLM hashes (maybe_model_redirect)",
    "VLLM_API_KEY": "a secret belongs in a Kubernetes Secret, not in plain config (warmstart writes vllm_env into "
    "the pod spec and the compile-cache key); vLLM 0.21.0 also hashes it and writes it in clear text into the "
    "compile cache's cache_key_factors.json",
}

# warmstart's vLLM plugin (model_workload/runtime/node_copy_loader.py): a pod that reads the node's node copy
# streams its files as local files through it. VLLM_PLUGINS, when set, is the list of plugins vLLM loads, and it is
# a compile-hash factor, so the entry step cannot add the plugin itself: a `vllm_env` that sets it must list it.
NODE_COPY_PLUGIN = "warmstart_node_copy"
