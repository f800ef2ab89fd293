#!/usr/bin/env python3
"""deepinfer serve against llama-cpp-python's OpenAI-compatible server: throughput
(generated tokens/s) and time to first token (p50, p99) at 1, 8 and 64 concurrent
streams, same GGUF, same threads, same load generator (this script), one run.

    python bench/serve_bench.py --cli build/release/examples/deepinfer \
        --model $DI_CACHE/assets/smollm2-135m-instruct/SmolLM2-135M-Instruct.Q4_1.gguf \
        --threads 2 [--llama-python PYTHON] [--streams 1,8,64] [--max-tokens 32] \
        [--prefix-cache]

--llama-python is a Python with `llama-cpp-python[server]` installed (the anchor);
without it only deepinfer is measured. Each stream is a greedy Chat Completions
request with its own prompt (no prefix shared beyond the chat template), streamed;
TTFT is from sending the request to the first chunk that carries content, and a
stream's tokens are the usage the server reports (llama-cpp-python's streams carry
no usage: their content chunks, one per token, are counted); a stream that ends
short or fails is counted and named. llama-cpp-python's server computes one request
at a time (one Llama under a lock; --interrupt_requests False, or each new request
would end the stream in progress) and reuses the previous prompt's common prefix;
deepinfer runs with --no-prefix-cache unless --prefix-cache is given. The ratios
are printed last (deepinfer / llama-cpp-python: > 1 is faster for throughput, < 1
lower for TTFT).
"""

import argparse
import http.client
import json
import socket
import statistics
import subprocess
import threading
import time

TOPICS = ["the sea", "a mountain", "the moon", "a city", "a forest", "a river", "the sun",
          "a desert", "winter", "a garden", "an island", "a library", "a train", "a bridge",
          "the rain", "a castle"]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_http(port, path, proc, timeout=180):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the server exited {proc.returncode}")
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            c.request("GET", path)
            if c.getresponse().status == 200:
                return
        except OSError:
            pass
        time.sleep(0.2)
    raise RuntimeError("the server did not come up")


def one_stream(port, i, max_tokens, model, out):
    try:
        stream(port, i, max_tokens, model, out)
    except Exception as e:  # counted as failed; the round goes on
        out[i] = None
        print(f"stream {i}: {e!r}", flush=True)


def stream(port, i, max_tokens, model, out):
    body = json.dumps({
        "model": model, "temperature": 0, "max_tokens": max_tokens, "stream": True,
        "stream_options": {"include_usage": True},
        "messages": [{"role": "user", "content": f"Write about {TOPICS[i % len(TOPICS)]} "
                                                 f"in the style of story number {i}."}]})
    t0 = time.perf_counter()
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    c.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
    resp = c.getresponse()
    assert resp.status == 200, resp.read()
    ttft, tokens, chunks = None, None, 0
    for raw in resp:
        line = raw.decode().strip()
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        chunk = json.loads(line[6:])
        if chunk.get("usage"):
            tokens = chunk["usage"]["completion_tokens"]
        for ch in chunk.get("choices") or []:
            if (ch.get("delta") or {}).get("content"):
                chunks += 1
                if ttft is None:
                    ttft = time.perf_counter() - t0
    c.close()
    out[i] = (ttft if ttft is not None else time.perf_counter() - t0,
              tokens if tokens is not None else chunks)


def measure(port, n, max_tokens, model, first=0):
    out = {}
    threads = [threading.Thread(target=one_stream, args=(port, i, max_tokens, model, out))
               for i in range(first, first + n)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    done = [v for v in out.values() if v is not None]
    ttfts = sorted(v[0] for v in done)
    tokens = sum(v[1] for v in done)
    # streams that ended with fewer tokens than asked for (or failed)
    short = n - sum(1 for v in done if v[1] >= max_tokens)

    def pct(p):
        return ttfts[min(len(ttfts) - 1, int(round(p / 100 * (len(ttfts) - 1))))]
    return {"tok_s": tokens / wall, "ttft_p50": pct(50), "ttft_p99": pct(99),
            "tokens": tokens, "wall": wall, "ttft_mean": statistics.mean(ttfts), "short": short}


def start_deepinfer(args, port):
    return subprocess.Popen(
        [args.cli, "serve", "--model", args.model, "--port", str(port), "--threads",
         str(args.threads), "--parallel", "64"]
        + ([] if args.prefix_cache else ["--no-prefix-cache"]),
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def start_llama(args, port):
    return subprocess.Popen(
        [args.llama_python, "-m", "llama_cpp.server", "--model", args.model, "--host",
         "127.0.0.1", "--port", str(port), "--n_threads", str(args.threads),
         "--n_threads_batch", str(args.threads), "--n_ctx", "4096", "--verbose", "False",
         # its default (True) ends the stream in progress when another request
         # arrives; off, requests wait for the model in turn
         "--interrupt_requests", "False"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def run_server(name, start, args, streams):
    port = free_port()
    proc = start(args, port)
    try:
        wait_http(port, "/v1/models", proc)
        # warm-up, with a prompt no round sends (llama.cpp keeps the last prompt's
        # KV and would skip prefilling it again)
        measure(port, 1, 4, "bench", first=10_000)
        results = {}
        for n in streams:
            results[n] = measure(port, n, args.max_tokens, "bench")
            r = results[n]
            print(f"{name:>16} {n:>3} streams: {r['tok_s']:8.1f} tok/s, TTFT p50 "
                  f"{r['ttft_p50'] * 1e3:8.1f} ms p99 {r['ttft_p99'] * 1e3:8.1f} ms "
                  f"({r['tokens']} tokens in {r['wall']:.1f} s"
                  + (f"; {r['short']} streams short or failed" if r["short"] else "") + ")",
                  flush=True)
        return results
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cli", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--llama-python")
    ap.add_argument("--streams", default="1,8,64")
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--prefix-cache", action="store_true",
                    help="keep deepinfer's prefix cache on (the prompts then share the chat "
                         "template's leading blocks, as llama.cpp reuses the previous prompt's "
                         "common prefix)")
    args = ap.parse_args()
    streams = [int(s) for s in args.streams.split(",")]
    ours = run_server("deepinfer serve", start_deepinfer, args, streams)
    if not args.llama_python:
        print("no --llama-python: the anchor was not measured")
        return
    theirs = run_server("llama-cpp-python", start_llama, args, streams)
    print("ratios deepinfer / llama-cpp-python (throughput: > 1 faster; TTFT: < 1 lower):")
    for n in streams:
        a, b = ours[n], theirs[n]
        print(f"  {n:>3} streams: throughput {a['tok_s'] / b['tok_s']:.2f}x, TTFT p50 "
              f"{a['ttft_p50'] / b['ttft_p50']:.2f}x, p99 {a['ttft_p99'] / b['ttft_p99']:.2f}x")


if __name__ == "__main__":
    main()
