"""`cachescout sim-engine` argument parsing (the server itself is covered on sockets elsewhere)."""

import argparse

import pytest

from proxy.simengine import server_cli


def parse(*argv):
    parser = argparse.ArgumentParser()
    server_cli.add_arguments(parser)
    return parser.parse_args(list(argv))


def test_defaults_and_flags_map_to_config():
    cfg = server_cli.config_from_args(parse())
    assert (cfg.block_size, cfg.capacity_blocks, cfg.eviction, cfg.speed) == (16, 28_672, "lru", 1.0)
    cfg = server_cli.config_from_args(
        parse(
            "--capacity-blocks",
            "512",
            "--block-size",
            "32",
            "--eviction",
            "priority",
            "--speed",
            "0",
            "--tool-call-share",
            "0.25",
            "--prefill-tokens-per-s",
            "10000",
            "--no-prompt-tokens-details",
            "--model",
            "m",
        )
    )
    assert (cfg.capacity_blocks, cfg.block_size, cfg.eviction, cfg.speed, cfg.tool_call_share) == (
        512,
        32,
        "priority",
        0.0,
        0.25,
    )
    assert cfg.cost.prefill_token_s == pytest.approx(1e-4) and not cfg.prompt_tokens_details and cfg.model == "m"
    assert cfg.effective_max_model_len == 16_384


@pytest.mark.parametrize("argv", [("--speed", "-1"), ("--tool-call-share", "2"), ("--capacity-blocks", "0")])
def test_bad_values_exit_2(argv):
    assert server_cli.run(parse(*argv)) == 2
