"""A parser for the MLIR that dtc models and dtc's --emit-mlir use.

It reads MLIR's generic op form (`%r = "dtc.matmul"(%a, %b) <{props}>
{attrs} : (T, T) -> T`, what `dtc compile --emit-mlir STAGE --emit-generic`
prints for every op, including `builtin.module` and `func.func`), and the
pretty `func.func @main(%x: T {attrs}, ...) -> T { ... return %v : T }` that
hand-written models use around generic ops. Attributes it needs are decoded
(strings, numbers, booleans, unit, arrays, dictionaries, `array<i64: ...>`,
`dense<...>` in all three spellings, types); anything else (`#dtc.sharding`,
symbol references, locations) is kept as its raw text.

Written from MLIR's documented syntax only; shares no code with dtc.
"""
import re
import struct

import numpy as np


class ParseError(Exception):
    pass


class TensorType:
    """`tensor<4x8xf32>`: shape and element type ('f32', 'i32', 'i64', ...)."""

    def __init__(self, shape, elem):
        self.shape = tuple(shape)
        self.elem = elem

    def __repr__(self):
        return "tensor<" + "".join(f"{d}x" for d in self.shape) + self.elem + ">"

    def __eq__(self, other):
        return isinstance(other, TensorType) and (self.shape, self.elem) == (other.shape, other.elem)

    def __hash__(self):
        return hash((self.shape, self.elem))

    @property
    def is_float(self):
        return self.elem in ("f32", "f16", "bf16", "f64")

    @property
    def numel(self):
        n = 1
        for d in self.shape:
            n *= d
        return n


class FunctionType:
    def __init__(self, inputs, results):
        self.inputs = list(inputs)
        self.results = list(results)

    def __repr__(self):
        return f"({', '.join(map(repr, self.inputs))}) -> ({', '.join(map(repr, self.results))})"


class ScalarType:
    """A non-tensor type such as `i64` or `f32` (as in `1 : i64`)."""

    def __init__(self, name):
        self.name = name

    def __repr__(self):
        return self.name

    def __eq__(self, other):
        return isinstance(other, ScalarType) and self.name == other.name

    def __hash__(self):
        return hash(self.name)


class Raw:
    """An attribute or type kept as text (not needed by the reference)."""

    def __init__(self, text):
        self.text = text

    def __repr__(self):
        return self.text


class Unit:
    def __repr__(self):
        return "unit"


UNIT = Unit()


class Typed:
    """A number with its type: `1 : i64`, `1.0e-05 : f32`."""

    def __init__(self, value, type):
        self.value = value
        self.type = type

    def __repr__(self):
        return f"{self.value} : {self.type}"


class Dense:
    """`dense<...> : tensor<...>` decoded to a numpy array of its values
    (f32 elements rounded to float32 and held as float64)."""

    def __init__(self, array, type):
        self.array = array
        self.type = type

    def __repr__(self):
        return f"dense<{self.array.tolist()}> : {self.type}"


class Op:
    def __init__(self, name, operands, results, result_types, props, attrs, regions):
        self.name = name
        self.operands = operands  # SSA names, e.g. '%3' or '%7#1'
        self.results = results  # SSA names of each result
        self.result_types = result_types
        self.props = props
        self.attrs = attrs
        self.regions = regions  # list of lists of Block

    def attr(self, key, default=None):
        """A property or attribute (generic form keeps op attributes in
        `<{...}>`, the pretty form in `{...}`)."""
        if key in self.props:
            return self.props[key]
        return self.attrs.get(key, default)

    def __repr__(self):
        return f"{', '.join(self.results)} = {self.name}({', '.join(self.operands)})"


class Block:
    def __init__(self, args, ops):
        self.args = args  # [(ssa name, type)]
        self.ops = ops


