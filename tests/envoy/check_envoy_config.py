#!/usr/bin/env python3
"""Checks the Envoy configuration in a Markdown file against Envoy's own API.

    check_envoy_config.py FILE.md              check every marked block
    check_envoy_config.py --self-test FILE.md  and prove a misspelling fails

A block is a ```yaml fence right after a line `<!-- envoy-config -->`. Its
first line may name its type (`# envoy.config.bootstrap.v3.Bootstrap`);
without it the type is the one of a few usual top-level types whose fields
the block's keys are. The block is read with PyYAML and held to the rules of
protobuf's JSON mapping, which Envoy applies to YAML: every key a field of
its message (its proto name or its lowerCamelCase JSON name), durations as
strings such as "5s", enums by name, at most one field of a oneof, and each
`google.protobuf.Any` (`typed_config`, `typed_extension_protocol_options`'s
values, ...) read as the message its `@type` names, recursively. Then the
block is built into the envoy-data-plane message, serialized, parsed back,
and every Any in it unpacked. Any failure names the block and the path of
the field, and the script exits 1.

--self-test checks the file first, then misspells the first field of each
`typed_config` in turn (and breaks one duration) and expects each copy to
fail naming what was broken: the check cannot silently accept anything.
"""

import copy
import datetime
import importlib
import keyword
import re
import sys

import yaml

import betterproto2
from envoy_data_plane import message_pool as _edp_pool
from envoy_data_plane.google import protobuf as pb

MARKER = "<!-- envoy-config -->"
POOL = _edp_pool.default_message_pool
URL_PREFIX = "type.googleapis.com/"

# Types a block may be without a naming comment, tried in this order.
INFERABLE = [
    "envoy.config.bootstrap.v3.Bootstrap",
    "envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
    "envoy.config.listener.v3.Listener",
    "envoy.config.cluster.v3.Cluster",
    "envoy.config.route.v3.RouteConfiguration",
]

# protobuf JSON: "1.5s", "-0.000000001s"; up to nine fractional digits.
DURATION_RE = re.compile(r"^(-)?(\d+)(?:\.(\d{1,9}))?s$")
INT_TYPES = {
    betterproto2.TYPE_INT32: (-(2**31), 2**31 - 1),
    betterproto2.TYPE_SINT32: (-(2**31), 2**31 - 1),
    betterproto2.TYPE_SFIXED32: (-(2**31), 2**31 - 1),
    betterproto2.TYPE_UINT32: (0, 2**32 - 1),
    betterproto2.TYPE_FIXED32: (0, 2**32 - 1),
    betterproto2.TYPE_INT64: (-(2**63), 2**63 - 1),
    betterproto2.TYPE_SINT64: (-(2**63), 2**63 - 1),
    betterproto2.TYPE_SFIXED64: (-(2**63), 2**63 - 1),
    betterproto2.TYPE_UINT64: (0, 2**64 - 1),
    betterproto2.TYPE_FIXED64: (0, 2**64 - 1),
}
WRAPPER_SCALAR = {
    pb.BoolValue: betterproto2.TYPE_BOOL,
    pb.StringValue: betterproto2.TYPE_STRING,
    pb.BytesValue: betterproto2.TYPE_BYTES,
    pb.Int32Value: betterproto2.TYPE_INT32,
    pb.UInt32Value: betterproto2.TYPE_UINT32,
    pb.Int64Value: betterproto2.TYPE_INT64,
    pb.UInt64Value: betterproto2.TYPE_UINT64,
    pb.FloatValue: betterproto2.TYPE_FLOAT,
    pb.DoubleValue: betterproto2.TYPE_DOUBLE,
}


class ConfigError(Exception):
    pass


def full_name(cls):
    url = POOL.type_to_url.get(cls)
    return url[len(URL_PREFIX):] if url else cls.__name__


def resolve_type(name):
    """The envoy-data-plane class of a full proto name (or a type URL)."""
    name = name.split("/")[-1]
    url = URL_PREFIX + name
    if url not in POOL.url_to_type:
        # Import the longest package prefix that is a module: its import
        # registers its messages (nested ones as "Outer.Inner") in the pool.
        parts = name.split(".")
        for cut in range(len(parts) - 1, 0, -1):
            try:
                importlib.import_module("envoy_data_plane." + ".".join(parts[:cut]))
                break
            except ImportError:
                continue
    cls = POOL.url_to_type.get(url)
    if cls is None:
        raise ConfigError(f"unknown message type {name!r}")
    return cls


