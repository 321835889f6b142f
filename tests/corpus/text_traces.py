"""Write corpus shapes as `lmcache`-format text traces (the format of the public agent traces issue
23 measured): one jsonl line per call, ``timestamp``, ``input`` (the prompt rendered as text),
``output`` and ``session_id`` — one id over the whole file, as those traces carry it.

    PYTHONPATH=$PWD .venv/bin/python -m tests.corpus.text_traces terminal 48 /tmp/terminal.jsonl
    cachescout replay --trace /tmp/terminal.jsonl --format lmcache --no-plots

Tasks run one after another (``concurrent=1``, no one-offs; a 4th argument interleaves that many,
as terminal-bench runs trials concurrently: then one call every 2-8 s per task on average), calls 2-8 s
apart, 20 s at a change of task.
"""

from __future__ import annotations

import json
import random
import sys

from proxy.replay.traces import _render_messages

from .frameworks import corpus


def write(shape: str, tasks: int, path: str, seed: int = 0, sid: str = "run-0", concurrent: int = 1) -> int:
    rng = random.Random(seed)
    t, last_task, n = 0.0, None, 0
    with open(path, "w") as f:
        for p, body, _truth, task in corpus(
            shape, tasks=tasks, concurrent=concurrent, one_off_share=0.0, seed=seed, with_task=True
        ):
            if p != "/v1/chat/completions":
                continue
            if concurrent > 1:  # interleaved tasks: one call every 2-8 s per task on average
                t += rng.uniform(2.0, 8.0) / concurrent
            else:
                t += 20.0 if task != last_task else rng.uniform(2.0, 8.0)
            last_task = task
            line = {"timestamp": round(t, 3), "input": _render_messages(body), "output": "ok " * 40, "session_id": sid}
            f.write(json.dumps(line) + "\n")
            n += 1
    return n


if __name__ == "__main__":
    print(write(sys.argv[1], int(sys.argv[2]), sys.argv[3], concurrent=int(sys.argv[4]) if len(sys.argv) > 4 else 1))