class Func:
    """One function: arguments with their attribute dictionaries, the ops of
    its single block, the returned SSA names and result attributes."""

    def __init__(self, name, args, arg_attrs, result_types, result_attrs, ops, returned):
        self.name = name
        self.args = args  # [(ssa name, TensorType)]
        self.arg_attrs = arg_attrs  # [dict]
        self.result_types = result_types
        self.result_attrs = result_attrs  # [dict]
        self.ops = ops
        self.returned = returned  # [ssa name]

    def arg_name(self, i):
        """dtc.name of argument i (model-format default: argN)."""
        return self.arg_attrs[i].get("dtc.name", f"arg{i}")


class Module:
    def __init__(self, funcs, attrs):
        self.funcs = funcs
        self.attrs = attrs

    def func(self, name):
        if name not in self.funcs:
            raise ParseError(f"no function @{name} (have {sorted(self.funcs)})")
        return self.funcs[name]


_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_$.\-]*")
_NUMBER = re.compile(r"[-+]?(0x[0-9A-Fa-f]+|(\d+\.?\d*([eE][-+]?\d+)?))")
_SSA = re.compile(r"%[A-Za-z0-9_$.\-]+(:\d+|#\d+)?")


class Parser:
    def __init__(self, text):
        self.s = text
        self.i = 0

    # ---- characters -------------------------------------------------------
    def error(self, msg):
        line = self.s.count("\n", 0, self.i) + 1
        col = self.i - (self.s.rfind("\n", 0, self.i) + 1) + 1
        raise ParseError(f"line {line}:{col}: {msg} (at {self.s[self.i:self.i + 40]!r})")

    def ws(self):
        while self.i < len(self.s):
            c = self.s[self.i]
            if c in " \t\r\n":
                self.i += 1
            elif self.s.startswith("//", self.i):
                j = self.s.find("\n", self.i)
                self.i = len(self.s) if j < 0 else j + 1
            else:
                break

    def peek(self, text):
        self.ws()
        return self.s.startswith(text, self.i)

    def accept(self, text):
        if self.peek(text):
            self.i += len(text)
            return True
        return False

    def expect(self, text):
        if not self.accept(text):
            self.error(f"expected {text!r}")

    def regex(self, pattern, what):
        self.ws()
        m = pattern.match(self.s, self.i)
        if not m:
            self.error(f"expected {what}")
        self.i = m.end()
        return m.group(0)

    def string(self):
        self.ws()
        if self.s[self.i] != '"':
            self.error("expected a string")
        j = self.i + 1
        out = []
        while self.s[j] != '"':
            if self.s[j] == "\\":
                nxt = self.s[j + 1]
                if nxt in '"\\':
                    out.append(nxt)
                    j += 2
                elif nxt == "n":
                    out.append("\n")
                    j += 2
                elif nxt == "t":
                    out.append("\t")
                    j += 2
                else:
                    out.append(chr(int(self.s[j + 1:j + 3], 16)))
                    j += 3
            else:
                out.append(self.s[j])
                j += 1
        self.i = j + 1
        return "".join(out)

    def balanced(self, open_, close):
        """Raw text from an opening bracket to its match (inclusive)."""
        self.ws()
        start = self.i
        if self.s[self.i] != open_:
            self.error(f"expected {open_!r}")
        depth = 0
        while self.i < len(self.s):
            c = self.s[self.i]
            if c == '"':
                self.string()
                continue
            if c in "<([{":
                depth += 1
            elif c in ">)]}" and not (c == ">" and self.s[self.i - 1] == "-"):
                depth -= 1
                if depth == 0:
                    self.i += 1
                    return self.s[start:self.i]
            self.i += 1
        self.error("unbalanced brackets")

    # ---- types ------------------------------------------------------------
    def type(self):
        self.ws()
        if self.peek("("):
            self.expect("(")
            inputs = []
            if not self.accept(")"):
                inputs.append(self.type())
                while self.accept(","):
                    inputs.append(self.type())
                self.expect(")")
            self.expect("->")
            return FunctionType(inputs, self.result_types())
        if self.peek("tensor<"):
            self.expect("tensor<")
            body = self.s[self.i:self.s.index(">", self.i)]
            self.i += len(body) + 1
            parts = body.split("x")
            dims = []
            for p in parts[:-1]:
                if not p.isdigit():
                    raise ParseError(f"dynamic or malformed tensor shape tensor<{body}>")
                dims.append(int(p))
            return TensorType(dims, parts[-1].strip())
        if self.peek("!"):
            self.i += 1
            name = self.regex(_IDENT, "a dialect type")
            if self.peek("<"):
                name += self.balanced("<", ">")
            return Raw("!" + name)
        return ScalarType(self.regex(_IDENT, "a type"))

    def result_types(self):
        if self.accept("("):
            types = []
            if not self.accept(")"):
                types.append(self.type())
                while self.accept(","):
                    types.append(self.type())
                self.expect(")")
            return types
        return [self.type()]

    # ---- attributes -------------------------------------------------------
    def dict_attr(self):
        self.expect("{")
        out = {}
        if self.accept("}"):
            return out
        while True:
            self.ws()
            key = self.string() if self.peek('"') else self.regex(_IDENT, "an attribute name")
            out[key] = self.attribute() if self.accept("=") else UNIT
            if self.accept("}"):
                return out
            self.expect(",")

    def number(self):
        text = self.regex(_NUMBER, "a number")
        return text

    def attribute(self):
        self.ws()
        c = self.s[self.i]
        if c == '"':
            value = self.string()
            if self.accept(":"):
                self.type()
            return value
        if c == "{":
            return self.dict_attr()
        if c == "[":
            self.expect("[")
            items = []
            if not self.accept("]"):
                items.append(self.attribute())
                while self.accept(","):
                    items.append(self.attribute())
                self.expect("]")
            return items
        if c == "-" or c == "+" or c.isdigit():
            text = self.number()
            type = self.type() if self.accept(":") else None
            return Typed(_number_value(text, type), type)
        if self.peek("dense<"):
            self.expect("dense")
            body = self.balanced("<", ">")[1:-1]
            self.expect(":")
            type = self.type()
            return Dense(_dense_array(body, type), type)
        if self.peek("array<"):
            self.expect("array<")
            elem = self.regex(_IDENT, "an element type")
            values = []
            if self.accept(":"):
                values.append(_number_value(self.number(), ScalarType(elem)))
                while self.accept(","):
                    values.append(_number_value(self.number(), ScalarType(elem)))
            self.expect(">")
            return values
        if self.peek("true") and not self.s[self.i + 4:self.i + 5].isalnum():
            self.i += 4
            return True
        if self.peek("false") and not self.s[self.i + 5:self.i + 6].isalnum():
            self.i += 5
            return False
        if self.peek("unit") and not self.s[self.i + 4:self.i + 5].isalnum():
            self.i += 4
            return UNIT
        if c in "#@":
            start = self.i
            self.i += 1
            if self.s[self.i] == '"':
                self.string()
            else:
                self.regex(_IDENT, "a name")
            while self.peek("::@"):
                self.expect("::@")
                self.regex(_IDENT, "a name")
            if self.s.startswith("<", self.i):
                self.balanced("<", ">")
            return Raw(self.s[start:self.i])
        if c == "(" or self.peek("tensor<") or _IDENT.match(self.s, self.i):
            return self.type()
        self.error("expected an attribute")

    def skip_location(self):
        if self.peek("loc("):
            self.expect("loc")
            self.balanced("(", ")")

    # ---- ops --------------------------------------------------------------
    def ssa(self):
        return self.regex(_SSA, "an SSA value")

    def op(self):
        results = []
        if self.peek("%"):
            results.append(self.ssa())
            while self.accept(","):
                results.append(self.ssa())
            self.expect("=")
        self.ws()
        if self.peek('"'):
            return self.generic_op(results)
        name = self.regex(_IDENT, "an op name")
        if name == "func.func":
            return self.pretty_func()
        if name in ("return", "func.return"):
            operands, types = [], []
            if self.peek("%"):
                operands.append(self.ssa())
                while self.accept(","):
                    operands.append(self.ssa())
                self.expect(":")
                types.append(self.type())
                while self.accept(","):
                    types.append(self.type())
            self.skip_location()
            return Op("func.return", operands, [], [], {}, {}, [])
        if name == "module" or name == "builtin.module":
            attrs = {}
            if self.accept("attributes"):
                attrs = self.dict_attr()
            regions = [self.region()]
            self.skip_location()
            return Op("builtin.module", [], [], [], {}, attrs, regions)
        if name == "arith.constant":
            attrs = self.dict_attr() if self.peek("{") else {}
            value = self.attribute()
            self.skip_location()
            return Op("arith.constant", [], _expand(results, 1), [value.type], {"value": value}, attrs, [])
        self.error(f"op {name} is not in generic form")

    def generic_op(self, results):
        name = self.string()
        self.expect("(")
        operands = []
        if not self.accept(")"):
            operands.append(self.ssa())
            while self.accept(","):
                operands.append(self.ssa())
            self.expect(")")
        if self.peek("["):
            self.balanced("[", "]")  # successors: none in dtc's IR
        props = {}
        if self.accept("<"):
            props = self.dict_attr()
            self.expect(">")
        regions = []
        if self.peek("({"):
            self.expect("(")
            regions.append(self.region())
            while self.accept(","):
                regions.append(self.region())
            self.expect(")")
        attrs = self.dict_attr() if self.peek("{") else {}
        self.expect(":")
        ftype = self.type()
        self.skip_location()
        if not isinstance(ftype, FunctionType):
            self.error("expected a function type")
        return Op(name, operands, _expand(results, len(ftype.results)), ftype.results, props, attrs, regions)

    def region(self):
        self.expect("{")
        blocks = []
        args, ops = [], []
        while not self.accept("}"):
            if self.peek("^"):
                if ops or args:
                    blocks.append(Block(args, ops))
                    args, ops = [], []
                self.regex(re.compile(r"\^[A-Za-z0-9_]+"), "a block label")
                if self.accept("("):
                    if not self.accept(")"):
                        while True:
                            name = self.ssa()
                            self.expect(":")
                            args.append((name, self.type()))
                            self.skip_location()
                            if self.accept(")"):
                                break
                            self.expect(",")
                self.expect(":")
                continue
            ops.append(self.op())
        blocks.append(Block(args, ops))
        return blocks

    def pretty_func(self):
        self.ws()
        if self.accept("private"):
            pass
        self.expect("@")
        name = self.regex(_IDENT, "a function name")
        self.expect("(")
        args, arg_attrs = [], []
        if not self.accept(")"):
            while True:
                ssa = self.ssa()
                self.expect(":")
                t = self.type()
                attrs = self.dict_attr() if self.peek("{") else {}
                self.skip_location()
                args.append((ssa, t))
                arg_attrs.append(attrs)
                if self.accept(")"):
                    break
                self.expect(",")
        result_types, result_attrs = [], []
        if self.accept("->"):
            if self.accept("("):
                while True:
                    result_types.append(self.type())
                    result_attrs.append(self.dict_attr() if self.peek("{") else {})
                    if self.accept(")"):
                        break
                    self.expect(",")
            else:
                result_types.append(self.type())
                result_attrs.append({})
        fattrs = {}
        if self.accept("attributes"):
            fattrs = self.dict_attr()
        body = self.region()
        self.skip_location()
        if len(body) != 1:
            self.error("functions with several blocks are not supported")
        body[0].args = args
        return _make_func(name, fattrs, body[0], arg_attrs, result_types, result_attrs)


