#!/usr/bin/env python3
"""Write tests/fixtures/schema_corpus.jsonl: tool-parameter schemas with valid and
invalid instances, for the constraint engine's exactness and property tests.

    python scripts/make-schema-corpus.py   # needs `jsonschema[format-nongpl]` (dev-time only)

Deterministic (fixed seed). Every schema closes its objects explicitly
(`additionalProperties` is always present), so the JSON Schema reading and toolgate's
(absent = closed, as OpenAI strict mode) agree. Every instance is checked here with
Python's `jsonschema` (draft 2020-12, formats on): a `valid` one validates, an
`invalid` one does not; the Rust test checks them again with the `jsonschema` crate.
Instances are stored as the exact text to feed the grammar (schema property order,
`", "`/`": "` or compact separators).
"""
import copy
import json
import os
import random
import re

from jsonschema import Draft202012Validator, FormatChecker

OUT = os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures", "schema_corpus.jsonl")

# (schema, valid values, invalid values)
ATOMS = [
    ({"type": "string"}, ["Paris", "", "San Francisco, CA", 'say "hi"', "C:\\temp\\x", "日本語 ünïcode",
                          "tab\tand\nnewline", "emoji 🎉", "a/b <c> & {d}"], [3, None, True]),
    ({"type": "string", "description": "free text"}, ["anything at all", "x"], [[], {}]),
    ({"type": "string", "minLength": 2, "maxLength": 8}, ["ab", "abcdefgh", "日本"], ["a", "abcdefghi", 5]),
    ({"type": "string", "maxLength": 40}, ["short", "", "forty characters exactly, no more: 12345"], ["x" * 41]),
    ({"type": "string", "minLength": 1}, ["q"], [""]),
    ({"enum": ["celsius", "fahrenheit"]}, ["celsius", "fahrenheit"], ["kelvin", "Celsius", 1]),
    ({"type": "string", "enum": ["low", "medium", "high"]}, ["low", "high"], ["urgent", None]),
    ({"enum": ["a", 1, None, True]}, ["a", 1, None, True], ["b", 2, False]),
    ({"const": "v1"}, ["v1"], ["v2", 1]),
    ({"type": "integer"}, [0, -7, 42, 123456789], [1.5, "3", None]),
    ({"type": "integer", "minimum": 1, "maximum": 14}, [1, 7, 14], [0, 15, -1]),
    ({"type": "integer", "minimum": 0}, [0, 999999], [-1]),
    ({"type": "integer", "exclusiveMinimum": 0, "exclusiveMaximum": 100}, [1, 99], [0, 100]),
    ({"type": "integer", "minimum": -50, "maximum": 50}, [-50, 0, 50], [-51, 51]),
    ({"type": "number"}, [3.14, -2, 0, 1e10, 0.0025], ["x", None]),
    ({"type": "number", "minimum": 0, "maximum": 1}, [0, 0.5, 1, 0.25, 1.0], [1.5, -0.1, 1.0001, "0.5"]),
    ({"type": "boolean"}, [True, False], ["true", 0]),
    ({"type": "null"}, [None], [0, "null"]),
    ({"type": ["string", "null"]}, ["x", None], [1, False]),
    ({"type": ["integer", "string"]}, [3, "three"], [3.5, None]),
    ({"anyOf": [{"type": "string"}, {"type": "integer"}]}, ["a", 3], [1.5, None]),
    ({"oneOf": [{"type": "boolean"}, {"type": "null"}]}, [True, None], ["x", 0]),
    ({"allOf": [{"type": "integer"}, {"minimum": 0}]}, [0, 5], [-1, "5"]),
    ({"allOf": [{"type": "string"}, {"maxLength": 5}]}, ["abc"], ["abcdef"]),
    ({"type": "string", "format": "date"}, ["2024-02-29", "1999-12-31"], ["2024-13-01", "24-01-01", "2024-1-1", "2023-02-29", "2024-04-31", "1900-02-29"]),
    ({"type": "string", "format": "time"}, ["12:30:00Z", "23:59:59+02:00"], ["25:00:00Z", "12:30"]),
    ({"type": "string", "format": "date-time"}, ["2024-05-01T09:00:00Z", "2024-05-01T09:00:00.5+01:00"],
     ["2024-05-01 09:00", "yesterday"]),
    ({"type": "string", "format": "uuid"}, ["123e4567-e89b-12d3-a456-426614174000"], ["123e4567", "not-a-uuid"]),
    ({"type": "string", "format": "email"}, ["a.b@example.com", "user+tag@mail.co.uk"], ["not-an-email", "a@"]),
    ({"type": "string", "format": "uri"}, ["https://example.com/a?b=c", "mailto:x@y.z"], ["no scheme here", ""]),
    ({"type": "string", "format": "ipv4"}, ["192.168.0.1", "8.8.8.8"], ["256.1.1.1", "1.2.3"]),
    ({"type": "string", "pattern": "^[A-Z]{3}$"}, ["SFO", "JFK"], ["sfo", "SFOX"]),
    ({"type": "string", "pattern": "^\\d{5}(-\\d{4})?$"}, ["94103", "94103-1234"], ["9410", "94103-12"]),
    ({"type": "string", "pattern": "^[a-z_][a-z0-9_]*$"}, ["snake_case1"], ["CamelCase", "1abc"]),
    ({"type": "string", "pattern": "[0-9]"}, ["a1b", "7"], ["abc"]),
    ({"type": "array", "items": {"type": "string"}}, [[], ["a", "b"]], [["a", 1], "a"]),
    ({"type": "array", "items": {"type": "integer"}, "minItems": 1, "maxItems": 3}, [[1], [1, 2, 3]],
     [[], [1, 2, 3, 4], [1.5]]),
    ({"type": "array", "items": {"enum": ["red", "green", "blue"]}}, [["red"], ["blue", "green"]], [["pink"]]),
    ({"type": "array", "prefixItems": [{"type": "number"}, {"type": "number"}], "items": False, "minItems": 2},
     [[1.5, 2], [-3, 0.25]], [[1], [1, 2, 3], ["a", 1]]),
    ({"type": "array", "items": {"type": "object", "properties": {"name": {"type": "string"},
                                                                   "qty": {"type": "integer", "minimum": 1}},
                                 "required": ["name", "qty"], "additionalProperties": False}},
     [[{"name": "apple", "qty": 2}], []], [[{"name": "apple"}], [{"name": "pear", "qty": 0}]]),
    ({"type": "object", "properties": {"lat": {"type": "number"}, "lon": {"type": "number"}},
      "required": ["lat", "lon"], "additionalProperties": False},
     [{"lat": 48.85, "lon": 2.35}], [{"lat": 1}, {"lat": 1, "lon": 2, "alt": 3}]),
    ({"type": "object", "additionalProperties": {"type": "string"}}, [{}, {"k": "v", "other": "w"}], [{"k": 1}]),
    ({"type": "object", "properties": {"a": {"type": "integer"}}, "additionalProperties": True},
     [{"a": 1}, {"a": 1, "x": [1, {"y": None}], "z": "s"}], [{"a": "1"}]),
    ({"type": "array", "items": {"type": "array", "items": {"type": "integer"}}}, [[[1, 2], []]], [[[1, "2"]]]),
]

