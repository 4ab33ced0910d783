"""Load test: N concurrent streaming OpenAI clients against a running toolgate server.

usage: python benches/load_test.py BASE_URL [--clients 32] [--requests 200] [--auto 0.0] [--pid PID]

Every request offers two tools, streamed, with tool_choice `required` — or `auto` for
the share given by --auto, where answering in text is allowed; each streamed call is
accumulated by the SDK and validated against its tool's schema.
Prints errors, invalid calls, latency percentiles, throughput and (with --pid) the
server's peak RSS. Exit status 1 on any error or invalid call.
"""
import argparse
import asyncio
import json
import random
import time

from openai import AsyncOpenAI, LengthFinishReasonError

TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "Current weather for a city",
     "parameters": {"type": "object", "properties": {"city": {"type": "string"},
                    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}, "required": ["city", "unit"]}}},
    {"type": "function", "function": {"name": "add", "description": "Add two integers",
     "parameters": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                    "required": ["a", "b"]}}},
]
QUESTIONS = ["What is the weather in Paris?", "Add 17 and 25.", "Is it cold in Oslo, in fahrenheit?",
             "What is 3 plus 4?", "Weather in Lima please", "Sum 100 and -7"]


def valid(name, arguments):
    a = json.loads(arguments)
    if name == "get_weather":
        return isinstance(a.get("city"), str) and a.get("unit") in ("celsius", "fahrenheit") and set(a) == {"city", "unit"}
    if name == "add":
        return type(a.get("a")) is int and type(a.get("b")) is int and set(a) == {"a", "b"}
    return False


def peak_rss_mib(pid):
    try:
        for line in open(f"/proc/{pid}/status"):
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None


async def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("base")
    ap.add_argument("--clients", type=int, default=32)
    ap.add_argument("--requests", type=int, default=200)
    ap.add_argument("--max-tokens", type=int, default=96)
    ap.add_argument("--auto", type=float, default=0.0, help="share of requests with tool_choice auto")
    ap.add_argument("--pid", type=int)
    args = ap.parse_args()
    client = AsyncOpenAI(base_url=f"{args.base}/v1", api_key="unused", max_retries=0, timeout=3600)
    todo = list(range(args.requests))
    lat, ttft, errors, invalid, tokens = [], [], [], [], 0
    calls_ok, text_answers, cut = 0, 0, 0
    rss = []

    async def worker(w):
        nonlocal tokens, calls_ok, text_answers, cut
        rnd = random.Random(w)
        while todo:
            i = todo.pop()
            auto = rnd.random() < args.auto
            t0 = time.monotonic()
            first = None
            try:
                async with client.chat.completions.stream(
                        model="default", messages=[{"role": "user", "content": rnd.choice(QUESTIONS)}], tools=TOOLS,
                        tool_choice="auto" if auto else "required", parallel_tool_calls=False, temperature=0.7, seed=i,
                        max_tokens=args.max_tokens, stream_options={"include_usage": True}) as s:
                    async for ev in s:
                        if first is None and ev.type in ("chunk",) and ev.chunk.choices and (
                                ev.chunk.choices[0].delta.tool_calls or ev.chunk.choices[0].delta.content):
                            first = time.monotonic() - t0
                    final = await s.get_final_completion()
                calls = final.choices[0].message.tool_calls or []
                tokens += final.usage.completion_tokens
                if auto and not calls:
                    text_answers += 1
                elif final.choices[0].finish_reason != "tool_calls" or len(calls) != 1 or not valid(
                        calls[0].function.name, calls[0].function.arguments):
                    invalid.append((i, final.choices[0].finish_reason, [c.function for c in calls]))
                else:
                    calls_ok += 1
            except LengthFinishReasonError:
                cut += 1  # max_tokens reached (the SDK's stream helper raises on it)
            except Exception as e:  # noqa: BLE001 - every failure is a result here
                errors.append((i, repr(e)[:200]))
            lat.append(time.monotonic() - t0)
            if first is not None:
                ttft.append(first)
            if args.pid and (r := peak_rss_mib(args.pid)):
                rss.append(r)

    t0 = time.monotonic()
    await asyncio.gather(*(worker(w) for w in range(args.clients)))
    wall = time.monotonic() - t0
    lat.sort()
    ttft.sort()
    pct = lambda xs, p: xs[min(len(xs) - 1, int(p * len(xs)))] if xs else float("nan")
    print(f"requests {args.requests}  clients {args.clients}  wall {wall:.1f}s  "
          f"throughput {args.requests / wall:.2f} req/s, {tokens / wall:.1f} completion tok/s")
    print(f"errors {len(errors)}  invalid calls {len(invalid)}  valid calls {calls_ok}  text answers (auto) {text_answers}  "
          f"cut by max_tokens {cut}")
    print(f"latency p50 {pct(lat, .5):.2f}s  p95 {pct(lat, .95):.2f}s  max {lat[-1]:.2f}s")
    print(f"ttft p50 {pct(ttft, .5):.2f}s  p95 {pct(ttft, .95):.2f}s")
    if rss:
        print(f"server peak RSS {max(rss):.0f} MiB (after first request {rss[0]:.0f} MiB)")
    for e in (errors + invalid)[:10]:
        print("  ", e)
    raise SystemExit(1 if errors or invalid else 0)


asyncio.run(main())
