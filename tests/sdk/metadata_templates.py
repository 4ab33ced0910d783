"""Drive a toolgate server that serves a model with a hand-written tool template
(TabbyAPI-style `tool_start` / `tool_end` / `stop_strings` metadata) through the
official OpenAI Python SDK: calls under `required`, a named tool and `auto`, streamed
and not, each valid for its tool's schema.

usage: python metadata_templates.py BASE_URL MODEL_ID forced|auto
"""
import sys

from openai import OpenAI

from weather_tools import TOOLS, valid

base, model, mode = sys.argv[1], sys.argv[2], sys.argv[3]
client = OpenAI(base_url=f"{base}/v1", api_key="unused", max_retries=0, timeout=300)

def ask(messages, choice, stream):
    """The calls of one turn, as the SDK gives them: [(name, arguments)], finish reason."""
    kw = dict(model=model, messages=messages, tools=TOOLS, tool_choice=choice, temperature=0, max_tokens=160)
    if not stream:
        r = client.chat.completions.create(**kw)
        msg = r.choices[0].message
        return [(c.function.name, c.function.arguments) for c in msg.tool_calls or []], r.choices[0].finish_reason
    calls, finish = {}, None
    for chunk in client.chat.completions.create(stream=True, **kw):
        if not chunk.choices:
            continue
        d = chunk.choices[0].delta
        for tc in d.tool_calls or []:
            c = calls.setdefault(tc.index, ["", ""])
            c[0] += tc.function.name or ""
            c[1] += tc.function.arguments or ""
        finish = chunk.choices[0].finish_reason or finish
    return [tuple(calls[i]) for i in sorted(calls)], finish


WEATHER = [{"role": "user", "content": "What is the weather in Paris, in celsius?"}]
NAMED = {"type": "function", "function": {"name": "add"}}

# `forced`: calls under `required` and a named tool, and in `auto` either a text answer
# or valid calls (a 135M model answers in text). `auto`: the model must call in `auto`.
cases = [("required", True), (NAMED, True), ("auto", False)] if mode == "forced" else [("auto", True)]
for stream in (False, True):
    for choice, must_call in cases:
        calls, finish = ask(WEATHER, choice, stream)
        assert calls or not must_call, f"no call for {choice} (stream={stream}): finish {finish}"
        assert finish in (("tool_calls",) if calls else ("stop", "length")), (choice, stream, finish, calls)
        assert all(valid(n, a) for n, a in calls), (choice, stream, calls)
        if choice is NAMED:
            assert all(n == "add" for n, _ in calls), calls
        print("ok", "streamed" if stream else "non-streamed", choice if isinstance(choice, str) else "named", calls)

print("ok errors: none")
