"""The fleet behind LiteLLM's router (tests/integration/fleet.rs runs this).

    python litellm_router.py REQUESTS CLIENTS BASE_URL...

Sends REQUESTS forced tool-call requests (half streamed) from CLIENTS concurrent tasks
through a litellm.Router over the replicas at BASE_URL... ("least-busy" routing, a
deployment out for 30 s after one failure, up to 3 retries on another). Prints "third"
when a third have finished (the test then drains one replica and kills another), and at
the end one JSON line: every request's start and end time (epoch seconds), the
replica that answered it, and its error if it failed.
"""

import asyncio
import json
import os
import sys
import time
import urllib.request

# No network at run time: litellm's bundled model cost map, not the one it would fetch.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from litellm import Router  # noqa: E402

CITIES = ["Paris", "Oslo", "Rome", "Lima"]
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather for a city",
          "parameters": {"type": "object", "properties": {
              "city": {"type": "string", "enum": CITIES},
              "days": {"type": "integer", "minimum": 1, "maximum": 9}},
              "required": ["city", "days"], "additionalProperties": False}}}]


def check(arguments):
    """None when `arguments` are valid for the tool's schema, else why not."""
    try:
        v = json.loads(arguments)
    except ValueError as e:
        return f"arguments {arguments!r}: {e}"
    ok = (isinstance(v, dict) and len(v) == 2 and v.get("city") in CITIES
          and isinstance(v.get("days"), int) and 1 <= v["days"] <= 9)
    return None if ok else f"arguments not valid for the schema: {arguments}"


async def one(router, i):
    stream = i % 2 == 0
    city = CITIES[i % 4]
    kwargs = dict(model="toolgate", tools=TOOLS, tool_choice="required", max_tokens=96, temperature=0,
                  messages=[{"role": "user", "content": f"Weather in {city} for {i % 9 + 1} days?"}])
    if not stream:
        r = await router.acompletion(**kwargs)
        calls = r.choices[0].message.tool_calls or []
        if not calls:
            return None, f"request {i}: no call"
        return r._hidden_params.get("api_base"), check(calls[0].function.arguments)
    r = await router.acompletion(stream=True, **kwargs)
    arguments = ""
    async for chunk in r:
        for call in (chunk.choices[0].delta.tool_calls or []) if chunk.choices else []:
            if call.index == 0 and call.function and call.function.arguments:
                arguments += call.function.arguments
    return r._hidden_params.get("api_base"), check(arguments)


async def main():
    requests, clients, bases = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3:]
    # The id the replicas serve (they refuse requests for another model).
    with urllib.request.urlopen(f"{bases[0]}/v1/models") as r:
        served = json.load(r)["data"][0]["id"]
    router = Router(
        model_list=[{"model_name": "toolgate",
                     "litellm_params": {"model": f"openai/{served}", "api_base": f"{b}/v1", "api_key": "none"}}
                    for b in bases],
        routing_strategy="least-busy", num_retries=3, retry_after=0, allowed_fails=1, cooldown_time=30,
        timeout=300)
    queue = list(range(requests))
    results = []

    async def client():
        while queue:
            i = queue.pop(0)
            start = time.time()
            try:
                base, error = await one(router, i)
            except Exception as e:  # a failed request is a result, not a crash
                base, error = None, f"request {i}: {type(e).__name__}: {e}"[:400]
            results.append({"start": start, "end": time.time(), "base": base, "error": error})
            if len(results) == requests // 3:
                print("third", flush=True)

    await asyncio.gather(*(client() for _ in range(clients)))
    print(json.dumps(results), flush=True)


asyncio.run(main())
