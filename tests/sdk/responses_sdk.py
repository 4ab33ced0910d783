"""Drive a running toolgate server through the OpenAI Responses API with the official
OpenAI Python SDK (`client.responses.create`) and, when installed, the openai-agents
Runner (whose default model talks to `/v1/responses`).

usage: python responses_sdk.py BASE_URL MODEL_ID
"""
import json
import sys

import openai
from openai import OpenAI

from weather_tools import FLAT_TOOLS as TOOLS, valid

base, model = sys.argv[1], sys.argv[2]
client = OpenAI(base_url=f"{base}/v1", api_key="unused", max_retries=0, timeout=300)

Q = "What is the weather in Paris, in celsius?"

# Forced calls, not streamed: function_call items with a call_id.
for choice in ["required", {"type": "function", "name": "add"}]:
    r = client.responses.create(model=model, input=Q, instructions="You are a helpful assistant.", tools=TOOLS,
                                tool_choice=choice, parallel_tool_calls=False, temperature=0, max_output_tokens=80,
                                store=False)
    calls = [o for o in r.output if o.type == "function_call"]
    assert r.status == "completed" and len(calls) == 1, r
    assert valid(calls[0].name, calls[0].arguments) and calls[0].call_id, calls
    if isinstance(choice, dict):
        assert calls[0].name == "add", calls
    assert r.usage.input_tokens > 0 and r.usage.output_tokens > 0
    print("ok non-streamed", choice, calls[0].name, calls[0].arguments)
    first = calls[0]

# The tool result goes back as a function_call_output; the answer is text.
r = client.responses.create(model=model, input=[
    {"role": "user", "content": "What is 2 plus 3?"},
    {"type": "function_call", "call_id": first.call_id, "name": first.name, "arguments": first.arguments},
    {"type": "function_call_output", "call_id": first.call_id, "output": "5"},
], tools=TOOLS, tool_choice="none", temperature=0, max_output_tokens=20)
assert r.output and r.output[0].type == "message", r
assert isinstance(r.output_text, str) and r.output_text, r
print("ok function_call_output ->", repr(r.output_text[:60]), r.status)

# Structured output: text.format json_schema.
schema = {"type": "object", "properties": {"city": {"type": "string"}, "temp": {"type": "integer"}},
          "required": ["city", "temp"], "additionalProperties": False}
r = client.responses.create(model=model, input="Give the city and the temperature as JSON.", temperature=0,
                            text={"format": {"type": "json_schema", "name": "w", "schema": schema, "strict": True}},
                            max_output_tokens=60)
v = json.loads(r.output_text)
assert set(v) == {"city", "temp"} and isinstance(v["temp"], int), v
print("ok text.format", v)

# Streamed: the documented events, and the final response equals what streamed.
kinds, args, done = [], {}, None
with client.responses.stream(model=model, input=Q, tools=TOOLS, tool_choice="required", parallel_tool_calls=False,
                             temperature=0, max_output_tokens=80) as s:
    for e in s:
        kinds.append(e.type)
        if e.type == "response.function_call_arguments.delta":
            args[e.item_id] = args.get(e.item_id, "") + e.delta
    done = s.get_final_response()
for k in ["response.created", "response.in_progress", "response.output_item.added",
          "response.function_call_arguments.delta", "response.function_call_arguments.done",
          "response.output_item.done", "response.completed"]:
    assert k in kinds, (k, kinds)
calls = [o for o in done.output if o.type == "function_call"]
assert len(calls) == 1 and valid(calls[0].name, calls[0].arguments) and args[calls[0].id] == calls[0].arguments, (calls, args)
print("ok streamed", calls[0].name, calls[0].arguments, len(kinds), "events")

# Streamed text.
text = ""
for e in client.responses.create(model=model, input="Say hello.", temperature=0, max_output_tokens=8, stream=True):
    if e.type == "response.output_text.delta":
        text += e.delta
    last = e
assert last.type in ("response.completed", "response.incomplete"), last
assert last.response.output_text == text and text, (text, last)
print("ok streamed text", repr(text), last.type)

# What toolgate does not do is a clear 400, and an unknown route a JSON 404.
try:
    client.responses.create(model=model, input="hi", previous_response_id="resp_123")
    raise AssertionError("previous_response_id was accepted")
except openai.BadRequestError as e:
    assert "does not store responses" in str(e), e
try:
    client.embeddings.create(model=model, input="hi")
    raise AssertionError("embeddings answered")
except openai.NotFoundError as e:
    assert "no route POST /v1/embeddings" in str(e), e
print("ok errors: previous_response_id 400, unknown route 404")

# openai-agents is in requirements.txt: a missing package fails here, loudly.
from agents import Agent, ModelSettings, OpenAIResponsesModel, Runner, function_tool, set_tracing_disabled

set_tracing_disabled(True)
seen = []

@function_tool
def get_weather(city: str, unit: str) -> str:
    """Current weather for a city."""
    seen.append((city, unit))
    return f"12 degrees {unit} in {city}"

agent = Agent(name="weather", instructions="Answer with the tool.", tools=[get_weather],
              model=OpenAIResponsesModel(model=model, openai_client=openai.AsyncOpenAI(
                  base_url=f"{base}/v1", api_key="unused", max_retries=0, timeout=300)),
              model_settings=ModelSettings(tool_choice="required", temperature=0, max_tokens=60),
              tool_use_behavior="stop_on_first_tool")
result = Runner.run_sync(agent, Q)
assert seen and isinstance(seen[0][0], str), seen
print("ok openai-agents Runner called get_weather", seen, "->", result.final_output)

print("ok errors")