def _expand(results, count):
    """`%0:3` names three results `%0#0`, `%0#1`, `%0#2`."""
    out = []
    for r in results:
        if ":" in r:
            base, n = r.split(":")
            out += [f"{base}#{k}" for k in range(int(n))]
        else:
            out.append(r)
    if len(out) != count:
        if len(out) == 1 and count > 1:
            return [f"{out[0]}#{k}" for k in range(count)]
        raise ParseError(f"{len(out)} result names for {count} results")
    return out


def _make_func(name, fattrs, block, arg_attrs, result_types, result_attrs):
    ops = list(block.ops)
    if not ops or ops[-1].name != "func.return":
        raise ParseError(f"@{name} does not end with a return")
    ret = ops.pop()
    f = Func(name, block.args, arg_attrs, result_types, result_attrs, ops, ret.operands)
    f.attrs = fattrs
    return f


def _func_from_generic(op):
    props = dict(op.attrs)
    props.update(op.props)
    name = props["sym_name"]
    ftype = props["function_type"]
    n_in, n_out = len(ftype.inputs), len(ftype.results)
    arg_attrs = props.get("arg_attrs") or [{} for _ in range(n_in)]
    res_attrs = props.get("res_attrs") or [{} for _ in range(n_out)]
    block = op.regions[0][0]
    return _make_func(name, props, block, arg_attrs, ftype.results, res_attrs)