NAMES = ["city", "unit", "query", "limit", "days", "location", "email", "date", "priority", "tags", "path",
         "recursive", "count", "user_id", "title", "body", "start", "end", "language", "coords", "filters",
         "status", "amount", "currency", "notes", "mode", "page", "verbose", "timezone", "items"]


FORMATS = FormatChecker()


@FORMATS.checks("time")
def rfc3339_time(value):
    # This jsonschema's own `time` check refuses valid RFC 3339 times ("12:30:00Z").
    if not isinstance(value, str):
        return True
    m = re.fullmatch(r"(\d\d):(\d\d):(\d\d)(\.\d+)?(Z|[+-](\d\d):(\d\d))", value)
    return bool(m) and int(m[1]) < 24 and int(m[2]) < 60 and int(m[3]) < 60 and (
        m[6] is None or (int(m[6]) < 24 and int(m[7]) < 60))


def check(schema, instance, valid):
    v = Draft202012Validator(schema, format_checker=FORMATS)
    return v.is_valid(instance) == valid


def text(value, rng, ascii_only=False):
    seps = rng.choice([(", ", ": "), (",", ":")])
    return json.dumps(value, ensure_ascii=ascii_only, separators=seps)


def object_schema(rng, n_props, depth=0):
    names = rng.sample(NAMES, n_props)
    props, valid_of, invalid_of = {}, {}, {}
    for name in names:
        if depth < 1 and rng.random() < 0.15:
            sub, sv, si = object_schema(rng, rng.randint(1, 3), depth + 1)
            props[name], valid_of[name], invalid_of[name] = sub, sv, si
        else:
            s, va, inv = rng.choice(ATOMS)
            props[name], valid_of[name], invalid_of[name] = copy.deepcopy(s), va, inv
    required = [n for n in names if rng.random() < 0.6]
    schema = {"type": "object", "properties": props, "required": required, "additionalProperties": False}
    valid = []
    for k in range(3):
        inst = {}
        for n in names:
            if n in required or (k == 0) or (k == 2 and rng.random() < 0.5):
                inst[n] = rng.choice(valid_of[n])
        valid.append(inst)
    invalid = []
    for n in required[:2]:
        inst = copy.deepcopy(valid[0])
        del inst[n]
        invalid.append(inst)
    for n in rng.sample(names, min(2, len(names))):
        inst = copy.deepcopy(valid[0])
        inst[n] = rng.choice(invalid_of[n])
        invalid.append(inst)
    inst = copy.deepcopy(valid[0])
    inst["unexpected_key"] = 1
    invalid.append(inst)
    invalid.append([])
    return schema, valid, invalid


