"""The tools the SDK scripts declare, and the check that a call is valid for them."""
import json

# Chat Completions shape.
TOOLS = [{
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
            "required": ["city", "unit"],
        },
    },
}, {
    "type": "function",
    "function": {
        "name": "add",
        "description": "Add two integers",
        "parameters": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                       "required": ["a", "b"]},
    },
}]

# The Responses API's flat shape.
FLAT_TOOLS = [{"type": "function", **t["function"]} for t in TOOLS]


def valid(name, arguments):
    """Whether a call (its name and arguments JSON) is valid for its tool's schema."""
    args = json.loads(arguments)
    if name == "get_weather":
        return isinstance(args["city"], str) and args["unit"] in ("celsius", "fahrenheit") and set(args) == {"city", "unit"}
    if name == "add":
        return isinstance(args["a"], int) and isinstance(args["b"], int) and set(args) == {"a", "b"}
    return False