def _number_value(text, type):
    name = type.name if isinstance(type, ScalarType) else None
    is_float = name in ("f32", "f64", "f16", "bf16") or (
        name is None and ("." in text or "e" in text.lower()) and not text.lower().startswith(("0x", "-0x")))
    if text.lower().startswith(("0x", "-0x")):
        bits = int(text, 16)
        if name == "f32":
            return float(struct.unpack("<f", struct.pack("<I", bits & 0xFFFFFFFF))[0])
        if name == "f64":
            return float(struct.unpack("<d", struct.pack("<Q", bits & (2**64 - 1)))[0])
        return bits
    if is_float:
        v = float(text)
        return float(np.float32(v)) if name == "f32" else v
    return int(text)


_DTYPES = {"f32": np.float32, "f64": np.float64, "i32": np.int32, "i64": np.int64,
           "i1": np.bool_, "f16": np.float16}


def _dense_array(body, type):
    """The values of `dense<body> : type` as a numpy array of type's shape
    (float64 for float element types, after rounding to the element type)."""
    if not isinstance(type, TensorType):
        raise ParseError(f"dense attribute of non-tensor type {type}")
    body = body.strip()
    if body.startswith('"0x') or body.startswith('"0X'):
        raw = bytes.fromhex(body[3:-1])
        dt = np.dtype(_DTYPES[type.elem]).newbyteorder("<")
        if len(raw) == dt.itemsize:  # a splat
            arr = np.full(type.shape, np.frombuffer(raw, dtype=dt)[0])
        else:
            arr = np.frombuffer(raw, dtype=dt).reshape(type.shape)
    else:
        tokens = re.findall(r"\(|\)|true|false|[-+]?0x[0-9A-Fa-f]+|[-+]?[0-9.]+(?:[eE][-+]?\d+)?|inf|nan", body)
        values = []
        for t in tokens:
            if t in "()":
                raise ParseError("complex dense values are not supported")
            if t in ("true", "false"):
                values.append(1 if t == "true" else 0)
            else:
                values.append(_number_value(t, ScalarType(type.elem)))
        if len(values) == 1:
            arr = np.full(type.shape, values[0])
        else:
            if len(values) != type.numel:
                raise ParseError(f"dense of {len(values)} values for {type}")
            arr = np.array(values).reshape(type.shape)
        arr = arr.astype(_DTYPES.get(type.elem, np.float64))
    if type.is_float:
        return arr.astype(np.float32).astype(np.float64) if type.elem == "f32" else arr.astype(np.float64)
    return arr.astype(np.int64)


def parse_module(text):
    """Parses a module (or a bare list of functions, as hand-written models
    often are) and returns a Module of its functions."""
    p = Parser(text)
    ops = []
    while True:
        p.ws()
        if p.i >= len(p.s):
            break
        ops.append(p.op())
    funcs, attrs = {}, {}

    def collect(op_list):
        for op in op_list:
            if isinstance(op, Func):
                funcs[op.name] = op
            elif op.name == "builtin.module":
                attrs.update(op.attrs)
                attrs.update(op.props)
                for block in op.regions[0]:
                    collect(block.ops)
            elif op.name == "func.func":
                f = _func_from_generic(op)
                funcs[f.name] = f
    collect(ops)
    return Module(funcs, attrs)
