"""The physical limit: raw ZeroMQ PUSH/PULL throughput between two processes.

    python -m bench.perf.zmq_limits [--frame-bytes 262144] [--seconds 3]

A child process binds a PULL socket on 127.0.0.1 and counts frames; this process
PUSHes frames of ``--frame-bytes`` (zero-copy on the sending side, one reused buffer)
for ``--seconds`` after a short warm-up. The receiver measures from its first to its
last frame. Prints one JSON line::

    {"frame_bytes": 262144, "frames": ..., "seconds": ..., "frames_per_s": ...,
     "mb_per_s": ...}

``mb_per_s`` is in MB of 1024 * 1024 bytes, the perf tools' unit. The default frame is
what producer-perf-test sends at ``batch.size=262144`` (one batch per partition frame);
measure at the frame size of the run being compared.
"""
from __future__ import annotations

import argparse
import json
import multiprocessing
import sys
import time

import zmq

MB_BYTES = 1024 * 1024
FRAME_BYTES_DEFAULT = 256 * 1024
WARMUP_S = 0.5
HWM_FRAMES = 64
STOP = b""


def _receiver(port_queue, result_queue) -> None:
    context = zmq.Context()
    pull = context.socket(zmq.PULL)
    pull.set_hwm(HWM_FRAMES)
    port = pull.bind_to_random_port("tcp://127.0.0.1")
    port_queue.put(port)
    frames = 0
    total_bytes = 0
    counting = False
    first = last = 0.0
    while True:
        frame = pull.recv(copy=False)
        size = len(frame.buffer)
        if size == 0:
            if not counting:  # end of the warm-up
                counting = True
                continue
            break
        if counting:
            if frames == 0:
                first = time.perf_counter()
            frames += 1
            total_bytes += size
            last = time.perf_counter()
    result_queue.put((frames, total_bytes, last - first))
    pull.close(linger=0)
    context.term()


def measure(frame_bytes: int, seconds: float) -> dict:
    ctx = multiprocessing.get_context("spawn")
    port_queue, result_queue = ctx.Queue(), ctx.Queue()
    child = ctx.Process(target=_receiver, args=(port_queue, result_queue), daemon=True)
    child.start()
    context = zmq.Context()
    push = context.socket(zmq.PUSH)
    try:
        push.set_hwm(HWM_FRAMES)
        push.connect(f"tcp://127.0.0.1:{port_queue.get(timeout=30)}")
        frame = zmq.Frame(bytes(frame_bytes))
        for phase_s in (WARMUP_S, seconds):
            deadline = time.perf_counter() + phase_s
            while time.perf_counter() < deadline:
                for _ in range(16):
                    push.send(frame, copy=False)
            push.send(STOP)
        frames, total_bytes, elapsed_s = result_queue.get(timeout=60 + seconds)
        child.join(timeout=10)
    finally:
        push.close(linger=0)
        context.term()
        if child.is_alive():
            child.kill()
    elapsed_s = max(elapsed_s, 1e-9)
    return {"frame_bytes": frame_bytes, "frames": frames, "seconds": round(elapsed_s, 3),
            "frames_per_s": round(frames / elapsed_s, 1),
            "mb_per_s": round(total_bytes / elapsed_s / MB_BYTES, 2)}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.perf.zmq_limits", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--frame-bytes", type=int, default=FRAME_BYTES_DEFAULT)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.error = lambda message: parser.exit(2, f"{parser.prog}: error: {message}\n")
    args = parser.parse_args(argv)
    if not 1 <= args.frame_bytes <= 256 * MB_BYTES:
        parser.error(f"--frame-bytes must be 1..{256 * MB_BYTES}, got {args.frame_bytes}")
    if not 0 < args.seconds <= 600:
        parser.error(f"--seconds must be in (0, 600], got {args.seconds}")
    print(json.dumps(measure(args.frame_bytes, args.seconds)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
