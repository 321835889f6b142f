"""`cachescout replay --replicas N --routing R` and `--scale 1,2,4,...`: the fleet replay's CLI output.

Writes `fleet.json` and `fleet.md` to --out and prints the same tables. See replicas.py for the model.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from proxy.replay.replicas import ROUTINGS, format_scale_table, learned_snapshot, replay_fleet, scale_table
from proxy.replay.runner import ReplaySettings
from proxy.replay.traces import ReplayRequest


def split_for_bootstrap(reqs: Sequence[ReplayRequest], share: float) -> tuple[list[ReplayRequest], list[ReplayRequest]]:
    """(learning part, measured part): the first `share` of the stream by time, and the rest."""
    if not 0.0 <= share < 1.0:
        raise ValueError("--bootstrap-share must be in [0, 1)")
    if share == 0.0:
        return [], list(reqs)
    cut = reqs[0].t + share * (reqs[-1].t - reqs[0].t)
    return [r for r in reqs if r.t < cut], [r for r in reqs if r.t >= cut]


def _scaled_stream(args: argparse.Namespace, learn: Sequence[ReplayRequest]):
    """--scale-load: the workload preset with N times the sessions, concurrency and load for N replicas
    (each replica sees about the load one engine saw), minus the bootstrap part."""
    if not args.workload:
        raise ValueError("--scale-load needs --workload (a trace has the load it has)")
    from proxy.replay.workloads import generate, preset

    base = preset(args.workload, seed=args.seed, **({"sessions": args.sessions} if args.sessions else {}))

    def stream_for(n: int) -> list[ReplayRequest]:
        reqs = generate(
            preset(
                args.workload,
                seed=args.seed,
                sessions=base.sessions * n,
                concurrency=base.concurrency * n,
                load=None if base.load is None else base.load * n,
            )
        )
        return split_for_bootstrap(reqs, args.bootstrap_share)[1] if learn else reqs

    return stream_for


def run_fleet(
    args: argparse.Namespace,
    reqs: Sequence[ReplayRequest],
    caps: Sequence[int],
    policies: Sequence[str],
    settings: ReplaySettings,
) -> int:
    try:
        learn, measure = split_for_bootstrap(reqs, args.bootstrap_share)
        counts = [int(x) for x in args.scale.split(",") if x.strip()] if args.scale else None
        if args.scale_load and not args.workload:
            raise ValueError("--scale-load needs --workload (a trace has the load it has)")
    except ValueError as exc:
        print(f"cachescout replay: {exc}", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    out: dict = {"capacities": [], "bootstrap_share": args.bootstrap_share, "measured_requests": len(measure)}
    md: list[str] = [f"# Fleet replay: {args.workload or args.trace}", ""]
    for cap in caps:
        snap = learned_snapshot(learn, cap, settings) if learn else None
        row: dict = {"capacity_blocks_per_replica": cap}
        md.append(
            f"## {cap} blocks per replica"
            + (
                f", replicas start from a snapshot learned on the first {args.bootstrap_share:.0%} of the stream"
                if snap
                else ""
            )
        )
        if counts:
            scout = next((p for p in policies if p.startswith("scout-proxy")), "scout-proxy")
            stream_for = _scaled_stream(args, learn) if args.scale_load else None
            rows = scale_table(measure, cap, counts, ROUTINGS, scout, settings, snap, stream_for)
            row["scale"] = rows
            md += ["", format_scale_table(rows), ""]
        else:
            res = replay_fleet(
                measure, cap, [p for p in policies if p != "belady"], args.replicas, args.routing, settings, snap
            )
            row["fleet"] = res
            md += [
                "",
                f"{args.replicas} replicas, routing {args.routing}",
                "",
                "| policy | hit | gain (pp) | TTFT mean (ms) | warmup tokens | top-1 | R |",
                "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
            ]
            for name, s in res["policies"].items():
                acc = s.get("top1_accuracy")
                pr = s.get("predictability")
                md.append(
                    f"| {name} | {s['hit_rate']:.4f} | {s['gain_vs_lru_pp']:+.2f} | {1000 * s['ttft_mean_s']:.0f} | "
                    f"{s['warmup_tokens']} | {'—' if acc is None else f'{acc:.2f}'} | "
                    f"{'—' if pr is None else f'{pr:.2f}'} |"
                )
            md.append("")
        out["capacities"].append(row)
    out["elapsed_s"] = round(time.perf_counter() - t0, 3)
    dest = Path(args.out)
    dest.mkdir(parents=True, exist_ok=True)
    (dest / "fleet.json").write_text(json.dumps(out, indent=2, default=float))
    (dest / "fleet.md").write_text("\n".join(md) + "\n")
    print("\n".join(md))
    print(f"report: {dest / 'fleet.md'}")
    return 0
