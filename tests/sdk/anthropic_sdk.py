"""Drive a running toolgate server with the official Anthropic Python SDK.

usage: python anthropic_sdk.py BASE_URL MODEL_ID
"""
import json
import sys
import urllib.request

import anthropic
import pydantic

base, model = sys.argv[1], sys.argv[2]
client = anthropic.Anthropic(base_url=base, api_key="unused", max_retries=0, timeout=300)

TOOLS = [{
    "name": "get_weather",
    "description": "Current weather for a city",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
                     "required": ["city", "days"]},
}]
# This SDK version no longer takes `temperature` as an argument; the server still
# reads it from the body (greedy decoding makes streamed and non-streamed comparable).
T0 = {"temperature": 0}
Q = [{"role": "user", "content": "What is the weather in Paris for the next 2 days?"}]

# Non-streaming with tool_choice any.
m = client.messages.create(model=model, max_tokens=60, messages=Q, tools=TOOLS, extra_body=T0,
                           tool_choice={"type": "any", "disable_parallel_tool_use": True})
assert m.stop_reason == "tool_use", m
uses = [b for b in m.content if b.type == "tool_use"]
assert len(uses) == 1 and uses[0].name == "get_weather", m
assert isinstance(uses[0].input["city"], str) and isinstance(uses[0].input["days"], int), uses[0].input
assert m.usage.input_tokens > 0 and m.usage.output_tokens > 0
print("ok messages:", uses[0].input)

# count_tokens renders the request as messages does: the same count as its usage.
counted = client.messages.count_tokens(model=model, messages=Q, tools=TOOLS,
                                       tool_choice={"type": "any", "disable_parallel_tool_use": True})
assert counted.input_tokens == m.usage.input_tokens, (counted, m.usage)
plain = client.messages.count_tokens(model=model, messages=Q)
assert 0 < plain.input_tokens < counted.input_tokens, (plain, counted)
# A stop sequence that ends the turn is named, streamed and not.
kw = dict(model=model, max_tokens=40, extra_body=T0, stop_sequences=["zzz-never", " "],
          messages=[{"role": "user", "content": "Describe the sea in one sentence."}])
r = client.messages.create(**kw)
assert (r.stop_reason, r.stop_sequence) == ("stop_sequence", " "), r
with client.messages.stream(**kw) as s:
    final = s.get_final_message()
assert (final.stop_reason, final.stop_sequence) == ("stop_sequence", " "), final
assert client.messages.create(model=model, max_tokens=3, extra_body=T0, messages=Q).stop_sequence is None
print("ok stop_sequence:", repr(r.content[0].text))
print("ok count_tokens:", counted.input_tokens, "with tools,", plain.input_tokens, "without")

# Streaming: the SDK accumulates input_json_delta into the same tool_use input.
deltas = 0
with client.messages.stream(model=model, max_tokens=60, messages=Q, tools=TOOLS, extra_body=T0,
                            tool_choice={"type": "tool", "name": "get_weather", "disable_parallel_tool_use": True}) as s:
    for ev in s:
        if ev.type == "content_block_delta" and ev.delta.type == "input_json_delta":
            deltas += 1
    final = s.get_final_message()
suse = [b for b in final.content if b.type == "tool_use"]
assert final.stop_reason == "tool_use" and len(suse) == 1, final
assert suse[0].input == uses[0].input, (suse[0].input, uses[0].input)
assert deltas > 1, deltas
print("ok streamed:", suse[0].input, f"in {deltas} input_json deltas")

# tool_result turn.
m2 = client.messages.create(model=model, max_tokens=30, extra_body=T0, tools=TOOLS, tool_choice={"type": "none"},
                            system="You are a weather assistant.",
                            messages=Q + [
                                {"role": "assistant", "content": [{"type": "tool_use", "id": uses[0].id,
                                                                   "name": "get_weather", "input": uses[0].input}]},
                                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": uses[0].id,
                                                              "content": json.dumps({"forecast": "sunny, 21C"})}]},
                            ])
assert m2.stop_reason in ("end_turn", "max_tokens") and m2.content and m2.content[0].type == "text", m2
print("ok tool_result turn:", m2.content[0].text[:60].replace("\n", " "))

# Streamed plain text equals non-streamed.
plain = client.messages.create(model=model, max_tokens=12, extra_body=T0, messages=[{"role": "user", "content": "Say hello"}])
with client.messages.stream(model=model, max_tokens=12, extra_body=T0, messages=[{"role": "user", "content": "Say hello"}]) as s:
    text = "".join(s.text_stream)
assert text == plain.content[0].text, (text, plain)

# Structured output: messages.parse sends output_config.format; the text is one JSON
# value of the schema, which the SDK parses into the model (streamed too).
class Forecast(pydantic.BaseModel):
    city: str
    days: int


kw = dict(model=model, max_tokens=60, extra_body=T0, output_format=Forecast, messages=Q)
parsed = client.messages.parse(**kw)
assert isinstance(parsed.parsed_output, Forecast) and parsed.stop_reason == "end_turn", parsed
with client.messages.stream(**kw) as s:
    streamed = s.get_final_message()
assert streamed.parsed_output == parsed.parsed_output, (streamed, parsed)
print("ok messages.parse:", parsed.parsed_output)

# An assistant prefill is continued: its text ends the prompt (its tokens exactly,
# no end of turn and no new assistant header), and the reply holds only what follows.
COLOUR = [{"role": "user", "content": "Name a colour."}]
PREFILL = "My favourite colour is"
cont = client.messages.create(model=model, max_tokens=8, extra_body=T0,
                              messages=COLOUR + [{"role": "assistant", "content": PREFILL}])
base_count = client.messages.count_tokens(model=model, messages=COLOUR).input_tokens
req = urllib.request.Request(f"{base}/tokenize", data=json.dumps({"content": PREFILL}).encode(),
                             headers={"content-type": "application/json"})
prefill_tokens = len(json.load(urllib.request.urlopen(req))["tokens"])
assert cont.usage.input_tokens == base_count + prefill_tokens, (cont.usage, base_count, prefill_tokens)
assert cont.content and not cont.content[0].text.startswith(PREFILL), cont
# A prefill cannot precede a forced call (the call would start inside the text).
try:
    client.messages.create(model=model, max_tokens=60, tools=TOOLS, tool_choice={"type": "any"},
                           messages=Q + [{"role": "assistant", "content": "Sure:"}])
    raise AssertionError("expected BadRequestError")
except anthropic.BadRequestError as e:
    assert "prefill" in str(e), e
print("ok prefill:", repr(PREFILL + cont.content[0].text))

try:
    client.messages.create(model="nope", max_tokens=5, messages=Q)
    raise AssertionError("expected NotFoundError")
except anthropic.NotFoundError:
    pass
try:
    client.messages.create(model=model, max_tokens=5, messages=Q, tools=TOOLS, tool_choice={"type": "tool", "name": "missing"})
    raise AssertionError("expected BadRequestError")
except anthropic.BadRequestError as e:
    assert "missing" in str(e)
print("ok errors")
