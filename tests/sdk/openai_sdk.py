"""Drive a running toolgate server with the official OpenAI Python SDK.

usage: python openai_sdk.py BASE_URL MODEL_ID
Exits non-zero (with the failing assertion) if anything the SDK sees is wrong.
"""
import json
import sys

from openai import OpenAI

from weather_tools import TOOLS, valid as valid_call

base, model = sys.argv[1], sys.argv[2]
client = OpenAI(base_url=f"{base}/v1", api_key="unused", max_retries=0, timeout=300)

Q = [{"role": "user", "content": "What is the weather in Paris, in celsius?"}]


def valid(call):
    return valid_call(call.function.name, call.function.arguments)


# Non-streaming, tool_choice required and named.
for choice in ["required", {"type": "function", "function": {"name": "add"}}]:
    r = client.chat.completions.create(model=model, messages=Q, tools=TOOLS, tool_choice=choice,
                                       parallel_tool_calls=False, temperature=0, max_tokens=60)
    msg = r.choices[0].message
    assert r.choices[0].finish_reason == "tool_calls", r
    assert len(msg.tool_calls) == 1 and valid(msg.tool_calls[0]), msg
    if isinstance(choice, dict):
        assert msg.tool_calls[0].function.name == "add", msg
    assert r.usage.prompt_tokens > 0 and r.usage.completion_tokens > 0
    print("ok non-streamed", choice, msg.tool_calls[0].function.name, msg.tool_calls[0].function.arguments)

# Streaming: the SDK's own accumulation of tool-call deltas equals the non-streamed call.
whole = client.chat.completions.create(model=model, messages=Q, tools=TOOLS, tool_choice="required",
                                       parallel_tool_calls=False, temperature=0, max_tokens=60)
chunks = 0
with client.chat.completions.stream(model=model, messages=Q, tools=TOOLS, tool_choice="required",
                                    parallel_tool_calls=False, temperature=0, max_tokens=60,
                                    stream_options={"include_usage": True}) as stream:
    for event in stream:
        if event.type == "tool_calls.function.arguments.delta":
            chunks += 1
    final = stream.get_final_completion()
got, want = final.choices[0].message.tool_calls[0], whole.choices[0].message.tool_calls[0]
assert (got.function.name, got.function.arguments) == (want.function.name, want.function.arguments), (got, want)
assert final.choices[0].finish_reason == "tool_calls"
assert chunks > 1, f"arguments arrived in {chunks} chunk(s), expected incremental deltas"
assert final.usage is not None and final.usage.completion_tokens == whole.usage.completion_tokens
print("ok streamed", got.function.arguments, f"in {chunks} argument deltas")

# Raw streaming iterator too (what most agent frameworks use).
acc = {}
for ch in client.chat.completions.create(model=model, messages=Q, tools=TOOLS, tool_choice="required",
                                         parallel_tool_calls=False, temperature=0, max_tokens=60, stream=True):
    for tc in ch.choices[0].delta.tool_calls or []:
        a = acc.setdefault(tc.index, {"name": "", "arguments": ""})
        if tc.function.name:
            a["name"] = tc.function.name
        a["arguments"] += tc.function.arguments or ""
assert acc[0] == {"name": want.function.name, "arguments": want.function.arguments}, acc

# Two-turn tool conversation: the tool result goes back through the template.
call = whole.choices[0].message.tool_calls[0]
turn2 = Q + [
    {"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
    {"role": "tool", "tool_call_id": call.id, "content": json.dumps({"temperature": 18, "sky": "sunny"})},
]
r = client.chat.completions.create(model=model, messages=turn2, tools=TOOLS, tool_choice="none",
                                   temperature=0, max_tokens=30)
assert r.choices[0].message.content and not r.choices[0].message.tool_calls, r
print("ok two-turn:", r.choices[0].message.content[:60].replace("\n", " "))

# response_format json_schema strict.
schema = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 30},
                                           "population": {"type": "integer"}},
          "required": ["city", "population"], "additionalProperties": False}
r = client.chat.completions.create(
    model=model, messages=[{"role": "user", "content": "Describe Paris as JSON."}], temperature=0, max_tokens=60,
    response_format={"type": "json_schema", "json_schema": {"name": "city", "strict": True, "schema": schema}})
obj = json.loads(r.choices[0].message.content)
assert set(obj) == {"city", "population"} and isinstance(obj["population"], int), obj
print("ok json_schema:", obj)

# logprobs: the SDK's typed objects, non-streamed and streamed; the tokens spell the content.
r = client.chat.completions.create(model=model, messages=[{"role": "user", "content": "Say hello."}], temperature=0,
                                   max_tokens=12, logprobs=True, top_logprobs=2)
lp = r.choices[0].logprobs.content
assert "".join(t.token for t in lp) == r.choices[0].message.content, (lp, r.choices[0].message.content)
assert all(t.logprob <= 0 and len(t.top_logprobs) == 2 and t.top_logprobs[0].token == t.token for t in lp), lp
streamed = []
for c in client.chat.completions.create(model=model, messages=[{"role": "user", "content": "Say hello."}],
                                        temperature=0, max_tokens=12, logprobs=True, top_logprobs=2, stream=True):
    if c.choices and c.choices[0].logprobs and c.choices[0].logprobs.content:
        streamed += c.choices[0].logprobs.content
assert [t.token for t in streamed] == [t.token for t in lp], (streamed, lp)
print("ok logprobs:", len(lp), "tokens")

# Errors surface as the SDK's typed exceptions.
import openai
try:
    client.chat.completions.create(model="no-such-model", messages=Q)
    raise AssertionError("expected NotFoundError")
except openai.NotFoundError as e:
    assert "no-such-model" in str(e)
try:
    client.chat.completions.create(model=model, messages=Q, tools=TOOLS, tool_choice={"type": "function", "function": {"name": "nope"}})
    raise AssertionError("expected BadRequestError")
except openai.BadRequestError as e:
    assert "nope" in str(e)
print("ok errors")