def proto_field_names(cls):
    """{accepted key: python field name}: the proto name and its JSON name."""
    names = {}
    for py_name in cls._betterproto.meta_by_field_name:
        proto = py_name
        if proto.endswith("_") and keyword.iskeyword(proto[:-1]):
            proto = proto[:-1]
        names[proto] = py_name
        json_name = re.sub(r"_([a-z0-9])", lambda m: m.group(1).upper(), proto)
        names[json_name] = py_name
    return names


def parse_duration(value, path):
    if not isinstance(value, str) or not DURATION_RE.match(value):
        raise ConfigError(f"{path}: a duration is a string like \"5s\" or \"0.25s\", not {value!r}")
    sign, whole, frac = DURATION_RE.match(value).groups()
    seconds = int(whole)
    nanos = int((frac or "").ljust(9, "0"))
    if sign:
        seconds, nanos = -seconds, -nanos
    if abs(seconds) > 315_576_000_000:
        raise ConfigError(f"{path}: duration {value!r} out of range")
    return {"seconds": seconds, "nanos": nanos}


def check_scalar(proto_type, value, path, enum_cls=None):
    """A protobuf-JSON scalar, normalized for betterproto2's from_dict."""
    if proto_type in INT_TYPES:
        if isinstance(value, bool) or not isinstance(value, (int, str)):
            raise ConfigError(f"{path}: expected an integer, got {value!r}")
        try:
            number = int(value)
        except ValueError:
            raise ConfigError(f"{path}: expected an integer, got {value!r}") from None
        lo, hi = INT_TYPES[proto_type]
        if not lo <= number <= hi:
            raise ConfigError(f"{path}: {number} is out of range [{lo}, {hi}]")
        return number
    if proto_type == betterproto2.TYPE_BOOL:
        if not isinstance(value, bool):
            raise ConfigError(f"{path}: expected true or false, got {value!r}")
        return value
    if proto_type == betterproto2.TYPE_STRING:
        if not isinstance(value, str):
            raise ConfigError(f"{path}: expected a string, got {value!r} (quote it)")
        return value
    if proto_type == betterproto2.TYPE_BYTES:
        if not isinstance(value, str):
            raise ConfigError(f"{path}: expected base64 text, got {value!r}")
        return value
    if proto_type in (betterproto2.TYPE_FLOAT, betterproto2.TYPE_DOUBLE):
        if isinstance(value, bool) or not isinstance(value, (int, float, str)):
            raise ConfigError(f"{path}: expected a number, got {value!r}")
        return value
    if proto_type == betterproto2.TYPE_ENUM:
        if isinstance(value, bool) or not isinstance(value, (int, str)):
            raise ConfigError(f"{path}: expected an enum name, got {value!r}")
        if isinstance(value, str):
            known = set(enum_cls.betterproto_renamed_proto_names_to_value())
            known |= {m.proto_name or m.name for m in enum_cls}
            if value not in known:
                raise ConfigError(
                    f"{path}: unknown value {value!r} of {enum_cls.__name__} "
                    f"(one of {', '.join(sorted(known))})"
                )
        return value
    raise ConfigError(f"{path}: unhandled field type {proto_type}")


def check_message(cls, value, path):
    """Validates value as cls in protobuf JSON; returns it normalized."""
    # Well-known types with a JSON form of their own.
    if cls is pb.Duration:
        return parse_duration(value, path)
    if cls in WRAPPER_SCALAR:
        if isinstance(value, dict):
            raise ConfigError(f"{path}: a {cls.__name__} is written as a bare value, not {value!r}")
        return check_scalar(WRAPPER_SCALAR[cls], value, path)
    if cls is pb.Timestamp:
        if not isinstance(value, (str, datetime.datetime)):
            raise ConfigError(f"{path}: a timestamp is an RFC 3339 string, not {value!r}")
        return value
    if cls is pb.Struct:
        if not isinstance(value, dict):
            raise ConfigError(f"{path}: expected a mapping, got {value!r}")
        return value
    if cls is pb.Value or cls is pb.ListValue:
        return value
    if cls is pb.Any:
        return check_any(value, path)

    if not isinstance(value, dict):
        raise ConfigError(f"{path}: expected a mapping for {full_name(cls)}, got {value!r}")
    meta_of = cls._betterproto.meta_by_field_name
    names = proto_field_names(cls)
    out = {}
    groups = {}
    for key, item in value.items():
        here = f"{path}.{key}" if path else str(key)
        py_name = names.get(key)
        if py_name is None:
            raise ConfigError(f"{here}: unknown field {key!r} in {full_name(cls)}")
        if py_name in out:
            raise ConfigError(f"{here}: field {py_name!r} given twice")
        meta = meta_of[py_name]
        if meta.group:
            if meta.group in groups:
                raise ConfigError(
                    f"{here}: {py_name!r} and {groups[meta.group]!r} are one oneof "
                    f"({meta.group}) of {full_name(cls)}: give one"
                )
            groups[meta.group] = py_name
        if item is None:
            continue  # protobuf JSON: null is the field's default
        out[py_name] = check_field(cls, py_name, meta, item, here)
    return out


