"""Server overhead: the same chat turn through HTTP (streamed) and through the engine
directly (`toolgate chat`), same model, prompt and greedy settings, same run.

usage: python benches/server_overhead.py TOOLGATE_BIN MODEL.gguf [--runs 3] [--max-tokens 64]

Each HTTP measurement uses a freshly started server, so neither side reuses a cached
prefix. Reports time to first token and decode tokens/s for both, and the ratios.
"""
import argparse
import json
import re
import socket
import statistics
import subprocess
import time
import urllib.request

MESSAGE = "Write a short paragraph about the history of Paris."


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def engine_direct(bin_, model, max_tokens):
    out = subprocess.run([bin_, "chat", "--model", model, "--tool-fallback", "generic", "--message", MESSAGE,
                          "--max-tokens", str(max_tokens), "--temperature", "0"],
                         capture_output=True, text=True, check=True)
    m = re.search(r"prompt (\d+) tokens, ([\d.]+) tok/s \| decode (\d+) tokens, ([\d.]+) tok/s", out.stderr)
    prompt_tokens, prompt_tps, decode_tokens, decode_tps = int(m[1]), float(m[2]), int(m[3]), float(m[4])
    return prompt_tokens / prompt_tps, decode_tps, decode_tokens


def over_http(bin_, model, max_tokens):
    port = free_port()
    srv = subprocess.Popen([bin_, "serve", "--model", model, "--tool-fallback", "generic", "--port", str(port)],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        base = f"http://127.0.0.1:{port}"
        for _ in range(300):
            try:
                urllib.request.urlopen(f"{base}/health", timeout=1)
                break
            except OSError:
                time.sleep(0.1)
        body = json.dumps({"messages": [{"role": "user", "content": MESSAGE}], "max_tokens": max_tokens,
                           "temperature": 0, "stream": True, "stream_options": {"include_usage": True}}).encode()
        req = urllib.request.Request(f"{base}/v1/chat/completions", body, {"content-type": "application/json"})
        t0 = time.monotonic()
        first = last = None
        tokens = 0
        with urllib.request.urlopen(req, timeout=600) as r:
            for line in r:
                line = line.decode().strip()
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                ev = json.loads(line[6:])
                if ev.get("usage"):
                    tokens = ev["usage"]["completion_tokens"]
                elif ev["choices"] and ev["choices"][0]["delta"].get("content"):
                    now = time.monotonic()
                    first = first or now
                    last = now
        return first - t0, (tokens - 1) / (last - first), tokens
    finally:
        srv.terminate()
        srv.wait()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("bin")
    ap.add_argument("model")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=64)
    a = ap.parse_args()
    direct, http = [], []
    for _ in range(a.runs):
        direct.append(engine_direct(a.bin, a.model, a.max_tokens))
        http.append(over_http(a.bin, a.model, a.max_tokens))
    med = lambda xs, i: statistics.median(x[i] for x in xs)
    d_ttft, d_tps, h_ttft, h_tps = med(direct, 0), med(direct, 1), med(http, 0), med(http, 1)
    print(f"engine direct: TTFT {d_ttft * 1000:.0f} ms, decode {d_tps:.1f} tok/s ({direct[0][2]} tokens)")
    print(f"through HTTP:  TTFT {h_ttft * 1000:.0f} ms, decode {h_tps:.1f} tok/s ({http[0][2]} tokens)")
    print(f"added TTFT {1000 * (h_ttft - d_ttft):+.0f} ms; decode through HTTP = {h_tps / d_tps:.3f}x direct "
          f"(median of {a.runs})")


main()
