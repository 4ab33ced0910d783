"""An agent loop through the official OpenAI Python SDK with `tool_choice: "auto"`, the
setting every agent framework uses: the model calls a tool, the tool's result goes
back, the model answers. Then the first turn again, streamed.

usage: python agent_loop.py BASE_URL MODEL_ID
Exits non-zero (with the failing assertion) if the first turn is not a valid call of
the tool (streamed and not), or a later turn is neither valid calls nor text.
Qwen2.5-Coder-0.5B, the model this runs on in the tests, calls the tool again after
its result instead of answering (it does so in native mode without recovery too, at
temperature 0 every time, and llama.cpp's greedy continuation of the same prompt is
the same call again, then `{"response": …}`): the loop prints whether a final text
answer came and stops after four turns. Each later turn must hold only the calls the
model wrote: the JSON it writes after a recovered call (`{"response": …}`) was once
forced into three more calls, one with an empty city.
"""
import json
import sys

from openai import OpenAI

base, model = sys.argv[1], sys.argv[2]
client = OpenAI(base_url=f"{base}/v1", api_key="unused", max_retries=0, timeout=300)

TOOLS = [{
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather for a city",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "City name"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city"],
        },
    },
}]


def get_weather(city, unit="celsius"):
    return {"city": city, "temperature": 18, "unit": unit, "sky": "sunny"}


question = {"role": "user", "content": "What is the weather like in Paris today?"}
messages = [question]
calls, final = [], None
for step in range(4):
    r = client.chat.completions.create(
        model=model, messages=messages, tools=TOOLS, tool_choice="auto", temperature=0, max_tokens=150)
    msg = r.choices[0].message
    print(f"step {step}: finish={r.choices[0].finish_reason} content={msg.content!r} calls={msg.tool_calls}")
    if msg.tool_calls:
        assert r.choices[0].finish_reason == "tool_calls", r
        turn = [(c.function.name, c.function.arguments) for c in msg.tool_calls]
        assert len(set(turn)) == len(turn), f"the same call twice in one turn: {turn}"
        messages.append(msg.model_dump(exclude_none=True))
        for c in msg.tool_calls:
            assert c.function.name == "get_weather", c
            args = json.loads(c.function.arguments)
            assert isinstance(args.get("city"), str) and set(args) <= {"city", "unit"}, args
            assert args["city"].strip(), f"a call with an empty city: {turn}"
            calls.append(args)
            messages.append({"role": "tool", "tool_call_id": c.id, "content": json.dumps(get_weather(**args))})
        continue
    final = msg.content
    break
assert calls, "the model never called the tool"
print("final answer:", repr(final) if final else "none within four turns (the model kept calling)")

# The first turn streamed: the call arrives as tool-call deltas, not as content.
stream = client.chat.completions.create(
    model=model, messages=[question], tools=TOOLS, tool_choice="auto", temperature=0, max_tokens=150, stream=True)
name, arguments, content, finish = "", "", "", None
for chunk in stream:
    if not chunk.choices:
        continue
    d = chunk.choices[0].delta
    content += d.content or ""
    for tc in d.tool_calls or []:
        name += tc.function.name or ""
        arguments += tc.function.arguments or ""
    finish = chunk.choices[0].finish_reason or finish
assert name == "get_weather" and json.loads(arguments)["city"], (name, arguments, content)
assert finish == "tool_calls" and not content.strip(), (finish, content)
print("ok errors")