def field_message_class(meta, field_cls):
    return meta.unwrap() if meta.unwrap else field_cls


def check_field(cls, py_name, meta, item, path):
    field_cls = cls._betterproto.cls_by_field[py_name]
    if meta.proto_type == betterproto2.TYPE_MAP:
        if not isinstance(item, dict):
            raise ConfigError(f"{path}: expected a mapping, got {item!r}")
        key_meta, value_meta = meta.map_meta
        value_cls = cls._betterproto.cls_by_field[f"{py_name}.value"]
        result = {}
        for k, v in item.items():
            kpath = f"{path}[{k!r}]"
            key = check_scalar(key_meta.proto_type, k if key_meta.proto_type != betterproto2.TYPE_STRING else str(k), kpath)
            result[key] = check_single(value_meta, value_cls, v, kpath)
        return result
    if meta.repeated:
        if not isinstance(item, list):
            raise ConfigError(f"{path}: expected a list, got {item!r}")
        return [check_single(meta, field_cls, v, f"{path}[{i}]") for i, v in enumerate(item)]
    return check_single(meta, field_cls, item, path)


def check_single(meta, field_cls, item, path):
    if meta.proto_type == betterproto2.TYPE_MESSAGE:
        return check_message(field_message_class(meta, field_cls), item, path)
    return check_scalar(meta.proto_type, item, path, enum_cls=field_cls)


def check_any(value, path):
    if not isinstance(value, dict) or "@type" not in value:
        raise ConfigError(f"{path}: a google.protobuf.Any needs an \"@type\", got {value!r}")
    url = value["@type"]
    if not isinstance(url, str) or "/" not in url:
        raise ConfigError(f"{path}.@type: not a type URL: {url!r}")
    try:
        cls = resolve_type(url)
    except ConfigError as e:
        raise ConfigError(f"{path}.@type: {e}") from None
    rest = {k: v for k, v in value.items() if k != "@type"}
    name = full_name(cls).rsplit(".", 1)[-1]
    inner_path = f"{path}<{name}>"
    special = cls is pb.Duration or cls in WRAPPER_SCALAR or cls in (pb.Timestamp, pb.Struct, pb.Value, pb.ListValue, pb.Any)
    if special:
        # Well-known types inside an Any keep their JSON form under "value".
        if set(rest) != {"value"}:
            raise ConfigError(f"{inner_path}: a packed {full_name(cls)} is {{\"@type\", \"value\"}}")
        return {"@type": url, "value": check_message(cls, rest["value"], inner_path + ".value")}
    out = check_message(cls, rest, inner_path)
    out["@type"] = url
    return out


def unpack_all(message, path):
    """Unpacks every Any in a built message, as Envoy will."""
    for py_name, meta in message._betterproto.meta_by_field_name.items():
        value = getattr(message, py_name)
        if meta.proto_type == betterproto2.TYPE_MAP:
            items = [(f"{path}.{py_name}[{k!r}]", v) for k, v in value.items()]
        elif meta.repeated:
            items = [(f"{path}.{py_name}[{i}]", v) for i, v in enumerate(value)]
        else:
            items = [(f"{path}.{py_name}", value)]
        for here, v in items:
            if isinstance(v, pb.Any):
                inner = v.unpack()
                if inner is None:
                    raise ConfigError(f"{here}: an Any without a type")
                unpack_all(inner, f"{here}<{type(inner).__name__}>")
            elif isinstance(v, betterproto2.Message):
                unpack_all(v, here)


def load_block(text):
    """Builds one block's message; raises ConfigError naming the field."""
    first = text.lstrip().splitlines()[0] if text.strip() else ""
    m = re.match(r"#\s*([A-Za-z_][\w.]*\.[A-Z]\w*)\s*$", first)
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise ConfigError(f"not YAML: {e}") from None
    if not isinstance(data, dict):
        raise ConfigError("the block is not a mapping")
    if m:
        cls = resolve_type(m.group(1))
    else:
        fits = [name for name in INFERABLE if set(data) <= set(proto_field_names(resolve_type(name)))]
        if not fits:
            raise ConfigError(
                "no '# <type>' comment on the first line, and the keys "
                f"{sorted(data)} are not those of any of {', '.join(INFERABLE)}"
            )
        cls = resolve_type(fits[0])
    normalized = check_message(cls, data, "")
    try:
        message = cls.from_dict(normalized)
        wire = bytes(message)
        again = cls.parse(wire)
    except Exception as e:  # pydantic or betterproto2 refusing a value
        raise ConfigError(f"{full_name(cls)} refused the block: {type(e).__name__}: {e}") from None
    if bytes(again) != wire:
        raise ConfigError(f"{full_name(cls)} did not survive a serialization round trip")
    unpack_all(again, full_name(cls).rsplit(".", 1)[-1])
    return cls, message