def special_schemas():
    """Shapes a random draw rarely makes: refs, recursion, deep nesting, big enums."""
    address = {"type": "object", "properties": {"street": {"type": "string"}, "zip": {"type": "string",
               "pattern": "^\\d{5}$"}}, "required": ["street", "zip"], "additionalProperties": False}
    yield ("refs_defs", {"type": "object", "$defs": {"address": address},
                         "properties": {"home": {"$ref": "#/$defs/address"}, "work": {"$ref": "#/$defs/address"}},
                         "required": ["home"], "additionalProperties": False},
           [{"home": {"street": "1 Main St", "zip": "94103"}},
            {"home": {"street": "a", "zip": "00000"}, "work": {"street": "b", "zip": "11111"}}],
           [{"home": {"street": "1 Main St"}}, {"work": {"street": "x", "zip": "12345"}},
            {"home": {"street": "x", "zip": "1234"}}])
    tree = {"type": "object", "properties": {"value": {"type": "integer"},
            "children": {"type": "array", "items": {"$ref": "#"}}},
            "required": ["value", "children"], "additionalProperties": False}
    yield ("recursive_tree", tree,
           [{"value": 1, "children": []}, {"value": 1, "children": [{"value": 2, "children": [{"value": 3,
                                                                                             "children": []}]}]}],
           [{"value": 1}, {"value": 1, "children": [{"value": "2", "children": []}]}])
    deep = {"type": "string"}
    for i in range(6):
        deep = {"type": "object", "properties": {f"l{i}": deep}, "required": [f"l{i}"], "additionalProperties": False}
    inst = "leaf"
    for i in range(6):
        inst = {f"l{i}": inst}
    yield ("deep_nesting", deep, [inst], [{"l5": {"l4": "flat"}}])
    words = [f"option_{i:03d}" for i in range(300)]
    yield ("enum_300", {"type": "object", "properties": {"choice": {"enum": words}}, "required": ["choice"],
                        "additionalProperties": False},
           [{"choice": "option_000"}, {"choice": "option_299"}], [{"choice": "option_300"}, {"choice": "option"}])
    yield ("top_level_array", {"type": "array", "items": {"type": "string", "format": "date"}, "maxItems": 4},
           [["2024-01-01", "2024-12-31"], []], [["2024-01-01"] * 5, ["Jan 1"]])
    yield ("nullable_object", {"anyOf": [{"type": "null"}, {"type": "object", "properties": {"x": {"type": "integer"}},
                                                              "required": ["x"], "additionalProperties": False}]},
           [None, {"x": 1}], [{"x": None}, {}])
    yield ("number_bounds", {"type": "object", "properties": {
        "temperature": {"type": "number", "minimum": 0, "maximum": 2},
        "lat": {"type": "number", "minimum": -90, "maximum": 90},
        "price": {"type": "number", "exclusiveMinimum": 0},
        "delta": {"type": "number", "exclusiveMaximum": 0},
        "ratio": {"type": "number", "exclusiveMinimum": -1, "exclusiveMaximum": 1}},
        "required": ["temperature", "lat", "price", "delta"], "additionalProperties": False},
           [{"temperature": 0.7, "lat": -33.86, "price": 0.01, "delta": -0.5, "ratio": 0},
            {"temperature": 2, "lat": 90, "price": 1500, "delta": -3, "ratio": -0.999},
            {"temperature": 0, "lat": -90.0, "price": 12.5, "delta": -0.001, "ratio": 0.5},
            {"temperature": 2.0, "lat": 0, "price": 1, "delta": -1}],
           [{"temperature": 2.01, "lat": 0, "price": 1, "delta": -1},
            {"temperature": -0.1, "lat": 0, "price": 1, "delta": -1},
            {"temperature": 1, "lat": -90.5, "price": 1, "delta": -1},
            {"temperature": 1, "lat": 0, "price": 0, "delta": -1},
            {"temperature": 1, "lat": 0, "price": 1, "delta": 0},
            {"temperature": 1, "lat": 0, "price": 1, "delta": -1, "ratio": 1},
            {"temperature": 1, "lat": 0, "price": 1, "delta": -1, "ratio": -1.0}])
    # Intersections (toolgate's automata): a pattern or format with length bounds, a
    # pattern beside a format, multiples of a number, fractional bounds.
    yield ("pattern_with_lengths", {"type": "object", "properties": {
        "sku": {"type": "string", "pattern": "^[A-Z]{2,4}-\\d+$", "minLength": 6, "maxLength": 9},
        "slug": {"type": "string", "pattern": "[a-z]", "maxLength": 5},
        "tag": {"type": "string", "pattern": "^#", "minLength": 3}},
        "required": ["sku"], "additionalProperties": False},
           [{"sku": "AB-1234"}, {"sku": "ABCD-1234", "slug": "x1 \"q"}, {"sku": "AB-123", "tag": "#日本"},
            {"sku": "ABC-12", "slug": "a"}],
           [{"sku": "AB-1"}, {"sku": "ABCD-12345"}, {"sku": "AB-12345", "slug": "123456"},
            {"sku": "AB-1234", "slug": "12"}, {"sku": "AB-1234", "tag": "#a"}, {"sku": "AB-1234", "tag": "a#bc"}])
    yield ("format_with_lengths", {"type": "object", "properties": {
        "email": {"type": "string", "format": "email", "maxLength": 16},
        "day": {"type": "string", "format": "date", "pattern": "^2024-"},
        "site": {"type": "string", "format": "uri", "minLength": 12, "maxLength": 24}},
        "required": ["email"], "additionalProperties": False},
           [{"email": "a@b.io"}, {"email": "jo@example.com", "day": "2024-02-29"},
            {"email": "x@y.de", "site": "https://a.example"}],
           [{"email": "someone@example.com"}, {"email": "a@b.io", "day": "2023-01-01"},
            {"email": "a@b.io", "day": "2024-02-30"}, {"email": "a@b.io", "site": "http://a.b"},
            {"email": "a@b.io", "site": "https://a-very-long.example.com/x"}])
    yield ("multiples", {"type": "object", "properties": {
        "count": {"type": "integer", "multipleOf": 7, "minimum": -30, "maximum": 100},
        "price": {"type": "number", "multipleOf": 0.01, "minimum": 0},
        "step": {"type": "number", "multipleOf": 2.5},
        "n": {"type": "integer", "multipleOf": 11}},
        "required": ["count"], "additionalProperties": False},
           [{"count": 0}, {"count": -28, "price": 19.99}, {"count": 98, "price": 0.5, "step": -7.5},
            {"count": 7, "step": 10, "n": 121}, {"count": 14, "n": -33}],
           [{"count": 3}, {"count": 105}, {"count": -35}, {"count": 7, "price": 1.001},
            {"count": 7, "price": -1}, {"count": 7, "step": 1.25}, {"count": 7, "n": 12}])
    yield ("fractional_bounds", {"type": "object", "properties": {
        "ratio": {"type": "number", "exclusiveMinimum": 0.05, "maximum": 0.95},
        "lat": {"type": "number", "minimum": -90.5, "maximum": 90.5},
        "price": {"type": "number", "maximum": 99999999999.99},
        "temp": {"type": "number", "minimum": -0.25, "exclusiveMaximum": 0.5}},
        "required": ["ratio"], "additionalProperties": False},
           [{"ratio": 0.5}, {"ratio": 0.051, "lat": -90.5}, {"ratio": 0.95, "lat": 90.25, "price": 12.5},
            {"ratio": 0.06, "temp": -0.25}, {"ratio": 0.9, "temp": 0.4999}, {"ratio": 0.1, "price": 99999999999.99}],
           [{"ratio": 0.05}, {"ratio": 0.96}, {"ratio": 0.5, "lat": 90.51}, {"ratio": 0.5, "lat": -91},
            {"ratio": 0.5, "temp": 0.5}, {"ratio": 0.5, "temp": -0.3}, {"ratio": 0.5, "price": 100000000000}])
    # Written with ensure_ascii: \uXXXX escapes, surrogate pairs for the emoji.
    yield ("string_escapes", {"type": "string"}, ["é and \n", "\u0001 control", "quote \" backslash \\", "🎉"],
           [1])


def main():
    rng = random.Random(7)
    rows = []
    for name, schema, valid, invalid in special_schemas():
        rows.append((name, schema, valid, invalid))
    i = 0
    while len(rows) < 220:
        n = rng.choice([1, 1, 2, 2, 3, 3, 4, 5, 6])
        schema, valid, invalid = object_schema(rng, n)
        rows.append((f"tool_{i:03d}", schema, valid, invalid))
        i += 1
    with open(OUT, "w") as f:
        for name, schema, valid, invalid in rows:
            a = name == "string_escapes"
            v = [text(x, rng, a) for x in valid if check(schema, x, True)]
            inv = [text(x, rng, a) for x in invalid if check(schema, x, False)]
            # Dedupe, keep order.
            v = list(dict.fromkeys(v))
            inv = list(dict.fromkeys(inv))
            assert v, name
            f.write(json.dumps({"name": name, "schema": schema, "valid": v, "invalid": inv}, ensure_ascii=False)
                    + "\n")
    print(f"{len(rows)} schemas -> {OUT}")


if __name__ == "__main__":
    main()