def find_blocks(markdown):
    """[(line number, yaml text)] of every block after the marker."""
    lines = markdown.splitlines()
    blocks = []
    i = 0
    while i < len(lines):
        if lines[i].strip() == MARKER:
            j = i + 1
            while j < len(lines) and not lines[j].strip():
                j += 1
            if j >= len(lines) or lines[j].strip() not in ("```yaml", "```yml"):
                raise ConfigError(f"line {i + 1}: {MARKER} is not followed by a ```yaml block")
            start = j + 1
            k = start
            while k < len(lines) and lines[k].strip() != "```":
                k += 1
            if k >= len(lines):
                raise ConfigError(f"line {j + 1}: the ```yaml block is never closed")
            blocks.append((start + 1, "\n".join(lines[start:k]) + "\n"))
            i = k
        i += 1
    return blocks


def check_file(path, quiet=False):
    with open(path, encoding="utf-8") as f:
        blocks = find_blocks(f.read())
    if not blocks:
        raise ConfigError(f"{path}: no {MARKER} block")
    for line, text in blocks:
        try:
            cls, _ = load_block(text)
        except ConfigError as e:
            raise ConfigError(f"{path}, block at line {line}: {e}") from None
        if not quiet:
            print(f"{path}, block at line {line}: a valid {full_name(cls)}")
    return blocks


def typed_configs(node, found):
    """Every Any-shaped mapping (with "@type") in a YAML tree, outermost first."""
    if isinstance(node, dict):
        if "@type" in node:
            found.append(node)
        for v in node.values():
            typed_configs(v, found)
    elif isinstance(node, list):
        for v in node:
            typed_configs(v, found)
    return found


def durations(node, found):
    """Every string value that is a protobuf duration, as (container, key)."""
    items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else []
    for k, v in items:
        if isinstance(v, str) and DURATION_RE.match(v):
            found.append((node, k))
        else:
            durations(v, found)
    return found


def self_test(path):
    blocks = check_file(path)
    mutations = 0
    for line, text in blocks:
        header = text.splitlines()[0] + "\n" if text.lstrip().startswith("#") else ""
        data = yaml.safe_load(text)
        n = len(typed_configs(data, []))
        for index in range(n):
            copy_ = copy.deepcopy(data)
            target = typed_configs(copy_, [])[index]
            # The first field misspelt; a message given empty gets one.
            key = next((k for k in target if k != "@type"), None)
            if key is None:
                key, target["enabled"] = "enabled", True
            wrong = key + "x"
            # Keep the key order: rebuild the mapping with the wrong name.
            items = [(wrong if k == key else k, v) for k, v in target.items()]
            target.clear()
            target.update(items)
            expect_failure(header + yaml.safe_dump(copy_, sort_keys=False), repr(wrong),
                           f"block at line {line}, {target['@type'].rsplit('.', 1)[-1]}.{key} misspelt {wrong}")
            mutations += 1
        found = durations(data, [])
        if found:
            copy_ = copy.deepcopy(data)
            container, key = durations(copy_, [])[0]
            broken = container[key][:-1]  # "5s" -> "5": protobuf JSON wants the unit
            container[key] = broken
            expect_failure(header + yaml.safe_dump(copy_, sort_keys=False), repr(broken),
                           f"block at line {line}, duration {key} written {broken!r}")
            mutations += 1
    if mutations == 0:
        raise ConfigError(f"{path}: nothing to mutate: the blocks have no typed_config")
    print(f"self-test: {mutations} broken copies of {path} each failed naming the fault")


def expect_failure(text, needle, what):
    try:
        load_block(text)
    except ConfigError as e:
        if needle not in str(e):
            raise ConfigError(f"self-test: {what}: failed, but without naming {needle}: {e}") from None
        return
    raise ConfigError(f"self-test: {what}: the check accepted it")


def main(argv):
    args = argv[1:]
    test = "--self-test" in args
    args = [a for a in args if a != "--self-test"]
    if len(args) != 1:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    try:
        if test:
            self_test(args[0])
        else:
            check_file(args[0])
    except ConfigError as e:
        print(f"check_envoy_config: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
